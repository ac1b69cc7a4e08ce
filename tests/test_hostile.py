"""The hostile-input corpus (tests/hostile/corpus.py) against a live server, SQLite and PostgreSQL.

Each case must get its clear 4xx problem+json AND leave the store as it was: no new row in any
table, no new blob, no temporary file (spool directory, staged blob) left in the data dir.
Besides: the 10 MB gzip bomb stops within its first MiBs (time and bytes written measured), a
compressible real log within the ratio is analysed, file names in any script are stored and
served back (RFC 5987 `filename*`), slow and stalled bodies get 408, huge heads 431.
"""

from __future__ import annotations

import datetime as dt
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from sqlalchemy import func, select

from app.db.models import Base
from tests.hostile import corpus
from tests.hostile.corpus import API, CASES, FILE_NAMES, LOG_CONTENT, TEXT, Case, send_named, stored_problem
from tests.servicekit import LiveServer, blob_files, live_server, make_settings, tmp_leftovers

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def hostile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-corpus")


@pytest.fixture(scope="module")
def hostile_server(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("hostile-data"),
        db_url,
        max_upload_bytes=corpus.MAX_UPLOAD_BYTES,
        max_bytes=corpus.MAX_BYTES,
        max_tmp_bytes=corpus.MAX_TMP_BYTES,
        body_timeout=corpus.BODY_TIMEOUT,
    )
    with live_server(settings) as srv:
        yield srv


def store_state(srv: LiveServer) -> dict[str, Any]:
    """Rows per table, blob files and temporary files: what a refused request must not change."""
    with srv.ctx.db.read() as s:
        rows = {t.name: s.scalar(select(func.count()).select_from(t)) for t in Base.metadata.sorted_tables}
    data_dir = srv.settings.data_dir
    return {"rows": rows, "blobs": blob_files(data_dir), "tmp": tmp_leftovers(data_dir)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_gets_a_clear_4xx_and_changes_nothing(
    case: Case, hostile_server: LiveServer, hostile_cache: Path
) -> None:
    before = store_state(hostile_server)
    with hostile_server.client() as c:
        r = case.send(c, hostile_cache)
    assert r.status_code == case.status, (case.name, r.status_code, r.text[:400])
    body = stored_problem(r)
    assert body["type"] == f"/problems/{case.slug}", body
    if case.detail:
        assert case.detail.lower() in body["detail"].lower(), body["detail"]
    after = store_state(hostile_server)
    assert after == before, f"{case.name}: the store changed"


def test_gzip_bomb_stops_within_its_first_mibs(hostile_server: LiveServer, hostile_cache: Path) -> None:
    """The issue's 10 MB bomb (10 GiB expanded) wrote 10 GB to the data dir before: now it is
    refused by its ratio, having written its own body (the spool) and nothing else."""
    bomb = corpus.gzip_bomb(hostile_cache).read_bytes()
    proc = psutil.Process()
    written = proc.io_counters().write_chars  # the server runs in this process
    start = time.monotonic()
    with hostile_server.client() as c:
        r = c.post(API, content=bomb, headers=TEXT)
    seconds = time.monotonic() - start
    written = proc.io_counters().write_chars - written
    assert r.status_code == 413 and "compression bomb" in r.json()["detail"]
    # its body went to the spool and through the loopback socket (2 x 10 MB): nothing more
    assert written < 3 * len(bomb) + (8 << 20), f"{written >> 20} MiB written"
    assert seconds < 5, f"{seconds:.1f} s"
    print(f"\n10 MB gzip bomb: refused in {seconds:.2f} s, {written / 2**20:.1f} MiB written in all")


def test_compressible_real_log_within_the_ratio_is_analysed(
    hostile_server: LiveServer, hostile_cache: Path
) -> None:
    path = corpus.compressible_log(hostile_cache)
    body = path.read_bytes()
    with hostile_server.client() as c:
        r = c.post(API, content=body, headers=TEXT)
    assert r.status_code == 201, r.text[:300]
    expanded = r.json()["stats"]["bytes"]
    assert expanded / len(body) > 40  # far more compressible than most logs, and still a log
    assert r.json()["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
    assert tmp_leftovers(hostile_server.settings.data_dir) == []


@pytest.mark.parametrize(("sent", "stored"), FILE_NAMES, ids=[repr(n)[:40] for n, _ in FILE_NAMES])
def test_file_names_in_any_script_are_stored_and_served_back(
    sent: str, stored: str, hostile_server: LiveServer
) -> None:
    log = corpus.log_text(30, seed=hash(sent) % 1000)
    with hostile_server.client() as c:
        r = send_named(c, sent, log)
        assert r.status_code == 201, r.text[:300]
        res = r.json()
        assert res["files"][0]["name"] == stored
        got = c.get(res["files"][0]["url"])
        assert got.status_code == 200 and got.content.startswith(log[:100])
        disposition = got.headers["content-disposition"]
        assert disposition.isascii()
        star = disposition.split("filename*=UTF-8''", 1)[1]
        assert urllib.parse.unquote(star) == stored
        fallback = disposition.split('filename="', 1)[1].split('"', 1)[0]
        assert fallback and '"' not in fallback and "\\" not in fallback
        listed = c.get(res["links"]["self"]).json()
        assert listed["files"][0]["name"] == stored


@pytest.mark.parametrize(("name", "body", "failure_class"), LOG_CONTENT, ids=[c[0] for c in LOG_CONTENT])
def test_hostile_log_content_is_analysed_stored_and_served(
    name: str, body: bytes, failure_class: str | None, hostile_server: LiveServer
) -> None:
    with hostile_server.client() as c:
        r = c.post(API, content=body, headers=TEXT, params={"host": "node-1"})
        assert r.status_code == 201, r.text[:300]
        res = r.json()
        if failure_class is not None:
            assert res["root_cause"]["failure_class"] == failure_class
        for path in ("", "/report.md", "/report.html", "/log"):
            assert c.get(f"{API}/{res['id']}{path}").status_code == 200, path
        for page in (f"/analyses/{res['id']}", f"/analyses/{res['id']}/files/0"):
            assert c.get(page, headers={"Accept": "text/html"}).status_code == 200, page
        assert c.get(API, params={"host": "10." + "1" * 400}).status_code == 200


def test_stalled_body_gets_408(hostile_server: LiveServer) -> None:
    """A client that trickles a few bytes, then stalls: the server answers 408 by itself, and
    this test waits for that answer (reading the socket), not on a sleep of its own."""
    before = store_state(hostile_server)
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=30) as s:
        s.sendall(
            # a loopback name: the open-mode server refuses any other Host (app.http.hosts)
            b"POST /api/v1/analyses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 100000\r\n\r\n"
        )
        for line in (b"step 1 loss 2.0\n", b"step 2 loss 1.9\n"):
            s.sendall(line)
        start = time.monotonic()
        answer = _read_response(s)
        waited = time.monotonic() - start
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"connection: close" in head.lower()
    assert b'"/problems/request-timeout"' in body
    assert corpus.BODY_TIMEOUT * 0.9 <= waited < corpus.BODY_TIMEOUT + 10
    assert store_state(hostile_server) == before


def test_trickling_body_within_the_timeout_is_accepted(hostile_server: LiveServer) -> None:
    """The timeout is for a body that stops, not a slow one: pieces arriving within it pass."""
    log = corpus.log_text(40)
    pieces = [log[i : i + 512] for i in range(0, len(log), 512)]

    def slow() -> Iterator[bytes]:
        for p in pieces[:4]:
            time.sleep(corpus.BODY_TIMEOUT / 3)
            yield p
        yield b"".join(pieces[4:])

    with hostile_server.client() as c:
        r = c.post(API, content=slow(), headers=TEXT)
    assert r.status_code == 201, r.text[:300]


def _read_response(s: socket.socket) -> bytes:
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk


@pytest.mark.parametrize(
    ("name", "request_bytes"),
    [
        ("one 1 MiB header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"),
        (
            "one 80 KiB header",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (80 << 10) + b"\r\n\r\n",
        ),
        (
            "300 header fields",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: a\r\n" % i for i in range(300))
            + b"\r\n",
        ),
        (
            "a 1 MiB cookie on an upload",
            b"POST /api/v1/analyses HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nCookie: a="
            + b"b" * (1 << 20)
            + b"\r\n\r\nhello",
        ),
    ],
)
def test_huge_heads_get_a_clean_431(name: str, request_bytes: bytes, hostile_server: LiveServer) -> None:
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=30) as s:
        s.sendall(request_bytes)
        answer = _read_response(s)  # no ConnectionResetError: the server read what was sent
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b"request-header-fields-too-large" in answer


@pytest.mark.parametrize(
    ("name", "request_bytes"),
    [
        ("NUL in a header value", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"),
        ("obsolete line folding", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"),
        (
            "two Content-Lengths",
            b"POST /api/v1/analyses HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        ),
        (
            "Content-Length and chunked",
            b"POST /api/v1/analyses HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
        (
            "negative Content-Length",
            b"POST /api/v1/analyses HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        ),
        ("a NUL in the method", b"G\x00T /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
    ],
)
def test_malformed_requests_get_a_clean_400(
    name: str, request_bytes: bytes, hostile_server: LiveServer
) -> None:
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=30) as s:
        s.sendall(request_bytes)
        answer = _read_response(s)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]


def test_odd_but_valid_heads_are_served(hostile_server: LiveServer) -> None:
    with hostile_server.client() as c:
        assert c.get("/healthz", headers={"X-Utf8": "é".encode()}).status_code == 200
        assert c.get("/healthz", headers={f"X-{i}": "a" * 100 for i in range(60)}).status_code == 200


def test_every_date_filter_at_its_limits(hostile_server: LiveServer) -> None:
    """The bounds themselves are accepted; one step past them is a 422 (the cases above)."""
    with hostile_server.client() as c:
        for since in (
            "1970-01-01",
            "1970-01-01T00:00:00Z",
            "9999-12-29T00:00:00+00:00",
            "36600d",
            "5227w",
            "24h",
        ):
            r = c.get(API, params={"since": since})
            assert r.status_code == 200, (since, r.text)
        now = dt.datetime.now(dt.UTC).isoformat()
        assert c.get(API, params={"since": "1d", "until": now}).status_code == 200
        assert c.get(API, params={"since": "36601d"}).status_code == 422
