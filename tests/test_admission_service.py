"""Admission control in the real service: a saturated server answers at once (202, 503, 429 with
Retry-After), stores nothing it refused, and finishes everything it accepted.

The scan pool is held shut by the test (its `scan` waits for a threading.Event) so "saturated" is a
state the test sets, not a race it hopes to win."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servicekit import OOM, LiveServer, live_server, make_settings, training_log

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"


class Gate:
    """Holds every scan until `open()`; counts the scans that started."""

    def __init__(self, srv: LiveServer) -> None:
        self.pool = srv.ctx.pool
        self.real = self.pool.scan
        self.opened = threading.Event()
        self.started = 0

    async def scan(self, job: Any) -> Any:
        self.started += 1
        while not self.opened.is_set():
            await asyncio.sleep(0.01)
        return await self.real(job)

    def __enter__(self) -> Gate:
        self.pool.scan = self.scan
        return self

    def __exit__(self, *exc: object) -> None:
        self.opened.set()
        self.pool.scan = self.real


@pytest.fixture
def saturable(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    settings = make_settings(
        tmp_path / "data", db_url, analysis_workers=1, analysis_backlog=2, client_share=1.0
    )
    with live_server(settings) as srv:
        yield srv


def _log(n: int) -> bytes:
    return training_log(OOM.format(gib=f"{n}.5"), job=f"adm-{n}").encode()


def _post(c: httpx.Client, n: int, **headers: str) -> httpx.Response:
    return c.post(API, content=_log(n), headers={"Content-Type": "text/plain", **headers})


def _count(c: httpx.Client) -> int:
    r = c.get(API, params={"limit": 200})
    assert r.status_code == 200
    return len(r.json()["items"])


def test_a_saturated_server_answers_at_once_and_finishes_what_it_accepted(saturable: LiveServer) -> None:
    with saturable.client() as c, Gate(saturable) as gate:
        first = _post(c, 1, Prefer="respond-async")
        assert first.status_code == 202
        # the slot is taken; an upload that must queue is answered 202 without waiting for it,
        # though it asked to wait (sync wait 20 s)
        queued = [_post(c, n) for n in (2, 3)]
        assert [r.status_code for r in queued] == [202, 202]
        assert all(r.headers.get("Location") for r in queued)
        full = _post(c, 4)
        assert full.status_code == 503
        assert full.headers["content-type"].startswith("application/problem+json")
        assert 1 <= int(full.headers["Retry-After"]) <= 60
        assert "nothing was stored" in full.json()["detail"]
        assert _count(c) == 3  # the refused upload left no row
        assert saturable.ctx.service.admission.waiting == 2
        gate.opened.set()
        for r in [first, *queued]:
            _wait_done(c, r.json()["id"])
        assert _post(c, 5).status_code == 201  # back to answering in one round trip


def test_uploads_past_the_memory_budget_wait_on_disk_not_refused(db_url: str, tmp_path: Path) -> None:
    """A burst of hooks bigger than the memory the backlog may hold is acknowledged (202), not
    sent back with 503: the uploads past the budget wait for their turn written to the spool,
    are analysed from there, and leave nothing behind. The backlog's count still refuses."""
    body = len(_log(1))
    settings = make_settings(
        tmp_path / "data",
        db_url,
        analysis_workers=1,
        analysis_backlog=3,
        analysis_backlog_bytes=body + body // 2,  # one waiting body in memory, not two
        client_share=1.0,
    )
    tmp = tmp_path / "data" / "tmp"
    with live_server(settings) as srv, srv.client() as c, Gate(srv) as gate:
        running = _post(c, 1, Prefer="respond-async")
        in_memory = _post(c, 2, Prefer="respond-async")
        on_disk = [_post(c, n, Prefer="respond-async") for n in (3, 4)]
        assert [r.status_code for r in (running, in_memory, *on_disk)] == [202] * 4
        adm = srv.ctx.service.admission
        assert adm.waiting == 3 and 0 < adm.memory <= body + body // 2  # only one body held
        spooled = sorted(str(p.relative_to(tmp)) for p in tmp.glob("up-*/**/*") if p.is_file())
        assert len(spooled) == 2, spooled  # the two past the budget, each in its request's spool
        full = _post(c, 5, Prefer="respond-async")
        assert full.status_code == 503 and "nothing was stored" in full.json()["detail"]
        gate.opened.set()
        done = [_wait_done(c, r.json()["id"]) for r in (running, in_memory, *on_disk)]
        assert [d["root_cause"]["failure_class"] for d in done] == ["cuda.out_of_memory"] * 4
        for d, n in zip(done, (1, 2, 3, 4), strict=True):
            assert d["files"][0]["size"] == len(_log(n))  # read whole, from memory or from disk
        assert not [p for p in tmp.rglob("*") if p.is_file()]  # no spooled body, no staged blob left
        assert adm.waiting == 0 and adm.memory == 0


def test_one_client_over_its_share_gets_429(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path / "data", db_url, analysis_workers=1, analysis_backlog=4, client_share=0.25
    )
    with live_server(settings) as srv, srv.client() as c, Gate(srv) as gate:
        assert _post(c, 1, Prefer="respond-async").status_code == 202  # running
        assert _post(c, 2, Prefer="respond-async").status_code == 202  # its one place in line
        over = _post(c, 3, Prefer="respond-async")
        assert over.status_code == 429
        assert over.json()["type"] == "/problems/too-many-requests"
        assert int(over.headers["Retry-After"]) >= 1
        gate.opened.set()


def test_a_replayed_key_of_an_interrupted_analysis_runs_it_again(server: LiveServer) -> None:
    """After a crash the restart marks what was running failed (interrupted, 503); the hook's retry
    with the same Idempotency-Key and body runs it again under the same id."""
    from app.db import repo

    key = "retry-after-crash-1"
    with server.client() as c:
        with Gate(server) as gate:
            r = _post(c, 7, **{"Idempotency-Key": key, "Prefer": "respond-async"})
            assert r.status_code == 202
            aid = r.json()["id"]
            # what `logtriage serve` does at start for a runner that is gone
            with server.ctx.db.write() as s:
                row = repo.get_analysis(s, analysis_id=aid)
                row.runner = "gone-host:1"
            with server.ctx.db.write() as s:
                assert repo.mark_interrupted(s, host="gone-host", alive=[]) == 1
            gate.opened.set()
        failed = c.get(f"{API}/{aid}").json()
        assert failed["status"] == "failed" and failed["error"]["status"] == 503
        again = _post(c, 7, **{"Idempotency-Key": key})
        assert again.status_code in (201, 202)
        assert "Idempotent-Replayed" not in again.headers
        assert again.json()["id"] == aid
        done = _wait_done(c, aid)
        assert done["root_cause"]["failure_class"] == "cuda.out_of_memory"
        replay = _post(c, 7, **{"Idempotency-Key": key})  # now done: an ordinary replay
        assert replay.headers.get("Idempotent-Replayed") == "true" and replay.json()["id"] == aid


@pytest.mark.parametrize("key", [None, "pending-as-stored-1"])
def test_a_202_is_what_the_stored_row_says(server: LiveServer, key: str | None) -> None:
    """A pending answer is built from the row the request inserted, not read back: it must be
    the resource a poll of that row returns, field for field."""
    _wait_idle(server.ctx.service)
    headers = {"Prefer": "respond-async", **({"Idempotency-Key": key} if key else {})}
    with server.client() as c, Gate(server):
        r = c.post(
            API,
            content=_log(9),
            params={"job_id": "j-9", "exit_code": 137, "host": "node-3", "label": ["team=rl", "run=9"]},
            headers={"Content-Type": "text/plain", **headers},
        )
        assert r.status_code == 202
        polled = c.get(f"{API}/{r.json()['id']}")
        assert polled.json()["status"] == "pending"
        assert r.json() == polled.json()
        assert r.json()["metadata"]["labels"] == {"team": "rl", "run": "9"}


def test_a_replay_throws_away_the_scan_started_before_its_key_was_looked_up(server: LiveServer) -> None:
    """A hook's upload held in memory is scanned while its Idempotency-Key is reserved; when the
    key turns out to be an earlier request's (a replay), that scan's staged blob is deleted and
    its scan slot given back."""
    svc = server.ctx.service
    # the module's server is shared: an earlier test's replay may still hold a scan slot (and call
    # the discard this test watches), and an upload that must queue is answered 202, not waited on
    _wait_idle(svc)
    discarded = threading.Event()
    real = svc._discard_outcome

    def spy(scan: Any) -> None:
        real(scan)
        discarded.set()

    svc._discard_outcome = spy  # type: ignore[method-assign]
    staging = server.settings.data_dir / "tmp"
    key = "replay-scanned-ahead-1"
    try:
        with server.client() as c:
            first = _post(c, 8, **{"Idempotency-Key": key})
            assert first.status_code in (201, 202)
            assert _wait_done(c, first.json()["id"])["root_cause"]["failure_class"] == "cuda.out_of_memory"
            assert not list(staging.glob("blob-*.part"))
            replay = _post(c, 8, **{"Idempotency-Key": key})
            assert replay.headers.get("Idempotent-Replayed") == "true"
            assert replay.json()["id"] == first.json()["id"]
            assert discarded.wait(60), "the replay's scan never ended"
            assert not list(staging.glob("blob-*.part"))  # its staged copy went with it
            assert svc.admission.running == 0 and svc.admission.waiting == 0
    finally:
        del svc._discard_outcome


def _wait_idle(svc: Any) -> None:
    for _ in range(6000):
        if svc.admission.running == 0 and svc.admission.waiting == 0:
            return
        threading.Event().wait(0.02)
    raise AssertionError("the service never went idle")


def _wait_done(c: httpx.Client, aid: str) -> dict[str, Any]:
    for _ in range(6000):
        res = c.get(f"{API}/{aid}").json()
        if res["status"] != "pending":
            assert res["status"] == "done", res
            return res  # type: ignore[no-any-return]
        threading.Event().wait(0.02)
    raise AssertionError(f"analysis {aid} never finished")
