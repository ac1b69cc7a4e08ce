"""Slow and hostile clients against a live server (issue 20, item 6).

Each attack must end in a clear answer or a closed connection within a bounded time, store
nothing half (no row, no blob, no spool or staging file), and leave the server answering
`/healthz` while it runs:

- slowloris: many connections sending their heads a byte at a time -> 408 after
  `LOGTRIAGE_HEADER_TIMEOUT`;
- connections that never finish their heads: silent ones are closed (nothing to answer), ones
  that sent part of a head get 408;
- a body trickled a byte at a time -> 408 once it falls under `LOGTRIAGE_MIN_BODY_RATE` over a
  `LOGTRIAGE_BODY_RATE_WINDOW`, while a slow but steady body passes;
- more than `LOGTRIAGE_MAX_CONNECTIONS_PER_CLIENT` connections from one address -> 429 +
  Retry-After at once, other addresses unaffected; more than `LOGTRIAGE_MAX_CONNECTIONS` -> 503;
- a full disk: the data dir is a small tmpfs (mounted here; skipped where that is not allowed)
  filled for real mid-upload, before a spooled upload's blob and before a small one's -> 507 +
  Retry-After, nothing kept, and the service works again once space is freed. A full disk at the
  blob's commit and in the database is injected at the edge (os.link, the SQLite error): a
  tmpfs cannot be made to fail just there.

Clients use several loopback source addresses (127.0.0.0/8 is all loopback on Linux) so that
"one client" and "another client" are real distinct addresses. Waits are on conditions with
generous deadlines; the attacker's own pace (a byte per 100 ms) is the only sleep. The measured
durations are printed (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import func, select

from app.db.models import Base
from app.http.protocol import uvicorn_http
from app.settings import Settings
from tests.servicekit import LiveServer, blob_files, free_port, live_server, make_settings, tmp_leftovers

# slow: live servers, and byte-paced attacks that wait out the server's timeouts
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
TEXT = {"Content-Type": "text/plain"}
HEADER_TIMEOUT = 1.0
PER_CLIENT = 8
RATE = 1024
WINDOW = 2.0
LIVENESS_S = 5.0  # /healthz must answer at all within this during an attack (not a timing claim)
DEADLINE_S = 30.0  # the most any wait here lasts before the test gives up
MIB = 1 << 20


def _until(cond: Callable[[], Any], what: str, limit_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + limit_s
    while not (got := cond()):
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.02)
    return got


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S, source_address=(source, 0))


def _read_until_closed(s: socket.socket) -> bytes:
    out = b""
    s.settimeout(DEADLINE_S)
    with contextlib.suppress(ConnectionError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def _read_one_response(s: socket.socket) -> bytes:
    """One response on a kept-alive connection (by its Content-Length)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"closed before a response: {buf[:200]!r}"
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def _healthz_latency(url: str) -> float:
    """Liveness during an attack: /healthz answers at all within LIVENESS_S (from 127.0.0.1)."""
    start = time.monotonic()
    r = httpx.get(f"{url}/healthz", timeout=LIVENESS_S)
    assert r.status_code == 200
    return time.monotonic() - start


def store_state(srv: LiveServer) -> dict[str, Any]:
    """Rows per table, blob files and temporary files: what a refused request must not change."""
    with srv.ctx.db.read() as s:
        rows = {t.name: s.scalar(select(func.count()).select_from(t)) for t in Base.metadata.sorted_tables}
    data_dir = srv.settings.data_dir
    return {"rows": rows, "blobs": blob_files(data_dir), "tmp": tmp_leftovers(data_dir)}


def _settings(data_dir: Path, **extra: Any) -> Settings:
    return make_settings(
        data_dir,
        None,  # SQLite in the data dir: on the tmpfs too, where there is one
        header_timeout=HEADER_TIMEOUT,
        max_connections_per_client=PER_CLIENT,
        max_connections=1000,
        min_body_rate=RATE,
        body_rate_window=WINDOW,
        body_timeout=DEADLINE_S,  # so the rate floor, not the stall timeout, is what cuts a trickle
        **extra,
    )


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(_settings(tmp_path_factory.mktemp("hostile-clients"))) as s:
        yield s


# --- heads ----------------------------------------------------------------------------------------


def test_slowloris_heads_are_cut_with_408_and_healthz_still_answers(srv: LiveServer) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\nX-Pad: " + b"p" * 200
    n = 3 * PER_CLIENT  # three attacking addresses, each at its connection limit
    socks = [_connect(srv.port, f"127.0.0.{2 + i // PER_CLIENT}") for i in range(n)]
    start = time.monotonic()
    sent = [0] * n
    answers: dict[int, bytes] = {}
    cut_at: dict[int, float] = {}
    health: list[float] = []
    try:
        for s in socks:
            s.setblocking(False)
        while len(cut_at) < n:
            assert time.monotonic() - start < DEADLINE_S, f"{n - len(cut_at)} connections still held"
            for i, s in enumerate(socks):
                if i in cut_at:
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    data = None
                except ConnectionError:
                    data = b""
                if data is not None:  # the server answered (or closed): the attack on it is over
                    answers[i] = data
                    cut_at[i] = time.monotonic() - start
                    continue
                with contextlib.suppress(BlockingIOError, ConnectionError):
                    s.send(head[sent[i] : sent[i] + 1])
                    sent[i] += 1
            if not health and time.monotonic() - start > HEADER_TIMEOUT / 2:
                health.append(_healthz_latency(srv.url))  # mid-attack
            time.sleep(0.1)  # the attacker's pace: a byte per 100 ms per connection
        for i, s in enumerate(socks):  # the rest of each answer, up to the server's close
            s.setblocking(True)
            answers[i] += _read_until_closed(s)
    finally:
        for s in socks:
            s.close()
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers.values()), [a[:60] for a in answers.values()]
    assert all(b'"/problems/request-timeout"' in a for a in answers.values())
    assert max(sent) < len(head), "a head was completed: the attack was not slow enough to test"
    print(
        f"\nslowloris x{n}: cut with 408 after {min(cut_at.values()):.2f}-{max(cut_at.values()):.2f} s "
        f"(header timeout {HEADER_TIMEOUT:g} s), {max(sent)} head bytes sent at most; "
        f"/healthz meanwhile {health[0] * 1000:.0f} ms"
    )


def test_connections_that_never_finish_their_heads_are_closed(srv: LiveServer) -> None:
    """400 connections from 50 addresses: half send nothing (closed without an answer), half
    send part of a head and stop (408)."""
    n = 400
    partial = b"POST /api/v1/analyses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
    socks: list[tuple[socket.socket, float]] = []
    try:
        for i in range(n):
            s = _connect(srv.port, f"127.0.1.{1 + i // PER_CLIENT}")
            if i % 2:
                s.sendall(partial)
            socks.append((s, time.monotonic()))
        health = _healthz_latency(srv.url)
        held: list[float] = []
        for i, (s, opened) in enumerate(socks):
            answer = _read_until_closed(s)
            held.append(time.monotonic() - opened)
            if i % 2:
                assert answer.startswith(b"HTTP/1.1 408") and b"LOGTRIAGE_HEADER_TIMEOUT" in answer, answer[
                    :200
                ]
            else:
                assert answer == b"", answer[:200]
    finally:
        for s, _ in socks:
            s.close()
    assert max(held) < DEADLINE_S
    print(
        f"\n{n} unfinished heads: closed after at most {max(held):.2f} s (header timeout "
        f"{HEADER_TIMEOUT:g} s); /healthz meanwhile {health * 1000:.0f} ms"
    )


def test_a_kept_alive_connection_still_serves_its_next_request(srv: LiveServer) -> None:
    """The head timeout counts from a later request's first byte, not from the connection."""
    with srv.client() as c:
        assert c.get("/healthz").status_code == 200
        start = time.monotonic()
        _until(lambda: time.monotonic() - start > HEADER_TIMEOUT * 1.5, "past the head timeout")
        assert c.get("/healthz").status_code == 200


# --- bodies ---------------------------------------------------------------------------------------


def test_a_trickled_body_is_cut_with_408_and_stores_nothing(srv: LiveServer) -> None:
    before = store_state(srv)
    with _connect(srv.port, "127.0.0.20") as s:
        s.sendall(
            b"POST /api/v1/analyses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 100000\r\n\r\n"
        )
        start = time.monotonic()
        answer = b""
        s.settimeout(0.1)  # the attacker's pace: a byte, then 100 ms listening for the answer
        while not answer:
            assert time.monotonic() - start < DEADLINE_S, "the trickle is still held"
            with contextlib.suppress(ConnectionError):
                s.send(b"x")
            try:
                answer = s.recv(65536)
            except TimeoutError:
                continue
        held = time.monotonic() - start
        s.settimeout(DEADLINE_S)
        with contextlib.suppress(TimeoutError, ConnectionError):
            while b'"}' not in answer and (more := s.recv(65536)):
                answer += more
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"connection: close" in head.lower()
    assert b'"/problems/request-timeout"' in body and b"LOGTRIAGE_MIN_BODY_RATE" in body, body
    assert held < WINDOW + DEADLINE_S
    assert store_state(srv) == before
    print(f"\nbody at ~10 bytes/s: cut with 408 after {held:.2f} s (window {WINDOW:g} s, floor {RATE} B/s)")


def test_a_slow_but_steady_body_passes(srv: LiveServer) -> None:
    """Three windows at ~8 KiB/s, eight times the floor: a slow uplink is not cut."""
    line = b"step 1 loss 2.0 lr 1e-5 throughput 1234 tokens/s on a slow uplink\n"
    piece = line * (4096 // len(line))

    def slow() -> Iterator[bytes]:
        start = time.monotonic()
        while time.monotonic() - start < 3 * WINDOW:
            yield piece
            time.sleep(0.5)  # the client's own pace
        yield b"RuntimeError: CUDA error: uncorrectable ECC error encountered\n"

    with srv.client() as c:
        r = c.post(API, content=slow(), headers=TEXT)
    assert r.status_code == 201, r.text[:300]


# --- connection limits ----------------------------------------------------------------------------


def test_one_client_over_its_connection_limit_gets_429_at_once(srv: LiveServer) -> None:
    protocol = srv.server.config.http
    addr = "127.0.0.30"
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    held = [_connect(srv.port, addr) for _ in range(PER_CLIENT)]
    try:
        for s in held:  # each served once and kept alive: held, not idle-looking to the test
            s.sendall(request)
            assert _read_one_response(s).startswith(b"HTTP/1.1 200")
        _until(lambda: protocol.open_connections.by_client.get(addr) == PER_CLIENT, "all counted")
        start = time.monotonic()
        with _connect(srv.port, addr) as extra:
            with contextlib.suppress(ConnectionError):
                extra.sendall(request)
            answer = _read_until_closed(extra)
        refused_in = time.monotonic() - start
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 429"), answer[:300]
        assert b"retry-after: 5" in head.lower() and b"connection: close" in head.lower()
        assert b'"/problems/too-many-connections"' in body
        # another address is served meanwhile
        with _connect(srv.port, "127.0.0.31") as other:
            other.sendall(request)
            assert _read_one_response(other).startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()
    _until(lambda: protocol.open_connections.by_client.get(addr) is None, "the held ones released")
    with _connect(srv.port, addr) as again:
        again.sendall(request)
        assert _read_one_response(again).startswith(b"HTTP/1.1 200")
    print(
        f"\nconnection {PER_CLIENT + 1} from one address: 429 in {refused_in * 1000:.0f} ms (answer read to EOF)"
    )


async def _pong(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
    await send({"type": "http.response.body", "body": b"pong"})


def test_the_process_connection_cap_answers_503() -> None:
    """`LOGTRIAGE_MAX_CONNECTIONS` on the protocol alone (a bare app: the cap is in the protocol)."""
    protocol = uvicorn_http(Settings(max_connections=4, max_connections_per_client=0, header_timeout=0))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(_pong, host="127.0.0.1", port=port, http=protocol, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    held: list[socket.socket] = []
    try:
        _until(lambda: server.started, "server start")
        held = [_connect(port, f"127.0.2.{i + 1}") for i in range(4)]  # silent: no head timeout here
        _until(lambda: protocol.open_connections.total == 4, "all counted")
        with _connect(port, "127.0.2.9") as extra:
            answer = _read_until_closed(extra)
        assert answer.startswith(b"HTTP/1.1 503") and b"retry-after: 5" in answer.lower(), answer[:200]
        assert b"LOGTRIAGE_MAX_CONNECTIONS" in answer
        held.pop().close()
        _until(lambda: protocol.open_connections.total == 3, "one released")
        with _connect(port, "127.0.2.9") as again:
            again.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _read_one_response(again).endswith(b"pong")
    finally:
        for s in held:
            s.close()
        server.should_exit = True
        thread.join(60)


# --- a full disk ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tmpfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 128 MiB tmpfs (readiness wants 64 MiB free at start), or a skip where mounting is not
    allowed (not root, no CAP_SYS_ADMIN)."""
    where = tmp_path_factory.mktemp("tmpfs")
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture(scope="module")
def full_srv(tmpfs: Path) -> Iterator[LiveServer]:
    with live_server(_settings(tmpfs / "data")) as s:
        yield s


FILLER = "filler.bin"


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextlib.contextmanager
def _filled(data_dir: Path, *, leave: int) -> Iterator[Path]:
    """Fill the data dir's disk so that `leave` bytes stay free; freed again afterwards."""
    filler = data_dir / FILLER
    try:
        _fill(filler, leave=leave)
        yield filler
    finally:
        filler.unlink(missing_ok=True)


def _fill(filler: Path, *, leave: int) -> None:
    """Allocate the disk's free space but `leave` bytes (in halving steps: the server may be
    writing meanwhile)."""
    with filler.open("ab") as fh:
        step = _free(filler.parent) - leave
        while step >= 4096:
            try:
                os.posix_fallocate(fh.fileno(), os.fstat(fh.fileno()).st_size, step)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                step //= 2
                continue
            step = _free(filler.parent) - leave
    assert _free(filler.parent) <= leave + 8192


def _noise_log(n_bytes: int) -> bytes:
    """A log that compresses about 2x (hex digests): its stored blob takes real space."""
    lines = []
    size = 0
    i = 0
    while size < n_bytes:
        line = f"step {i} grad_hash {os.urandom(24).hex()} loss 2.0\n".encode()
        lines.append(line)
        size += len(line)
        i += 1
    return b"".join(lines) + b"RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


def _assert_507(r: httpx.Response) -> None:
    assert r.status_code == 507, r.text[:400]
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["type"] == "/problems/insufficient-storage", r.json()
    assert int(r.headers["retry-after"]) > 0


def _works_again(srv: LiveServer) -> None:
    with srv.client() as c:
        r = c.post(API, content=_noise_log(64 << 10), headers=TEXT)
        assert r.status_code == 201, r.text[:300]


def test_a_disk_filling_up_mid_upload_gives_507_and_keeps_nothing(full_srv: LiveServer) -> None:
    data_dir = full_srv.settings.data_dir
    before = store_state(full_srv)
    filler = data_dir / FILLER
    body = _noise_log(6 * MIB)

    def fills_mid_way() -> Iterator[bytes]:
        yield body[: 2 * MIB]  # spooled (over 1 MiB): on disk already
        _fill(filler, leave=0)  # now the disk is full, with the rest of the body still to come
        for i in range(2 * MIB, len(body), 256 << 10):
            yield body[i : i + (256 << 10)]

    try:
        with full_srv.client() as c:
            r = c.post(API, content=fills_mid_way(), headers=TEXT)
        _assert_507(r)
        assert store_state(full_srv) == before
    finally:
        filler.unlink(missing_ok=True)
    _works_again(full_srv)


@pytest.mark.parametrize(
    ("name", "size", "spare"),
    [
        # spooled (16 MiB): the body fits, its blob (~5.4 MiB, staged by a writer thread beside
        # the scan once past 8 MiB of log) does not: the disk fills after ~12 MiB of log. This
        # was a 400 "Unreadable input ... [Errno 28]" (permanent: the hook gave up)
        ("spooled upload, blob staged beside the scan", 16 * MIB, 20 * MIB),
        # spooled, smaller (3 MiB): the blob staged by the scan's own reads
        ("spooled upload, blob staged by the scan", 3 * MIB, 3 * MIB + (256 << 10)),
        # in memory (300 KB, analysed in the server process): its blob (~160 KB) does not fit
        ("small upload, blob staged inline", 300 << 10, 32 << 10),
    ],
)
def test_a_full_disk_while_staging_the_blob_gives_507_and_keeps_nothing(
    name: str, size: int, spare: int, full_srv: LiveServer
) -> None:
    data_dir = full_srv.settings.data_dir
    body = _noise_log(size)
    before = store_state(full_srv)
    with _filled(data_dir, leave=spare), full_srv.client() as c:
        r = c.post(API, content=body, headers=TEXT)
        _assert_507(r)
        after = store_state(full_srv)
        assert after["rows"] == before["rows"] and after["blobs"] == before["blobs"]
        # a scan worker whose early start the refusal cancelled removes its half-written blob when
        # it sees the abort, which may be just after the answer: wait for that, never for a time
        deadline = time.monotonic() + 60
        while after["tmp"] != before["tmp"] and time.monotonic() < deadline:
            time.sleep(0.05)  # polling a condition (the file's removal) with a deadline
            after = store_state(full_srv)
        assert after == before
    _works_again(full_srv)


def test_a_full_disk_at_the_commit_or_in_the_database_gives_507(
    srv: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected at the edge, in this process (the server runs in a thread here): the link that
    puts a blob in place, and SQLite's own error for a full disk."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from app.blobstore import directory
    from app.db import repo

    def no_space(*_a: Any, **_k: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    def db_full(*_a: Any, **_k: Any) -> Any:
        raise OperationalError(
            "INSERT INTO analyses", {}, sqlite3.OperationalError("database or disk is full")
        )

    for target, name, fake in ((directory.os, "link", no_space), (repo, "complete_analyses", db_full)):
        before = store_state(srv)
        with monkeypatch.context() as m:
            m.setattr(target, name, fake)
            with srv.client() as c:
                r = c.post(API, content=_noise_log(8 << 10), headers=TEXT)
        _assert_507(r)
        assert store_state(srv) == before, name
    _works_again(srv)


def test_what_counts_as_a_full_disk(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ENOSPC and EDQUOT (a quota), and a database saying so, are a 507 at the API and exit code
    3 at the CLI; other OSErrors are not."""
    import argparse
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from app import cli
    from app.errors import InsufficientStorageError, disk_full, is_disk_full

    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full")))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    err = disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert isinstance(err, InsufficientStorageError) and err.http_status == 507 and err.exit_code == 3

    def quota(_args: Any) -> int:
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=quota)
    monkeypatch.setattr(cli, "build_parser", lambda **_kw: parser)
    assert cli.main([]) == 3
    assert "disk is full (Disk quota exceeded)" in capsys.readouterr().err
