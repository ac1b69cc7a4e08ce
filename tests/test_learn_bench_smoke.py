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


def _raised(frames: list[str], last: str, prefix: str = "") -> list[tuple[int, str]]:
    lines = ["Traceback (most recent call last):"]
    for f in frames:
        lines += [f"  {f}", "    do_it()"]
    return [(i + 1, prefix + x) for i, x in enumerate([*lines, last])]


def test_a_users_own_python_error_is_known_by_where_it_was_raised() -> None:
    from app.engine.clusters import Member, group_failures
    from app.engine.signals import find_signals

    def first(frames: list[str], last: str, prefix: str = "") -> tuple[str, str]:
        s = find_signals([("a.log", _raised(frames, last, prefix))])[0]
        return s.key, s.template

    ours = 'File "/home/ann/proj/train.py", line 417, in load_data'
    k1, t1 = first([ours], "FileNotFoundError: [Errno 2] No such file or directory: '/data/a/x.bin'")
    assert t1 == "train.py:load_data FileNotFoundError: [Errno <NUM>] No such file or directory: '<PATH>'"
    # the same bug in another run: other home, line number, path, launcher prefix
    k2, _ = first(
        ['File "/scratch/bob/ckpt-7/train.py", line 420, in load_data'],
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/b/y.bin'",
        prefix="[rank3]: ",
    )
    assert k2 == k1
    # the same message raised elsewhere in the user's code, or inside an installed package
    k3, t3 = first(
        ['File "/home/ann/proj/eval.py", line 9, in score'],
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/a/x.bin'",
    )
    k4, t4 = first(
        [ours, 'File "/opt/conda/lib/python3.11/site-packages/hf/hub.py", line 5, in fetch'],
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/a/x.bin'",
    )
    assert len({k1, k3, k4}) == 3
    assert t3.startswith("eval.py:score ") and t4.startswith("FileNotFoundError:")
    # a class that names the failure itself: known by its message wherever it is hit
    _k, t5 = first([ours], "RuntimeError: CUDA error: device-side assert triggered")
    _k, t6 = first([ours], "LeaseLostError: lease 12 lost")
    assert t5.startswith("RuntimeError:") and t6.startswith("LeaseLostError:")
    # two users' bugs with one message stay apart in the inbox (the miner merges no <*> over them)
    msgs = ["TypeError: __init__() got an unexpected keyword argument 'config'"] * 2
    a = find_signals([("a.log", _raised(['File "cfg.py", line 3, in set_model'], msgs[0]))])[0]
    b = find_signals([("b.log", _raised(['File "SOP/parse.py", line 9, in initialize'], msgs[1]))])[0]
    groups = group_failures([Member("a", a.key, a.template), Member("b", b.key, b.template)])
    assert len(groups) == 2


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
