"""The hook recipes in docs/hooks/: the bash wrapper end to end against a running server."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from tests.servicekit import OOM, ROOT, LiveServer

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
    for script in ("logtriage-wrap.sh", "slurm-epilog.sh"):
        subprocess.run(["bash", "-n", str(HOOKS / script)], check=True)
    py_compile.compile(str(HOOKS / "ray_job_driver.py"), doraise=True)
    wf = yaml.safe_load((HOOKS / "argo-onexit.yaml").read_text())
    assert wf["spec"]["onExit"] == "logtriage-on-exit"
    docs = (ROOT / "docs" / "hooks.md").read_text()
    for name in ("logtriage-wrap.sh", "slurm-epilog.sh", "ray_job_driver.py", "argo-onexit.yaml"):
        assert name in docs
