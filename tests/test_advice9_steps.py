"""Advice of the ninth blind set's first round (tests/corpus/advice9): the wrong items and the
unknowns fixed, each read from the set's log and, where the other side can be shown, from a rule
fixture or a small synthetic log that keeps the old advice."""

from __future__ import annotations

from tests.advicekit import root as _root
from tests.advicekit import rule_fixture as _fixture
from tests.advicekit import set_reader
from tests.conftest import ROOT, Analyze

RULES = ROOT / "rules"
_set = set_reader("advice9")


# the NCCL unique id that rank 0 never published: rank 0 is where to look, not the network


def test_a_missing_nccl_unique_id_points_at_rank_0_and_is_investigated(analyze: Analyze) -> None:
    a = _set(analyze, "u-recbole-2069-ncclUniqueId-store-timeout.log")
    f = _root(a, "dist-rendezvous-timeout")
    text = f.remediation
    assert "Rank 5 waited for rank 0 to put the NCCL unique id in the store (key '0')" in text
    # RecBole runs its own trainer: Hugging Face's `ddp_timeout` is for logs that show it
    # (the fourth regrade's wrong item; tests/test_advice_regrade4.py)
    assert "(Socket Timeout)" in text and "ddp_timeout" not in text
    # every rank had met at the store: not the missing-process reading, nor stale launchers
    assert "Count the ranks that started" not in text and "Clear leftovers" not in text
    assert a.action is not None and a.action.decision == "investigate"
    assert "Rank 0 never put the NCCL unique id" in a.action.why[0]


def test_older_torch_spelling_and_a_store_that_went_away(analyze: Analyze) -> None:
    old = _fixture(analyze, "dist", "dist-rendezvous-timeout.match-nccl-unique-id-old.log")
    assert "Rank 3 waited for rank 0" in _root(old, "dist-rendezvous-timeout").remediation
    gone = analyze(
        "[rank3]: torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: "
        "Connection reset by peer\n"
    )
    f = _root(gone, "dist-rendezvous-timeout")
    assert (
        "lost the store while it waited for rank 0's NCCL unique id (Connection reset by peer)"
        in f.remediation
    )
    assert "Rank 3 waited" not in f.remediation
    # the store went away: no claim that rank 0 never reached its collective, so no investigate
    assert gone.action is not None and gone.action.decision == "retry"
