"""The hook recipes in docs/hooks/: the bash wrapper end to end against a running server."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.servicekit import OOM, ROOT, LiveServer

# slow: live servers, and the shell hooks run as real processes (py-spy on real ranks)
pytestmark = pytest.mark.slow

HOOKS = ROOT / "docs" / "hooks"
WRAP = HOOKS / "logtriage-wrap.sh"
VENV_BIN = str(Path(sys.executable).parent)


def wrap(server: LiveServer, *cmd: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    full["PATH"] = f"{VENV_BIN}:{full.get('PATH', '/usr/bin:/bin')}"
    full["LOGTRIAGE_URL"] = server.url
    full.update(env)
    return subprocess.run(["bash", str(WRAP), *cmd], capture_output=True, text=True, env=full, timeout=180)


def job_analyses(client: httpx.Client, job_id: str) -> list[dict]:  # type: ignore[type-arg]
    return client.get("/api/v1/analyses", params={"job_id": job_id}).json()["items"]  # type: ignore[no-any-return]


PY_FAIL = f"import sys; print('step 1'); print({OOM.format(gib='1.96')!r}, end=''); sys.exit(3)"


def test_wrapper_keeps_exit_status_and_submits_failures(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    res = wrap(server, sys.executable, "-c", PY_FAIL, LOGTRIAGE_JOB_ID="wrap-fail", TMPDIR=str(tmp_path))
    assert res.returncode == 3, res.stderr
    assert "step 1" in res.stdout and "CUDA out of memory" in res.stdout  # the job's output still shows
    assert "root cause:" in res.stderr and "report: http://127.0.0.1" in res.stderr
    [a] = job_analyses(client, "wrap-fail")
    assert a["metadata"]["exit_code"] == 3 and a["failure_class"] == "cuda.out_of_memory"
    assert a["metadata"]["source"] == "cli"
    assert not list(tmp_path.glob("logtriage-*"))


def test_wrapper_success_does_not_submit(server: LiveServer, client: httpx.Client) -> None:
    res = wrap(server, sys.executable, "-c", "print('fine')", LOGTRIAGE_JOB_ID="wrap-ok")
    assert res.returncode == 0 and res.stdout == "fine\n" and res.stderr == ""
    assert job_analyses(client, "wrap-ok") == []


def test_wrapper_catches_a_masked_exit_status(server: LiveServer, client: httpx.Client) -> None:
    # the job itself masks its failure (`python train.py | tee`): exit 0 with a fatal error in the log
    masked = f'{sys.executable} -c "{PY_FAIL}" | tee /dev/null'
    res = wrap(server, "bash", "-c", masked, LOGTRIAGE_JOB_ID="wrap-masked", LOGTRIAGE_SUBMIT="always")
    assert res.returncode == 0, res.stderr
    [a] = job_analyses(client, "wrap-masked")
    full = client.get(a["links"]["self"]).json()
    assert "job.exit_status_masked" in {f["failure_class"] for f in full["findings"]}


def test_wrapper_curl_fallback_and_kept_log(server: LiveServer, client: httpx.Client, tmp_path: Path) -> None:
    log = tmp_path / "kept.log"
    res = wrap(
        server,
        sys.executable,
        "-c",
        PY_FAIL,
        LOGTRIAGE_JOB_ID="wrap-curl",
        LOGTRIAGE_BIN="/nonexistent/logtriage",
        LOGTRIAGE_LOG=str(log),
    )
    assert res.returncode == 3, res.stderr
    assert "root cause: CUDA out of memory" in res.stderr or "root cause:" in res.stderr
    assert "report: http://127.0.0.1" in res.stderr
    assert log.read_text().startswith("step 1")
    [a] = job_analyses(client, "wrap-curl")
    assert a["metadata"]["exit_code"] == 3 and a["metadata"]["source"] == "api"


def test_wrapper_unreachable_service_keeps_status(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env.update(
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
        LOGTRIAGE_URL="http://127.0.0.1:9",
        LOGTRIAGE_SUBMIT_ARGS="--retries 0",
    )
    res = subprocess.run(
        ["bash", str(WRAP), "bash", "-c", "echo boom; exit 7"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert res.returncode == 7
    assert "submit failed" in res.stderr


def test_other_recipes_are_valid() -> None:
    for script in ("logtriage-wrap.sh", "slurm-epilog.sh", "logtriage-retry.sh"):
        subprocess.run(["bash", "-n", str(HOOKS / script)], check=True)
    py_compile.compile(str(HOOKS / "ray_job_driver.py"), doraise=True)
    py_compile.compile(str(FAKE_RAY / "ray" / "job_submission.py"), doraise=True)
    wf = yaml.safe_load((HOOKS / "argo-onexit.yaml").read_text())
    assert wf["spec"]["onExit"] == "logtriage-on-exit"
    # the acting variant: Argo retries only the retry decisions, off the failed node
    acting = next(t for t in wf["spec"]["templates"] if t["name"] == "train-acting")
    assert acting["retryStrategy"]["expression"] == "asInt(lastRetry.exitCode) in [10, 11]"
    assert acting["retryStrategy"]["affinity"] == {"nodeAntiAffinity": {}}
    assert "--action-exit" in acting["container"]["args"][0]
    docs = (ROOT / "docs" / "hooks.md").read_text()
    for name in (
        "logtriage-wrap.sh",
        "slurm-epilog.sh",
        "ray_job_driver.py",
        "argo-onexit.yaml",
        "logtriage-retry.sh",
    ):
        assert name in docs


# --- docs/hooks/pyspy-ranks.sh: the ranks' stacks when a job hangs ------------------------------------

HANG = """
import os, sys, time
def gather_object():  # rank 0: waits for the others in a gather only it calls
    open(sys.argv[1] + ".in", "w").close()
    while True:
        time.sleep(0.2)
def barrier():  # the other ranks skipped the gather and wait in the next barrier
    open(sys.argv[1] + ".in", "w").close()
    while True:
        time.sleep(0.2)
def save_checkpoint():
    gather_object() if os.environ["RANK"] == "0" else barrier()
save_checkpoint()
"""


def test_pyspy_hook_dumps_each_rank_and_the_report_names_the_odd_one(tmp_path: Path) -> None:
    import shutil

    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.scan import CompiledLibrary
    from app.engine.pipeline.triage import TriageOptions, triage

    pyspy = shutil.which("py-spy", path=VENV_BIN) or shutil.which("py-spy")
    if pyspy is None:
        import pytest

        pytest.skip("py-spy is not installed (dev extra)")
    script = tmp_path / "hang_job.py"
    script.write_text(HANG)
    procs = []
    try:
        for rank in range(3):
            env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            marker = tmp_path / f"r{rank}"
            procs.append((subprocess.Popen([sys.executable, str(script), str(marker)], env=env), marker))
        for p, marker in procs:  # wait until each rank is inside its blocking call
            waited = subprocess.run(
                [
                    "bash",
                    "-c",
                    f'for i in $(seq 600); do [ -e "{marker}.in" ] && exit 0; sleep 0.1; done; exit 1',
                ],
                timeout=120,
            )
            assert waited.returncode == 0 and p.poll() is None
        out = tmp_path / "dumps"
        env = {**os.environ, "PYSPY": pyspy}
        res = subprocess.run(
            ["bash", str(HOOKS / "pyspy-ranks.sh"), "--out", str(out), "--match", "hang_job"],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
        dumps = sorted(out.glob("pyspy_rank*.txt"))
        texts = [d.read_text() for d in dumps]
        if any("Permission denied" in t or "Operation not permitted" in t for t in texts):
            import pytest

            pytest.skip("py-spy may not ptrace here (needs root or CAP_SYS_PTRACE, see docs/hooks.md)")
        assert res.returncode == 0, res.stderr
        assert [d.name for d in dumps] == ["pyspy_rank0.txt", "pyspy_rank1.txt", "pyspy_rank2.txt"]
        assert "gather_object (hang_job.py" in texts[0] and "barrier (hang_job.py" in texts[1]
    finally:
        for p, _m in procs:
            p.kill()
            p.wait(timeout=30)
    sources, _ = collect_sources([str(d) for d in dumps])
    a = triage(sources=sources, compiled=CompiledLibrary(load_library(None)), options=TriageOptions(jobs=1))
    stacks = a.timeline["stacks"]
    assert stacks["ranks"] == [0, 1, 2] and stacks["odd_ranks"] == [0]
    assert a.root_cause is not None and a.root_cause.failure_class == "dist.collective_mismatch"
    assert a.timeline["verdict"]["ranks"] == [0] and a.timeline["verdict"]["phase"] == "checkpoint"


def test_pyspy_hook_without_ranks_says_so(tmp_path: Path) -> None:
    res = subprocess.run(
        ["bash", str(HOOKS / "pyspy-ranks.sh"), "--out", str(tmp_path), "--match", "no-such-job-xyz"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPY": "true"},
        timeout=60,
    )
    assert res.returncode == 1 and "no rank process found" in res.stderr


# --- hooks that act: docs/hooks/logtriage-retry.sh against the real service -------------------

RETRY = HOOKS / "logtriage-retry.sh"
CLUSTER = ROOT / "tests" / "hooks" / "fake_cluster.py"


def retry(
    server: LiveServer, tmp_path: Path, job: str, fault: str, **env: str
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    full["PATH"] = f"{VENV_BIN}:{full.get('PATH', '/usr/bin:/bin')}"
    full.update(LOGTRIAGE_URL=server.url, LOGTRIAGE_JOB_ID=job, LOGTRIAGE_BACKOFF="0", **env)
    cmd = (
        f"{sys.executable} {CLUSTER} --nodes 10.5.0.1,10.5.0.2 --bad 10.5.0.1 --fault {fault} "
        f'--state {tmp_path / (job + ".runs")} --exclude "${{LOGTRIAGE_EXCLUDE_HOSTS}}"'
    )
    return subprocess.run(["bash", str(RETRY), cmd], capture_output=True, text=True, env=full, timeout=300)


def outcomes_of(client: httpx.Client, job: str) -> list[tuple[str, str, list[str]]]:
    rows = client.get(f"/api/v1/jobs/{job}/outcomes").json()
    return [(o["status"], o["action"], o["excluded_hosts"]) for o in rows]


def test_retry_hook_runs_a_gpu_fault_again_without_the_node(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    job = "retry-ecc"
    res = retry(server, tmp_path, job, "ecc")
    assert res.returncode == 0, res.stderr
    assert "decision retry_excluding without 10.5.0.1" in res.stderr
    assert "[10.5.0.2] run 2: training finished" in res.stdout
    assert len(job_analyses(client, job)) == 1
    assert outcomes_of(client, job) == [("succeeded", "retry_excluding", ["10.5.0.1"])]


def test_retry_hook_never_reruns_a_config_fault(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    job = "retry-oom"
    res = retry(server, tmp_path, job, "oom")
    assert res.returncode == 1, res.stderr
    assert "not running it again (decision fix_and_rerun)" in res.stderr
    assert (tmp_path / f"{job}.runs").read_text() == "1"
    assert outcomes_of(client, job) == []


def test_retry_hook_retries_a_passing_timeout_and_spends_its_budget_on_one_that_stays(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    once = retry(server, tmp_path, "retry-flap", "timeout-once")
    assert once.returncode == 0, once.stderr
    assert "decision retry;" in once.stderr
    assert outcomes_of(client, "retry-flap") == [("succeeded", "retry", [])]
    stays = retry(server, tmp_path, "retry-stuck", "timeout", LOGTRIAGE_MAX_ATTEMPTS="2")
    assert stays.returncode == 1
    assert "the budget (LOGTRIAGE_MAX_ATTEMPTS=2) is spent" in stays.stderr
    assert (tmp_path / "retry-stuck.runs").read_text() == "2"
    assert outcomes_of(client, "retry-stuck") == [("failed", "retry", [])]
    assert len(job_analyses(client, "retry-stuck")) == 2


def test_retry_hook_stops_when_the_service_is_away(tmp_path: Path) -> None:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    full["PATH"] = f"{VENV_BIN}:{full.get('PATH', '/usr/bin:/bin')}"
    full.update(
        LOGTRIAGE_URL="http://127.0.0.1:9", LOGTRIAGE_SUBMIT_ARGS="--deadline 1", LOGTRIAGE_BACKOFF="0"
    )
    cmd = f"{sys.executable} {CLUSTER} --nodes a --fault oom --state {tmp_path / 'x.runs'}"
    res = subprocess.run(["bash", str(RETRY), cmd], capture_output=True, text=True, env=full, timeout=120)
    assert res.returncode == 1 and "not running it again (decision none)" in res.stderr


# --- the SLURM epilog acting on the decision (LOGTRIAGE_REQUEUE=1), with a stand-in scontrol ----

FAKE_SCONTROL = ROOT / "tests" / "hooks" / "fake_scontrol.py"


def _wait_until(pred, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _epilog(server: LiveServer, tmp_path: Path, job: str, state: dict) -> subprocess.CompletedProcess[str]:  # type: ignore[type-arg]
    import json
    import socket

    fakebin = tmp_path / "bin"
    fakebin.mkdir(exist_ok=True)
    if not (fakebin / "scontrol").exists():
        (fakebin / "scontrol").symlink_to(FAKE_SCONTROL)
    state_file = tmp_path / f"{job}.json"
    state.setdefault("BatchHost", socket.gethostname())
    state_file.write_text(json.dumps(state))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGTRIAGE_", "SLURM_"))}
    env.update(
        SLURM_JOB_ID=job,
        LOGTRIAGE_URL=server.url,
        LOGTRIAGE_BIN=str(Path(VENV_BIN) / "logtriage"),
        LOGTRIAGE_REQUEUE="1",
        LOGTRIAGE_PATH=f"{fakebin}:/usr/bin:/bin",
        LOGTRIAGE_EPILOG_LOG=str(tmp_path / "epilog.log"),
        FAKE_SLURM_STATE=str(state_file),
    )
    return subprocess.run(
        ["bash", str(HOOKS / "slurm-epilog.sh")], capture_output=True, text=True, env=env, timeout=120
    )


def _state(tmp_path: Path, job: str) -> dict:  # type: ignore[type-arg]
    import json

    return json.loads((tmp_path / f"{job}.json").read_text())  # type: ignore[no-any-return]


def _slurm_job(tmp_path: Path, failure: str) -> tuple[str, dict]:  # type: ignore[type-arg]
    """A failed batch job's id and its scontrol fields, its output a training log ending in `failure`."""
    import uuid

    from tests.servicekit import training_log

    job = f"7{uuid.uuid4().int % 10**7}"
    out = tmp_path / f"slurm-{job}.out"
    out.write_text(training_log(failure, job=job))
    return job, {"JobId": job, "ExitCode": "1:0", "StdOut": str(out), "StdErr": str(out), "Partition": "gpu"}


def test_slurm_epilog_requeues_a_gpu_fault_without_its_node_and_reports_how_it_ended(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    from tests.servicekit import ECC

    job, base = _slurm_job(tmp_path, ECC.format(ip="10.8.0.3"))
    res = _epilog(server, tmp_path, job, {**base, "Restarts": 0, "ExcNodeList": "(null)"})
    assert res.returncode == 0, res.stderr
    _wait_until(lambda: _state(tmp_path, job).get("requeued") == 1, "the requeue")
    st = _state(tmp_path, job)
    assert st["ExcNodeList"] == "10.8.0.3" and st["Restarts"] == 1
    assert ["update", f"JobId={job}", "ExcNodeList=10.8.0.3"] in st["calls"]
    # the requeued attempt passes: the epilog of that attempt reports it (nothing to requeue)
    res = _epilog(
        server, tmp_path, job, {**base, "ExitCode": "0:0", "Restarts": 1, "ExcNodeList": "10.8.0.3"}
    )
    assert res.returncode == 0
    _wait_until(lambda: client.get(f"/api/v1/jobs/{job}/outcomes").json() != [], "the outcome")
    assert [
        (o["status"], o["action"], o["excluded_hosts"])
        for o in client.get(f"/api/v1/jobs/{job}/outcomes").json()
    ] == [("succeeded", "retry_excluding", ["10.8.0.3"])]


def test_slurm_epilog_leaves_a_config_fault_failed(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    job, state = _slurm_job(tmp_path, OOM.format(gib="6.00"))
    assert _epilog(server, tmp_path, job, {**state, "Restarts": 0, "ExcNodeList": "(null)"}).returncode == 0
    log = tmp_path / "epilog.log"
    _wait_until(lambda: log.exists() and f"job {job} not requeued" in log.read_text(), "the epilog's verdict")
    assert f"job {job} not requeued (decision fix_and_rerun)" in log.read_text()
    assert _state(tmp_path, job).get("requeued") is None


# --- the Ray job driver acting on the decision, with a stand-in for ray.job_submission --------

FAKE_RAY = ROOT / "tests" / "hooks" / "fake_ray"


def _ray_driver(
    server: LiveServer, tmp_path: Path, fault: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env.update(
        PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONPATH=str(FAKE_RAY),
        LOGTRIAGE_URL=server.url,
        FAKE_RAY_STATE=str(tmp_path / f"ray-{fault}.json"),
    )
    entry = [
        sys.executable, str(CLUSTER), "--nodes", "10.6.0.1,10.6.0.2", "--bad", "10.6.0.1", "--fault", fault,
        "--state", str(tmp_path / f"ray-{fault}.runs"), "--exclude=$LOGTRIAGE_EXCLUDE_HOSTS",
    ]  # fmt: skip
    cmd = [sys.executable, str(HOOKS / "ray_job_driver.py"), "--poll", "0.05", *extra, "--", *entry]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_ray_driver_resubmits_a_gpu_fault_without_its_node(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    import json

    res = _ray_driver(server, tmp_path, "ecc", "--max-attempts", "3")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "leave out 10.6.0.1" in res.stdout
    jobs = json.loads((tmp_path / "ray-ecc.json").read_text())
    assert [j["status"] for j in jobs.values()] == ["FAILED", "SUCCEEDED"]
    second = list(jobs.values())[1]
    assert second["runtime_env"]["env_vars"] == {"LOGTRIAGE_EXCLUDE_HOSTS": "10.6.0.1"}
    first_id = next(iter(jobs))
    outcomes = client.get(f"/api/v1/jobs/{first_id}/outcomes").json()
    assert [(o["status"], o["action"], o["attempt_id"]) for o in outcomes] == [
        ("succeeded", "retry_excluding", "raysubmit_0002")
    ]


def test_ray_driver_stops_on_a_config_fault_and_keeps_the_old_behaviour_by_default(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    import json

    res = _ray_driver(server, tmp_path, "oom", "--max-attempts", "3")
    assert res.returncode == 1 and "not submitting it again (decision fix_and_rerun)" in res.stdout
    assert len(json.loads((tmp_path / "ray-oom.json").read_text())) == 1
    once = _ray_driver(server, tmp_path, "timeout")  # --max-attempts 1: report only
    assert once.returncode == 1
    jobs = json.loads((tmp_path / "ray-timeout.json").read_text())
    assert len(jobs) == 1 and job_analyses(client, next(iter(jobs)))
