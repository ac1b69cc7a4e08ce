"""`logtriage submit` as a hook runs it: a subprocess against a real server."""

from __future__ import annotations

import gzip
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.servicekit import (
    OOM,
    ROOT,
    LiveServer,
    cli_env,
    free_port,
    live_server,
    make_settings,
    training_log,
)

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow


def submit(
    server_url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "submit", "--url", server_url, *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=env,
    )


def analysis(client: httpx.Client, url: str) -> dict:  # type: ignore[type-arg]
    # the report link: /analyses/{id} (the web page) or /api/v1/analyses/{id}/report.html
    parts = url.rstrip("/").split("/")
    aid = parts[-2] if parts[-1] == "report.html" else parts[-1]
    return client.get(f"/api/v1/analyses/{aid}").json()  # type: ignore[no-any-return]


def report_url(stdout: str) -> str:
    return next(line.split("report: ", 1)[1].strip() for line in stdout.splitlines() if "report: " in line)


def test_submit_prints_root_cause_fix_and_report(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    log = tmp_path / "train.log"
    log.write_text(training_log(OOM.format(gib="1.96")))
    res = submit(
        server.url,
        str(log),
        "--job-id",
        "sub-1",
        "--exit-code",
        "1",
        "--label",
        "team=rl",
        env=cli_env(server.settings),
    )
    assert res.returncode == 0, res.stderr
    assert "logtriage: root cause: CUDA out of memory" in res.stdout or "root cause:" in res.stdout
    assert "fix:" in res.stdout
    url = report_url(res.stdout)
    a = analysis(client, url)
    assert a["metadata"]["job_id"] == "sub-1" and a["metadata"]["exit_code"] == 1
    assert a["metadata"]["source"] == "cli" and a["metadata"]["labels"] == {"team": "rl"}
    assert a["metadata"]["host"]  # the submitting host by default
    assert a["files"][0]["name"] == "train.log"
    assert client.get(a["links"]["log"]).text == log.read_text()


def test_submit_several_files_and_config(server: LiveServer, client: httpx.Client, tmp_path: Path) -> None:
    r0 = tmp_path / "rank0.log"
    r0.write_text(training_log(OOM.format(gib="2.5")))
    r1 = tmp_path / "rank1.log.gz"
    r1.write_bytes(gzip.compress(training_log("all good\n").encode()))
    cfg = tmp_path / "job.yaml"
    cfg.write_text("trainer:\n  total_epochs: 1\n")
    res = submit(server.url, str(r0), str(r1), "--config", str(cfg), "--json", env=cli_env(server.settings))
    assert res.returncode == 0, res.stderr
    import json

    a = json.loads(res.stdout)
    assert [f["name"] for f in a["files"]] == ["rank0.log", "rank1.log.gz"]
    assert a["config"]["name"] == "job.yaml"
    assert client.get(a["files"][1]["url"]).text == training_log("all good\n")


def test_huge_log_goes_as_head_and_tail(server: LiveServer, client: httpx.Client, tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    body = training_log("", steps=40_000)  # ~3 MB of steps
    log.write_text(body + OOM.format(gib="8.0"))
    res = submit(
        server.url, str(log), "--max-bytes", "1M", "--head-bytes", "256K", env=cli_env(server.settings)
    )
    assert res.returncode == 0, res.stderr
    assert "sent the head and tail of huge.log" in res.stderr
    a = analysis(client, report_url(res.stdout))
    assert a["root_cause"]["failure_class"] == "cuda.out_of_memory"
    stored = client.get(a["links"]["log"]).text
    assert "[logtriage submit:" in stored and "omitted here" in stored
    assert len(stored) < (1 << 20) + 1000
    assert stored.startswith(body[:1000])
    # cut on line boundaries
    for line in stored.splitlines():
        assert line.startswith(("[job] step", "[logtriage submit:", "(WorkerDict")) or line == ""


def test_unreachable_service_never_fails_the_job(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(OOM.format(gib="1"))
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    res = submit(url, str(log), "--retries", "1", "--timeout", "5")
    assert res.returncode == 0
    assert "submitting attempt 1 failed" in res.stderr
    assert "submit failed: gave up submitting after" in res.stderr
    assert "(2 attempts, --retries 1)" in res.stderr
    assert "exit status is unaffected" in res.stderr
    assert time.monotonic() - t0 < 30
    strict = submit(url, str(log), "--retries", "0", "--strict")
    assert strict.returncode == 4  # gave up: the service may be back later


def test_client_errors_are_not_retried(server: LiveServer, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(OOM.format(gib="1"))
    res = submit(server.url, str(log), "--framework", "tensorflow", env=cli_env(server.settings))
    assert res.returncode == 0
    assert "HTTP 422" in res.stderr and "framework" in res.stderr
    assert "attempt" not in res.stderr
    missing = submit(server.url, str(tmp_path / "nope.log"))
    assert missing.returncode == 0 and "no such file" in missing.stderr


def test_retries_until_the_service_is_up(db_url: str, tmp_path: Path) -> None:
    """The service restarts while a job fails: submit's backoff bridges the gap."""
    log = tmp_path / "job.log"
    log.write_text(training_log(OOM.format(gib="3.3")))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "submit",
            "--url",
            f"http://127.0.0.1:{port}",
            str(log),
            "--retries",
            "8",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        # the server starts only once submit has failed to reach it: no guess about timing
        for line in proc.stderr:
            seen.append(line)
            if "submitting attempt 1 failed" in line:
                break
        assert any("submitting attempt 1 failed" in s for s in seen), "".join(seen)
        settings = make_settings(tmp_path / "data", db_url)
        with live_server(settings, port=port):
            stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(seen) + stderr
    assert "root cause:" in stdout


def test_submit_acts_on_the_decision_and_reports_the_outcome(
    server: LiveServer, client: httpx.Client, tmp_path: Path
) -> None:
    import shlex

    from tests.servicekit import ECC

    env = cli_env(server.settings)
    log = tmp_path / "ecc.log"
    log.write_text(training_log(ECC.format(ip="10.44.0.9"), job="sub-ecc"))
    res = submit(server.url, str(log), "--job-id", "sub-ecc", "--action-exit", "--shell", env=env)
    # 11: retry_excluding; stdout is only the assignments, the report is on stderr
    assert res.returncode == 11, res.stderr
    values = dict(line.split("=", 1) for line in shlex.split(res.stdout))
    assert values["LOGTRIAGE_DECISION"] == "retry_excluding"
    assert values["LOGTRIAGE_EXCLUDE_HOSTS"] == "10.44.0.9"
    assert values["LOGTRIAGE_CLASS"] == "hardware.gpu_ecc_error"
    assert "the job: Retry the job without 10.44.0.9. [retry_excluding]" in res.stderr
    aid = values["LOGTRIAGE_ANALYSIS_ID"]
    # the next attempt, run without that host, passed: reported the same way, counted once
    args = [
        "--job-id",
        "sub-ecc",
        "--outcome",
        "succeeded",
        "--excluded-hosts",
        "10.44.0.9",
        "--attempt-id",
        "a2",
    ]
    first = submit(server.url, *args, env=env)
    again = submit(server.url, *args, env=env)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert f"outcome succeeded after analysis {aid}" in first.stdout
    outcomes = client.get("/api/v1/jobs/sub-ecc/outcomes").json()
    assert [(o["analysis_id"], o["action"], o["excluded_hosts"]) for o in outcomes] == [
        (aid, "retry_excluding", ["10.44.0.9"])
    ]
    # an OOM is a fix: 12
    oom = tmp_path / "oom.log"
    oom.write_text(training_log(OOM.format(gib="2.50"), job="sub-oom"))
    assert submit(server.url, str(oom), "--action-exit", env=env).returncode == 12
    # misuse is a usage error, never a crash (exit 0 without --strict: a hook never fails the job)
    bad = submit(server.url, str(oom), "--outcome", "failed", "--job-id", "x", "--strict", env=env)
    assert bad.returncode == 2 and "give no log files" in bad.stderr
    no_job = submit(server.url, "--outcome", "failed", "--strict", env=env)
    assert no_job.returncode == 2 and "--outcome needs --job-id" in no_job.stderr


def test_action_exit_is_0_when_there_is_no_analysis(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("hello\n")
    res = submit(f"http://127.0.0.1:{free_port()}", str(log), "--action-exit", "--deadline", "1")
    assert res.returncode == 0 and "submit failed" in res.stderr
