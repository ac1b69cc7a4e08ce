"""A big raw upload is analysed while it arrives: the scan worker reads the spool file behind the
request (app.service.spool.GrowingFile), so receiving and analysing overlap instead of adding up.

The client here holds the rest of its body back until the server's scan has started, so the test
shows the overlap itself, not a timing."""

from __future__ import annotations

import gzip
import random
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servicekit import ECC, LiveServer, blob_files, tmp_leftovers, training_log

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
MiB = 1 << 20


class ScanWatch:
    """Records when the server hands an upload to a scan worker (and whether it was growing)."""

    def __init__(self, srv: LiveServer) -> None:
        self.pool = srv.ctx.pool
        self.real = self.pool.scan
        self.started = threading.Event()
        self.growing: list[bool] = []

    async def scan(self, job: Any) -> Any:
        self.growing.append(any(f.growing for f in job.files))
        self.started.set()
        return await self.real(job)

    def __enter__(self) -> ScanWatch:
        self.pool.scan = self.scan
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.scan = self.real


def _log(mib: int) -> bytes:
    # a run id per line keeps it from compressing to nothing: gzipped it is still MiBs
    rng = random.Random(mib)
    lines = []
    size = 0
    step = 0
    while size < mib * MiB:
        step += 1
        line = f"(TaskRunner pid=4121) step:{step} - run:{rng.getrandbits(128):032x} - actor/pg_loss:0.0123\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode() + training_log(ECC.format(ip="10.9.8.7")).encode()


def _held_back(data: bytes, watch: ScanWatch, first: int) -> Iterator[bytes]:
    """Sends `first` bytes, then waits until the scan has started, then the rest."""
    for i in range(0, first, 256 << 10):
        yield data[i : min(first, i + (256 << 10))]
    assert watch.started.wait(120), "the scan did not start before the body was complete"
    for i in range(first, len(data), 1 << 20):
        yield data[i : i + (1 << 20)]


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_big_raw_upload_is_scanned_while_it_arrives(server: LiveServer, encoding: str) -> None:
    raw = _log(6)
    data = raw if encoding == "identity" else gzip.compress(raw, 1)
    headers = {"Content-Type": "text/plain"}
    if encoding == "gzip":
        headers["Content-Encoding"] = "gzip"
        data = data + gzip.compress(_log(4), 1)  # two gzip members: one stream
    with server.client() as c, ScanWatch(server) as watch:
        r = c.post(API, content=_held_back(data, watch, 2 * MiB), headers=headers, timeout=300)
    assert r.status_code == 201, r.text[:300]
    assert watch.growing == [True]
    res = r.json()
    assert res["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
    with server.client() as c:
        stored = c.get(f"{API}/{res['id']}/log", params={"file": 0})
    expected = raw if encoding == "identity" else raw + _log(4)
    assert stored.status_code == 200 and stored.content == expected


def test_an_upload_cut_while_it_is_scanned_leaves_nothing(server: LiveServer) -> None:
    data = _log(8)
    with server.client() as c:
        before = len(c.get(API, params={"limit": 200}).json()["items"])
    blobs = set(blob_files(server.settings.data_dir))

    def cut(watch: ScanWatch) -> Iterator[bytes]:
        yield from _held_back(data[: 3 * MiB], watch, 2 * MiB)
        raise RuntimeError("the client died")

    with (
        server.client() as c,
        ScanWatch(server) as watch,
        pytest.raises((RuntimeError, httpx.TransportError)),
    ):
        c.post(API, content=cut(watch), headers={"Content-Type": "text/plain"}, timeout=300)
    with server.client() as c:
        for _ in range(3000):  # the server notices the lost connection, the worker its abort
            if not tmp_leftovers(server.settings.data_dir) and not server.ctx.service._tasks:
                break
            threading.Event().wait(0.02)
        assert not tmp_leftovers(server.settings.data_dir)
        assert len(c.get(API, params={"limit": 200}).json()["items"]) == before
    assert set(blob_files(server.settings.data_dir)) == blobs


def test_an_upload_with_an_idempotency_key_is_read_whole_first(server: LiveServer) -> None:
    """Its body is compared with the first request's before anything runs."""
    with server.client() as c, ScanWatch(server) as watch:
        r = c.post(
            API, content=_log(3), headers={"Content-Type": "text/plain", "Idempotency-Key": "stream-key-1"}
        )
    assert r.status_code == 201 and watch.growing == [False]


def test_a_binary_body_refused_while_it_arrives_is_a_clean_415(server: LiveServer) -> None:
    """The scan refuses it from its first MiB and takes the spool with it, before the request
    has finished writing: the request still answers the 415 (it once failed writing its marker)."""
    import os

    with server.client() as c:
        for _ in range(4):
            r = c.post(API, content=os.urandom(3 * MiB), headers={"Content-Type": "text/plain"})
            assert r.status_code == 415, r.text[:300]
            assert "binary" in r.json()["detail"]
    assert not tmp_leftovers(server.settings.data_dir)
