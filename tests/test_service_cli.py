"""Service commands as users run them: `serve` on a fresh data dir, bulk `retriage`, `db gc`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import RULES, make_rules_dir
from tests.servicekit import (
    NCCL_TIMEOUT,
    OOM,
    ROOT,
    blob_files,
    cli_env,
    free_port,
    live_server,
    make_settings,
    run_cli,
    training_log,
    wait_ready,
)

# slow: `logtriage serve` processes (fresh data dir, several workers, SIGTERM) and bulk retriage
pytestmark = pytest.mark.slow


def test_serve_starts_on_a_fresh_machine(tmp_path: Path) -> None:
    """The README's command, nothing configured but a data dir and a port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=tmp_path,  # ./data is created here
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_ready(url, proc=proc, timeout=60), proc.stdout.read() if proc.stdout else ""
        r = httpx.post(
            f"{url}/api/v1/analyses",
            content=training_log(OOM.format(gib="1")),
            headers={"Content-Type": "text/plain"},
            timeout=60,
        )
        assert r.status_code == 201
        assert (tmp_path / "data" / "logtriage.db").is_file()
        assert blob_files(tmp_path / "data")
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "runs OPEN" in out and "loopback" in out  # it says so on start
    assert "docs http://127.0.0.1" in out


def test_bulk_retriage_after_a_library_release(db_url: str, tmp_path: Path) -> None:
    # the old library: one unrelated rule, so a collective timeout is unknown
    ecc = "hardware/cuda-uncorrectable-ecc.yaml"
    nccl = "nccl/nccl-watchdog-collective-timeout.yaml"
    for d in ("old", "new"):
        (tmp_path / d).mkdir()
    old_lib = make_rules_dir(tmp_path / "old", {ecc: (RULES / ecc).read_text()})
    new_lib = make_rules_dir(
        tmp_path / "new", {ecc: (RULES / ecc).read_text(), nccl: (RULES / nccl).read_text()}
    )
    settings = make_settings(tmp_path / "data", db_url, rules_dir=old_lib)
    with live_server(settings) as srv, srv.client() as c:
        job = f"rt-{time.time_ns()}"
        first = c.post(
            "/api/v1/analyses",
            content=training_log(NCCL_TIMEOUT).encode(),
            params={"job_id": job},
            headers={"Content-Type": "text/plain"},
        ).json()
        assert first["root_cause"] is None and first["library_version"]

        new_env = cli_env(settings, LOGTRIAGE_RULES_DIR=str(new_lib))
        dry = run_cli("retriage", "--since", "1h", "--dry-run", env=new_env)
        assert dry.returncode == 0, dry.stderr
        assert "1 analysis would move from unknown to nccl.collective_timeout" in dry.stdout
        assert c.get(first["links"]["self"]).json()["root_cause"] is None  # dry run stored nothing

        res = run_cli("retriage", "--since", "1h", "--class", "unknown", env=new_env)
        assert res.returncode == 0, res.stderr
        assert "1 analysis moved from unknown to nccl.collective_timeout" in res.stdout
        after = c.get(first["links"]["self"]).json()
        assert after["root_cause"]["failure_class"] == "nccl.collective_timeout"
        assert after["retriaged_at"]
        listed = c.get("/api/v1/analyses", params={"class": "nccl.collective_timeout", "job_id": job}).json()
        assert [x["id"] for x in listed["items"]] == [first["id"]]

        # the rule is not in the server's (old) library, but its stored text still renders
        rule_id = after["root_cause"]["rule_id"]
        stored = c.get(f"/api/v1/rules/{rule_id}").json()
        assert stored["current"] is False and f"id: {rule_id}" in stored["yaml"]
        html = c.get(after["permalink"]).text
        assert f"id: {rule_id}" in html

        # the API re-runs with the server's own library: back to unknown, and it says so
        api = c.post(first["links"]["retriage"]).json()
        assert api["summary"] == "moved from nccl.collective_timeout to unknown"
        assert api["changes"]["removed_rules"] == [rule_id]

        again = run_cli("retriage", "--since", "1h", "--json", env=new_env)
        assert again.returncode == 0 and '"moved"' in again.stdout
        assert run_cli(
            "retriage", "--since", "2000-01-01", "--until", "2000-01-02", env=new_env
        ).stdout.startswith("no analyses")


def test_db_gc_removes_orphans_only(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", db_url)
    with live_server(settings) as srv, srv.client() as c:
        c.post(
            "/api/v1/analyses",
            content=training_log(OOM.format(gib="1")).encode(),
            headers={"Content-Type": "text/plain"},
        )
    blobs = blob_files(settings.data_dir)
    assert len(blobs) == 1
    from app.blobstore import blob_store_for

    orphan = blob_store_for(settings.data_dir).path_of("0" * 64)  # a blob no row knows (a crash)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"x")
    os.utime(orphan, (time.time() - 7200, time.time() - 7200))
    res = run_cli("db", "gc", env=cli_env(settings))
    assert res.returncode == 0, res.stderr
    assert "0 unreferenced blobs and 1 orphan blob files" in res.stdout
    assert blob_files(settings.data_dir) == blobs


@pytest.mark.parametrize("argv", [["db"], ["tokens"]])
def test_service_groups_without_action_print_help(argv: list[str]) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", *argv], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert res.returncode == 2


def _serve_workers(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    """`logtriage serve --workers 2` in its own session, ready to answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    if wait_ready(f"http://127.0.0.1:{port}", proc=proc, timeout=60):
        return proc
    raise AssertionError("serve --workers 2 did not become ready")


def _gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within  # multiprocessing's resource tracker exits just after
    while [p for p in pids if _alive_pid(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    return not [p for p in pids if _alive_pid(p)]


def test_serve_with_several_workers_balances_and_stops_cleanly(tmp_path: Path) -> None:
    """--workers 2: each worker has its own SO_REUSEPORT socket; a second server is refused;
    workers exit when the supervisor is killed outright."""
    port = free_port()
    proc = _serve_workers(tmp_path, port)
    try:
        children = _children(proc.pid)
        assert len(children) >= 2
        for _ in range(40):  # separate connections: the kernel spreads them over both sockets
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
        other = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "2"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode != 0 and "Traceback" not in other.stderr
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone(children, within=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def test_serve_workers_stop_on_sigterm(tmp_path: Path) -> None:
    proc = _serve_workers(tmp_path, free_port())
    try:
        children = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert _gone(children, within=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _alive_pid(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
