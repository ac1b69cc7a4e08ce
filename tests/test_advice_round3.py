"""The regrade of the 67 logs of the seventh to ninth blind sets after their fixes (round 3 of
tests/corpus/advice7 and advice8, round 2 of advice9): its one wrong item fixed."""

from __future__ import annotations

from tests.conftest import ROOT, Analyze

GCD = ROOT / "tests" / "corpus" / "advice8" / "s-gcd-6-ddp-broadcast-timeout-rank0-missing.log"

WATCHDOG = (
    "[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=56693, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1804371 milliseconds "
    "before timing out.\n"
)
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/train/trainer.py", line 289, in train_loop\n'
    "    training_step_outputs = self.training_step(batch, batch_idx)\n"
    "RuntimeError: NCCL communicator was aborted on rank 1.\n"
)


def test_a_merged_log_named_after_a_rank_does_not_give_that_rank_its_unlabelled_lines(
    analyze: Analyze,
) -> None:
    a = analyze(GCD.read_bytes(), name=GCD.name)  # its name holds "rank0"; its lines name 1-3
    assert a.timeline is not None
    states = {r["rank"]: r for r in a.timeline["ranks"]}
    assert 0 not in states  # the unlabelled traceback is nobody's: not rank 0's stop site
    assert all(not (r.get("stopped_in") or "").startswith("train_loop") for r in states.values())
    lead = a.timeline["verdict"]["summary"]
    assert "ranks 1, 2, 3 timed out on the same collective 56693" in lead
    assert "rank 0 printed nothing here, no timeout of its own" in lead
    # rank 0 is still the one the others waited for: investigated, not retried
    assert a.action is not None and a.action.decision == "investigate"
    assert "rank(s) 0 never reached" in a.action.why[0]
    # a file that is rank 0's own (only its lines, or none labelled): its traceback is rank 0's
    own = analyze("[Rank 0] step 10 loss 1.2\n" + TRACE, name="rank0.log")
    assert own.timeline is not None
    mine = {r["rank"]: r for r in own.timeline["ranks"]}
    assert (mine[0].get("stopped_in") or "").startswith("train_loop")


def test_ranks_unseen_below_a_subgroup_timeout_are_not_called_absent(analyze: Analyze) -> None:
    text = "".join(WATCHDOG.format(r=r) for r in (1, 2, 3))
    plain = analyze(text)
    assert plain.timeline is not None
    assert "rank 0 printed nothing here" in plain.timeline["verdict"]["summary"]
    # the same timeouts with status lines naming process group 2: its members need not be 0..3
    grouped = analyze(
        "".join(
            WATCHDOG.format(r=r)
            + f"[PG ID 2 PG GUID 9 Rank {r}] Exception (either an error or timeout) detected by watchdog "
            "at work: 56693, last enqueued NCCL work: 56694, last completed NCCL work: 56692.\n"
            for r in (1, 2, 3)
        )
    )
    assert grouped.timeline is not None
    assert "printed nothing here" not in grouped.timeline["verdict"]["summary"]
