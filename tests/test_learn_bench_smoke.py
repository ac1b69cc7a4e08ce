"""bench/learn_bench.py and bench/backtest_bench.py on tiny inputs: the invented failures stay
unknown and cluster one per failure, the purity arithmetic, a back-test over a small store
matches a plain regex."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import backtest_bench  # bench/ is not a package
import learn_bench


def test_purity_arithmetic() -> None:
    label = {"a": "x", "b": "x", "c": "y", "d": "y", "e": "y"}
    r = learn_bench._purity([("g1", ["a", "b", "c"]), ("g2", ["d", "e"])], label)
    assert r["purity"] == 0.8 and r["split_labels"] == ["y"] and r["labels_with_2_plus"] == 2


def test_invented_failures_are_unknown_and_cluster_apart() -> None:
    from app.engine.clusters import Member, group_failures

    cases = learn_bench.site_cases(variants=3)
    compiled = learn_bench.compiled_library()
    members = []
    for c in cases:
        r = learn_bench.triage_case(compiled, c)
        assert r["predicted"] == "unknown" and r["signals"], c.name
        s = r["signals"][0]
        members.append(Member(c.name, s["key"], s["template"]))
    groups = group_failures(members)
    label = {c.name: c.label for c in cases}
    assert learn_bench._purity([(g.id, g.members) for g in groups], label)["purity"] == 1.0


def test_a_traceback_ending_in_a_timeout_class_leaves_a_signal() -> None:
    from app.engine.signals import find_signals

    tail = [
        (1, "Traceback (most recent call last):"),
        (2, '  File "/opt/rl/reward_client.py", line 88, in score'),
        (3, "RewardServerTimeout: reward server did not answer batch 12 within 30.0 s"),
    ]
    (sig,) = find_signals([("a.log", tail)])
    assert sig.weight == 2 and sig.template.startswith("RewardServerTimeout: reward server did not answer")


def test_backtest_on_a_small_store_matches_a_plain_regex(tmp_path: Path) -> None:
    import regex

    from app.db import repo
    from app.service.drafts import run_backtest

    def sig(n: int, word: str) -> dict[str, object]:
        return {
            "file": "a.log",
            "line": n,
            "text": f"[rank{n}]: {word}Error: lease {n} lost on /data/{n}.bin",
            "template": f"{word}Error: lease <NUM> lost on <PATH>",
            "key": f"k{word}",
            "weight": 2,
        }

    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    items = [
        (
            {"root_cause": None, "findings": [], "signals": [sig(i, "Frob" if i % 3 else "Quux")]},
            [],
            t0 + dt.timedelta(seconds=i),
            repo.JobMeta(),
        )
        for i in range(30)
    ]
    url = f"sqlite:///{tmp_path}/b.db"
    ids = backtest_bench.seed(url, items)
    from app.db.session import Database

    db = Database(url)
    try:
        pattern = r"FrobError: +lease +(?P<num1>\d+) +lost"
        bt = run_backtest(SimpleNamespace(db=db), pattern=pattern, failure_class="site.x")  # type: ignore[arg-type]
        want = {
            a
            for a, (x, *_r) in zip(ids, items, strict=True)
            if regex.search(pattern, x["signals"][0]["text"])
        }
        assert set(bt.analysis_ids) == want and len(want) == 20 and bt.complete
    finally:
        db.dispose()
