"""Admission control: slots, a bounded fair backlog, and refusals that say when to come back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.errors import ServiceUnavailableError, TooManyRequestsError
from app.service.admission import RETRY_AFTER_MAX_S, RETRY_AFTER_MIN_S, Admission
from tests.conftest import run_async


def run(coro: object) -> object:
    return run_async(coro)  # type: ignore[arg-type]


def test_slots_run_at_once_then_the_backlog_waits_its_turn() -> None:
    async def go() -> None:
        adm = Admission(slots=2, backlog=4, backlog_bytes=0)
        a, b = adm.admit(client="x"), adm.admit(client="x")
        assert a.running and b.running
        c = adm.admit(client="x")
        assert not c.running and adm.waiting == 1
        a.release()
        assert c.running and adm.waiting == 0 and adm.running == 2
        a.release()  # twice is harmless
        assert adm.running == 2
        b.release()
        c.release()
        assert adm.running == 0

    run(go())


def test_a_full_backlog_is_refused_with_503_and_retry_after() -> None:
    async def go() -> None:
        adm = Admission(slots=1, backlog=2, backlog_bytes=0, client_share=1.0)
        held = [adm.admit(client=f"c{i}") for i in range(3)]  # 1 running, 2 waiting
        with pytest.raises(ServiceUnavailableError) as err:
            adm.admit(client="late")
        assert err.value.http_status == 503
        assert RETRY_AFTER_MIN_S <= (err.value.retry_after or 0) <= RETRY_AFTER_MAX_S
        held[1].release()  # a waiting one leaves: there is room again
        assert adm.admit(client="late") is not None
        for t in held:
            t.release()

    run(go())


def test_memory_of_the_waiting_uploads_is_bounded() -> None:
    async def go() -> None:
        adm = Admission(slots=1, backlog=100, backlog_bytes=3 << 20, client_share=1.0)
        adm.admit(client="a", memory=1 << 20)  # running: its bytes are on their way out
        adm.admit(client="a", memory=1 << 20)
        adm.admit(client="a", memory=1 << 20)
        assert adm.memory == 2 << 20
        adm.admit(client="a", memory=1 << 20)
        with pytest.raises(ServiceUnavailableError):
            adm.admit(client="a", memory=1 << 20)
        adm.admit(client="a", memory=0)  # a body that waits on disk takes no memory

    run(go())


def test_a_client_over_its_share_gets_429_while_others_are_admitted() -> None:
    async def go() -> None:
        adm = Admission(slots=1, backlog=10, backlog_bytes=0, client_share=0.3)  # 3 each
        adm.admit(client="flood")
        for _ in range(3):
            adm.admit(client="flood")
        with pytest.raises(TooManyRequestsError) as err:
            adm.admit(client="flood")
        assert err.value.http_status == 429 and err.value.retry_after
        assert not adm.admit(client="hook").running  # another client still gets in line

    run(go())


def test_turns_go_round_robin_between_clients() -> None:
    async def go() -> list[str]:
        adm = Admission(slots=1, backlog=20, backlog_bytes=0, client_share=1.0)
        current = adm.admit(client="array")
        granted: list[str] = []
        waiting = [adm.admit(client="array") for _ in range(5)]
        waiting += [adm.admit(client="team-b"), adm.admit(client="team-c")]
        for t in waiting:
            t.granted.add_done_callback(lambda _f, t=t: granted.append(t.client))
        while True:
            current.release()
            await asyncio.sleep(0)  # done-callbacks run on the loop
            running = [t for t in waiting if t.running]
            if not running:
                return granted
            current = running[0]
            waiting.remove(current)

    order = run(go())
    # the other clients are served after at most one more of the array's logs each
    assert order == ["array", "team-b", "team-c", "array", "array", "array", "array"]


def test_a_ticket_that_leaves_before_its_turn_frees_its_place() -> None:
    async def go() -> None:
        adm = Admission(slots=1, backlog=1, backlog_bytes=0, client_share=1.0)
        running = adm.admit(client="a")
        waiting = adm.admit(client="b", memory=10)
        waiting.release()  # its request failed while it waited
        assert adm.waiting == 0 and adm.memory == 0
        late = adm.admit(client="c")
        running.release()
        assert late.running and not waiting.running

    run(go())


def test_a_queued_ticket_wakes_its_waiter() -> None:
    async def go() -> bool:
        adm = Admission(slots=1, backlog=1, backlog_bytes=0, client_share=1.0)
        first = adm.admit(client="a")
        second = adm.admit(client="b")
        waiter = asyncio.ensure_future(second.wait_turn())
        await asyncio.sleep(0)
        assert not waiter.done()
        first.release()
        await asyncio.wait_for(waiter, timeout=30)
        return second.running

    assert run(go()) is True


def test_expected_time_counts_the_turns_ahead_at_the_measured_pace() -> None:
    async def go() -> None:
        adm = Admission(slots=2, backlog=10, backlog_bytes=0, client_share=1.0)
        held = [adm.admit(client=f"c{i}") for i in range(2)]  # both slots taken
        first, second, third = (adm.admit(client=f"w{i}") for i in range(3))
        assert (first.ahead, second.ahead, third.ahead) == (0, 1, 2)
        pace = adm.expected_s(0)  # nothing measured yet: the initial estimate, one analysis
        assert pace > 0
        assert adm.expected_s(first.ahead) == pace and adm.expected_s(second.ahead) == pace  # turn one
        assert adm.expected_s(third.ahead) == 2 * pace  # two slots: the third waits a whole turn
        assert (first.turn_s(), second.turn_s(), third.turn_s()) == (0, 0, pace)
        for t in (*held, first, second, third):
            t.release()

    run(go())


def test_a_queued_upload_whose_turn_is_far_off_is_answered_without_waiting() -> None:
    from types import SimpleNamespace

    from app.service import ops
    from app.service.analyses import Started

    async def go() -> None:
        adm = Admission(slots=1, backlog=10, backlog_bytes=0, client_share=1.0)
        adm._seconds = 10 * ops.QUEUE_GRACE_S  # the measured pace: analyses take long now
        running = adm.admit(client="a")
        first = adm.admit(client="b")  # next in line
        queued = adm.admit(client="c")  # behind it: its turn is a whole (slow) analysis away
        assert queued.turn_s() > ops.QUEUE_GRACE_S
        never: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(never)
        registered: list[str] = []

        async def register(analysis_id: str) -> bool:
            registered.append(analysis_id)
            return False

        ctx = SimpleNamespace(service=SimpleNamespace(register=register))
        started = Started("an-id", task, ticket=queued)  # type: ignore[arg-type]
        awaited: list[bool] = []
        waits_for_turn = queued.wait_turn

        async def note_wait() -> None:
            awaited.append(True)
            await waits_for_turn()

        queued.wait_turn = note_wait  # type: ignore[method-assign]
        # asked to wait an hour: were the grace spent waiting for a turn 10 graces off and then
        # the analysis, this would not return until the timeout
        sub = await asyncio.wait_for(ops.settle(ctx, started=started, wait=3600), timeout=60)  # type: ignore[arg-type]
        assert sub.completed is None and sub.pending is task
        assert registered == ["an-id"]  # it got a row to poll before the 202
        assert not awaited  # no grace spent on a turn the pace puts 10 graces away
        task.cancel()
        running.release()
        first.release()
        queued.release()

    run(go())


def test_a_queued_upload_whose_turn_comes_in_the_grace_waits_for_its_analysis() -> None:
    """One round trip for a short queue: its turn comes, then its analysis ends after the grace
    is over, and the answer is the finished analysis, not a 202."""
    from types import SimpleNamespace

    from app.service import ops
    from app.service.analyses import Started

    async def go() -> None:
        loop = asyncio.get_running_loop()
        adm = Admission(slots=1, backlog=10, backlog_bytes=0, client_share=1.0)
        adm._seconds = 10 * ops.QUEUE_GRACE_S  # a slow pace: its own analysis is long, its turn is next
        running = adm.admit(client="a")
        queued = adm.admit(client="b")
        assert queued.turn_s() == 0 and adm.expected_s(queued.ahead) > ops.QUEUE_GRACE_S
        task = asyncio.ensure_future(loop.create_future())
        waits_for_turn = queued.wait_turn

        async def turn_comes_at_once() -> None:  # while settle waits for it
            running.release()
            # the analysis ends after the grace (timers fire in deadline order)
            loop.call_later(2 * ops.QUEUE_GRACE_S, task.set_result, "done")
            await waits_for_turn()

        queued.wait_turn = turn_comes_at_once  # type: ignore[method-assign]

        async def register(analysis_id: str) -> bool:
            raise AssertionError("answered pending: a short queue must answer in one round trip")

        ctx = SimpleNamespace(service=SimpleNamespace(register=register))
        started = Started("an-id", task, ticket=queued)  # type: ignore[arg-type]
        sub = await asyncio.wait_for(ops.settle(ctx, started=started, wait=3600), timeout=60)  # type: ignore[arg-type]
        assert sub.completed == "done"
        queued.release()

    run(go())


def test_an_upload_that_would_wait_past_the_memory_budget_spills_while_the_count_has_room() -> None:
    async def go() -> None:
        adm = Admission(slots=1, backlog=3, backlog_bytes=2 << 20, client_share=1.0)
        assert not adm.spills(1 << 20)  # a free slot: it runs at once, held in memory
        adm.admit(client="a", memory=1 << 20)
        assert not adm.spills(1 << 20)  # it waits, and the budget holds it
        adm.admit(client="a", memory=1 << 20)
        adm.admit(client="a", memory=1 << 20)
        assert adm.spills(1 << 20)  # it would wait past the budget: to disk
        assert not adm.spills(0)  # already on disk
        adm.admit(client="a", memory=0)  # spilled: admitted holding nothing
        assert adm.waiting == 3
        assert not adm.spills(1 << 20)  # the count is full: refused, not spilled
        with pytest.raises(ServiceUnavailableError):
            adm.admit(client="a", memory=0)

    run(go())


def test_spilling_writes_each_in_memory_body_to_its_place_and_a_full_disk_is_507(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from app.errors import InsufficientStorageError
    from app.service.analyses import held_in_memory, spilled
    from app.service.jobs import InputFile, ScanJob

    spool = tmp_path / "up-1"
    on_disk = tmp_path / "big.log"
    on_disk.write_bytes(b"already spooled\n")
    job = ScanJob(
        files=(InputFile("a.log", str(spool / "a.log"), data=b"a\n"), InputFile("big.log", str(on_disk))),
        config=InputFile("job.yaml", str(spool / "job.yaml"), data=b"k: 1\n"),
    )
    out = spilled(job, spool)
    assert held_in_memory(out) == 0 and held_in_memory(job) == 7
    assert [f.read() for f in out.files] == [b"a\n", b"already spooled\n"]
    assert out.config is not None and out.config.read() == b"k: 1\n"
    assert out.files[1] == job.files[1]
    elsewhere = ScanJob(files=(InputFile("b.log", str(tmp_path / "b.log"), data=b"b\n"),))
    moved = spilled(elsewhere, spool)  # its place is outside the spool: written inside it
    assert Path(moved.files[0].path).parent == spool and moved.files[0].read() == b"b\n"
    assert not (tmp_path / "b.log").exists()

    def full(self: Path, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(InsufficientStorageError):
        spilled(job, spool)
