"""`serve --health-port`: liveness from the supervisor, never queued behind uploads.

The verdict is unit-tested on made-up worker states; the server test runs the real `logtriage
serve`, freezes its worker with SIGSTOP (its event loop stops turning, as a loop stuck in a
C call would) and waits for the health port to say so, then thaws it and waits for 200 again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from app.http.healthport import WorkerState, verdict
from tests.servicekit import ROOT, cli_env, free_port, make_settings, wait_ready

# slow: `logtriage serve` processes (the supervisor's health port)
pytestmark = pytest.mark.slow


def _w(*, alive: bool = True, warm: bool = True, age: float | None = 0.2) -> WorkerState:
    return WorkerState(alive=alive, warm=warm, age=age)


def test_warm_workers_that_beat_are_alive() -> None:
    status, body = verdict([_w(), _w(age=1.0)], stall_s=5)
    assert status == 200
    assert body == {"status": "ok", "workers": 2, "warm": 2, "stalled": 0}


def test_a_warm_worker_silent_past_the_limit_is_a_503_naming_how_long() -> None:
    status, body = verdict([_w(), _w(age=7.5)], stall_s=5)
    assert status == 503
    assert body["stalled"] == 1
    assert "7.5 s" in body["detail"] and "limit 5 s" in body["detail"]


def test_starting_and_dead_workers_do_not_fail_liveness() -> None:
    # the supervisor restarts those itself: a probe failing then would restart the whole pod
    status, body = verdict([_w(warm=False, age=None), _w(alive=False, age=99.0), _w()], stall_s=5)
    assert status == 200
    assert body["warm"] == 1


def test_a_warm_worker_that_never_beat_is_stalled() -> None:
    assert verdict([_w(age=None)], stall_s=5)[0] == 503


def _worker_pids(pid: int) -> list[int]:
    out = []
    for c in psutil.Process(pid).children():
        with contextlib.suppress(psutil.Error):
            if any("spawn_main" in part for part in c.cmdline()):
                out.append(c.pid)
    return out


@contextlib.contextmanager
def _serve(tmp_path: Path, db_url: str, *args: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    settings = make_settings(tmp_path / "data", db_url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", *args],
        env=cli_env(settings, LOGTRIAGE_ANALYSIS_WORKERS="1", **env),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "server.err").open("w"),
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait_status(url: str, want: int, timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: httpx.Response | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = httpx.get(url, timeout=5)
            if last.status_code == want:
                return last
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered {want}; last: {last and (last.status_code, last.text)}")


def test_health_port_tells_a_stuck_worker_loop_and_its_recovery(db_url: str, tmp_path: Path) -> None:
    port, hport = free_port(), free_port()
    with _serve(
        tmp_path, db_url, "--port", str(port), "--health-port", str(hport), LOGTRIAGE_HEALTH_STALL_S="1"
    ) as server:
        assert wait_ready(f"http://127.0.0.1:{port}", proc=server), (tmp_path / "server.err").read_text()
        health = f"http://127.0.0.1:{hport}/healthz"
        ok = _wait_status(health, 200)
        assert ok.json() == {"status": "ok", "workers": 1, "warm": 1, "stalled": 0}
        assert ok.headers["cache-control"] == "no-store"
        # the service port keeps its own /healthz
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        other = httpx.get(f"http://127.0.0.1:{hport}/api/v1/analyses", timeout=5)
        assert other.status_code == 404 and other.headers["content-type"] == "application/problem+json"

        (worker,) = _worker_pids(server.pid)
        os.kill(worker, signal.SIGSTOP)
        try:
            stuck = _wait_status(health, 503)  # answered while the only worker is frozen
            assert stuck.headers["content-type"] == "application/problem+json"
            assert stuck.json()["stalled"] == 1
        finally:
            os.kill(worker, signal.SIGCONT)
        _wait_status(health, 200)
        assert "liveness on http://127.0.0.1:" in (tmp_path / "server.err").read_text()


def test_health_port_taken_is_a_clear_error(db_url: str, tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        with _serve(
            tmp_path, db_url, "--port", str(free_port()), "--health-port", str(taken.getsockname()[1])
        ) as server:
            assert server.wait(120) != 0
        err = (tmp_path / "server.err").read_text()
        assert f"cannot bind 127.0.0.1:{taken.getsockname()[1]}" in err
        assert "Traceback" not in err
    finally:
        taken.close()


@pytest.mark.parametrize(
    ("flag", "bad"),
    [("--health-port", "-1"), ("--health-port", "70000"), ("--health-port", "x"), ("--port", "99999")],
)
def test_bad_ports_are_refused_naming_the_setting(flag: str, bad: str, tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", flag, bad],
        env={**os.environ, "LOGTRIAGE_DATA_DIR": str(tmp_path / "d")},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert flag.lstrip("-").replace("-", "_") in res.stderr.lower().replace("-", "_")
