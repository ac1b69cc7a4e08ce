"""Outages: with the database gone every route that needs it answers 503 with Retry-After (never
a 500, never a reset connection), nothing is half-stored, and the service recovers by itself.

PostgreSQL is reached through a TCP relay on loopback that the test cuts and restores (the shared
server itself is never stopped); SQLite's database directory is moved away and back. A full disk
is an `OSError(ENOSPC)` from the blob store's write, at the OS boundary.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from tests.conftest import ROOT
from tests.servicekit import (
    OOM,
    LiveServer,
    blob_files,
    free_port,
    live_server,
    make_settings,
    training_log,
)

# slow: live servers and `serve` processes while the database is cut and restored
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"


class Relay:
    """127.0.0.1:port → 127.0.0.1:5432, byte for byte, until `cut()`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.stopped = False
        self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                self.refused += 1
                client.close()  # the database "went away": connections are refused at once
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.open = False
        with self.lock:
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.socks.clear()

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.stopped = True
        self.cut()
        self.listener.close()


# (method, path) → needs the database; {aid} is a stored analysis
ROUTES = [
    ("GET", API),
    ("GET", f"{API}/{{aid}}"),
    ("GET", f"{API}/{{aid}}/report.md"),
    ("GET", f"{API}/{{aid}}/log?file=0"),
    ("GET", "/api/v1/stats"),
    ("POST", API),
    ("POST", f"{API}/{{aid}}/feedback"),
    ("GET", "/analyses"),
    ("GET", "/analyses/{aid}"),
    ("GET", "/analyses/{aid}/files/0"),
    ("GET", "/rules"),
    ("GET", "/rules/cuda-out-of-memory"),
    ("GET", "/trends"),
    ("GET", "/"),  # the upload page lists the latest analyses
]
WITHOUT_DB = [("GET", "/healthz"), ("GET", "/api/v1/rules")]


def _call(c: httpx.Client, method: str, path: str, html: bool) -> httpx.Response:
    headers = {"Accept": "text/html"} if html else {}
    if method == "POST" and path == API:
        return c.post(
            API, content=training_log(OOM.format(gib="1.00")).encode(), headers={"Content-Type": "text/plain"}
        )
    if method == "POST":
        return c.post(path, json={"verdict": "correct"})
    return c.get(path, headers=headers)


def _outage_round(srv: LiveServer, go_down: Any, come_back: Any) -> None:
    with srv.client() as c:
        r = _call(c, "POST", API, False)
        assert r.status_code == 201, r.text
        aid = r.json()["id"]
        blobs_before = blob_files(srv.settings.data_dir)
        go_down()
        for method, path in ROUTES:
            for html in (
                (False, True) if path.startswith("/analyses") or path in ("/rules", "/trends") else (False,)
            ):
                r = _call(c, method, path.format(aid=aid), html)
                assert r.status_code == 503, (method, path, r.status_code, r.text[:300])
                assert r.headers.get("retry-after") == "5", (method, path)
                if not html:
                    assert r.headers["content-type"].startswith("application/problem+json")
                    assert r.json()["type"].endswith("service-unavailable")
        for method, path in WITHOUT_DB:
            assert _call(c, method, path, False).status_code == 200, path
        assert c.get("/readyz").status_code == 503
        # the keep-alive connection survived every 503: one client did all of the above
        assert blob_files(srv.settings.data_dir) == blobs_before  # the refused upload left no blob
        come_back()
        deadline = time.monotonic() + 60
        while c.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "did not recover"
            time.sleep(0.1)
        for method, path in ROUTES:
            r = _call(c, method, path.format(aid=aid), False)
            assert r.status_code in (200, 201), (method, path, r.status_code, r.text[:300])


@pytest.mark.postgres
def test_postgresql_going_away_gives_503s_and_the_service_recovers_by_itself(
    pg_schemas: Any, tmp_path: Path
) -> None:
    url = make_url(pg_schemas.new())
    relay = Relay((url.host or "127.0.0.1", url.port or 5432))
    try:
        settings = make_settings(tmp_path, url.set(port=relay.port).render_as_string(hide_password=False))
        with live_server(settings) as srv:
            _outage_round(srv, relay.cut, relay.restore)
    finally:
        relay.close()


def test_sqlite_going_away_gives_503s_and_the_service_recovers_by_itself(tmp_path: Path) -> None:
    db_dir = tmp_path / "db"
    db_dir.mkdir()
    settings = make_settings(tmp_path / "data", f"sqlite:///{db_dir / 'logtriage.db'}")
    with live_server(settings) as srv:

        def down() -> None:
            db_dir.rename(tmp_path / "db-gone")
            srv.ctx.db.engine.dispose()  # pooled connections would still hold the moved file

        def back() -> None:
            (tmp_path / "db-gone").rename(db_dir)

        _outage_round(srv, down, back)


def _serve(tmp_path: Path, db_url: str, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env.update(LOGTRIAGE_DATA_DIR=str(tmp_path / "data"), LOGTRIAGE_DATABASE_URL=db_url)
    port = free_port()
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def test_serve_with_the_database_down_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    relay = Relay(("127.0.0.1", 5432))
    relay.cut()
    try:
        proc = _serve(tmp_path, f"postgresql+psycopg://postgres:pw@127.0.0.1:{relay.port}/test")
        _, err = proc.communicate(timeout=120)
    finally:
        relay.close()
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "cannot be reached" in lines[0] and "Traceback" not in err
    assert ":pw@" not in err and "--wait-for-db" in err  # the password is not printed; the way out is


@pytest.mark.postgres
def test_serve_waits_for_the_database_when_asked(pg_schemas: Any, tmp_path: Path) -> None:
    url = make_url(pg_schemas.new())
    relay = Relay((url.host or "127.0.0.1", url.port or 5432))
    relay.cut()
    proc = _serve(
        tmp_path, url.set(port=relay.port).render_as_string(hide_password=False), "--wait-for-db", "120"
    )
    try:
        deadline = time.monotonic() + 60
        while relay.refused < 2:  # it is trying, and waiting
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        relay.restore()
        port = int(proc.args[proc.args.index("--port") + 1])  # type: ignore[union-attr,index]
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()
        relay.close()


def test_readyz_is_not_ready_while_the_disk_is_full(
    server: LiveServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from app.service import readiness

    assert client.get("/readyz").status_code == 200
    real = shutil.disk_usage

    def nearly_full(path: Any) -> Any:
        usage = real(path)
        return type(usage)(usage.total, usage.total - 1024, 1024)

    monkeypatch.setattr(readiness.shutil, "disk_usage", nearly_full)
    r = client.get("/readyz")
    assert r.status_code == 503 and "disk is full" in r.json()["detail"]
    monkeypatch.setattr(readiness.shutil, "disk_usage", real)
    assert client.get("/readyz").status_code == 200
