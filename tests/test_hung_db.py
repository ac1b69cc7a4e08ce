"""A database that hangs (connections accepted, nothing answered: a SIGSTOPped server, a frozen
network path) gives 503s within seconds, never a hung route; /readyz answers within a second
whatever hangs; nothing is half-stored; the service recovers by itself once the database answers.

PostgreSQL is reached through a TCP relay on loopback that the test can freeze: it keeps every
connection open and accepts new ones, but forwards nothing (the shared server itself is never
stopped). A listener that accepts and never answers stands for a database hung from the start.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import OperationalError

from app.db.session import Database, DbTimeouts
from tests.servicekit import LiveServer, blob_files, live_server, make_settings
from tests.test_outages import API, ROUTES, WITHOUT_DB, _call, _serve

# slow: a frozen database waited out to each timeout, and live servers
pytestmark = pytest.mark.slow


class FreezableRelay:
    """127.0.0.1:port → upstream, byte for byte, until `freeze()`: then nothing is forwarded in
    either direction and new connections are accepted and held, until `thaw()`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.stopped = False
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self.flowing.wait()
            while data := src.recv(65536):
                self.flowing.wait()  # frozen: the bytes stay here, nothing answers
                if self.stopped:
                    break
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def freeze(self) -> None:
        self.flowing.clear()

    def thaw(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.stopped = True
        self.flowing.set()
        with self.lock:
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        self.listener.close()


class SilentListener:
    """Accepts TCP connections and never says a word (a database hung from the start)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.listener.accept()[0])

    def close(self) -> None:
        for s in self.held:
            s.close()
        self.listener.close()


@pytest.fixture
def relay(pg_schemas: Any) -> Iterator[tuple[FreezableRelay, str]]:
    url = make_url(pg_schemas.new())
    r = FreezableRelay((url.host or "127.0.0.1", url.port or 5432))
    try:
        yield r, url.set(port=r.port).render_as_string(hide_password=False)
    finally:
        r.close()


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.monotonic()
    try:
        out = fn()
    except Exception as exc:  # returned, for the caller to check
        out = exc
    return time.monotonic() - t0, out


@pytest.mark.postgres
def test_connect_statement_and_ping_are_bounded(relay: tuple[FreezableRelay, str]) -> None:
    r, url = relay
    db = Database(url, timeouts=DbTimeouts(connect=2, statement=1, pool=1))
    try:
        with db.engine.connect() as conn:  # healthy: a pooled connection exists
            assert conn.execute(text("SELECT 1")).scalar() == 1
            r.freeze()
            # mid-connection: the statement's client-side deadline (1 s + 2 s grace) closes it
            took, out = _timed(lambda: conn.execute(text("SELECT 2")).scalar())
            assert isinstance(out, OperationalError), out
            assert took < 5, took
        # the next checkout: the pre-ping (bounded by the connect timeout) then a reconnect
        # (connect_timeout): both fail, the caller gets an OperationalError within seconds
        took, out = _timed(lambda: db.engine.connect().close())
        assert isinstance(out, OperationalError) and took < 8, (took, out)
        # right after a failed connect, connects fail at once for a moment
        took, out = _timed(lambda: db.engine.connect().close())
        assert isinstance(out, OperationalError) and took < 0.5, (took, out)
        r.thaw()
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OperationalError), db.engine.connect() as conn:
                assert conn.execute(text("SELECT 3")).scalar() == 3
                break
            assert time.monotonic() < deadline, "did not recover"
            time.sleep(0.2)
    finally:
        db.dispose()


@pytest.mark.postgres
def test_a_database_hung_from_the_start_fails_within_the_connect_timeout() -> None:
    silent = SilentListener()
    db = Database(
        f"postgresql+psycopg://postgres@127.0.0.1:{silent.port}/test",
        timeouts=DbTimeouts(connect=2, statement=5, pool=1),
    )
    try:
        took, out = _timed(lambda: db.engine.connect().close())
        assert isinstance(out, OperationalError) and took < 4, (took, out)
    finally:
        db.dispose()
        silent.close()


def _until_answered(call: Callable[[], httpx.Response], *, timeout: float = 60) -> httpx.Response:
    """The first answer that is not a 503: right after the thaw the relay lets every connect
    that waited through the freeze reach the server at once, and on a busy machine a new connect
    may still time out (a 503) for a moment."""
    deadline = time.monotonic() + timeout
    while (res := call()).status_code == 503:
        assert time.monotonic() < deadline, res.text
        time.sleep(0.1)
    return res


def _analyses(c: httpx.Client) -> list[str]:
    res = _until_answered(lambda: c.get(API, params={"limit": 100}))
    assert res.status_code == 200, res.text
    return [a["id"] for a in res.json()["items"]]


@pytest.mark.postgres
def test_a_database_that_stops_answering_gives_503s_within_seconds(
    relay: tuple[FreezableRelay, str], tmp_path: Path
) -> None:
    r, url = relay
    settings = make_settings(tmp_path, url)  # the default timeouts, as served
    with live_server(settings) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        res = _call(c, "POST", API, False)
        assert res.status_code == 201, res.text
        aid = res.json()["id"]
        before, blobs_before = _analyses(c), blob_files(srv.settings.data_dir)
        assert c.get(API).status_code == 200 and c.get("/api/v1/rules").status_code == 200
        r.freeze()
        took, ready = _timed(lambda: c.get("/readyz"))
        assert ready.status_code == 503 and took < 1.5, (took, ready.text)
        assert "database" in ready.json()["detail"], ready.text
        timings: dict[str, float] = {}
        for method, path in ROUTES:
            for html in (
                (False, True) if path.startswith("/analyses") or path in ("/rules", "/trends") else (False,)
            ):
                took, res = _timed(lambda m=method, p=path, h=html: _call(c, m, p.format(aid=aid), h))
                assert not isinstance(res, Exception), (method, path, res)  # the client's 30 s
                assert res.status_code == 503, (method, path, res.status_code, res.text[:300])
                assert res.headers.get("retry-after"), (method, path)
                if not html:
                    assert res.headers["content-type"].startswith("application/problem+json")
                timings[f"{method} {path}{' (html)' if html else ''}"] = took
        for method, path in WITHOUT_DB:
            took, res = _timed(lambda m=method, p=path: _call(c, m, p, False))
            assert res.status_code == 200 and took < 1, (path, took, res)
            timings[f"{method} {path}"] = took
        took, ready = _timed(lambda: c.get("/readyz"))
        assert ready.status_code == 503 and took < 1.5, (took, ready.text)
        timings["GET /readyz"] = took
        print("\n", "\n".join(f"{k}: {v:.2f} s" for k, v in timings.items()))
        slowest = max(timings, key=lambda k: timings[k])
        assert timings[slowest] < 10, (slowest, timings)
        r.thaw()
        deadline = time.monotonic() + 60
        while c.get("/readyz").status_code != 200 or c.get(API).status_code != 200:
            assert time.monotonic() < deadline, "did not recover"
            time.sleep(0.1)
        # nothing half-stored: the refused upload left no row and no blob; the rest is intact
        assert _analyses(c) == before
        assert blob_files(srv.settings.data_dir) == blobs_before
        for method, path in ROUTES:
            res = _until_answered(functools.partial(_call, c, method, path.format(aid=aid), False))
            assert res.status_code in (200, 201), (method, path, res.status_code, res.text[:300])


def test_readyz_answers_within_a_second_whatever_hangs(server: LiveServer, client: httpx.Client) -> None:
    release = threading.Event()
    store = server.ctx.store
    real = store.check_writable

    def hung() -> None:
        release.wait(60)

    store.check_writable = hung
    try:
        for _ in range(3):  # the same hung check is waited on, not one more thread per call
            took, res = _timed(lambda: client.get("/readyz"))
            assert res.status_code == 503 and took < 1.5, (took, res.text)
            assert "blob store not answering" in res.json()["detail"]
            assert res.json()["checks"]["database"] == "ok"
        assert sum(t.name == "readyz-blob_store" for t in threading.enumerate()) == 1
        assert client.get("/healthz").status_code == 200
    finally:
        release.set()
        store.check_writable = real
    deadline = time.monotonic() + 10
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_serve_against_a_database_hung_from_the_start_says_so_and_exits_1(tmp_path: Path) -> None:
    silent = SilentListener()
    try:
        t0 = time.monotonic()
        proc = _serve(tmp_path, f"postgresql+psycopg://postgres:pw@127.0.0.1:{silent.port}/test")
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        silent.close()
    assert proc.returncode == 1, err
    assert "cannot be reached" in err and "timeout" in err and "Traceback" not in err, err
    assert took < 30, took  # python start-up included; the connect itself gives up after 3 s
