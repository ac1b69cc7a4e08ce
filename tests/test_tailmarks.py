"""The tail checks read only the lines their mark finds (app/engine/pipeline/tailmarks.py): on every
corpus log each check answers as a walk over every last line does, and the Hyperscan index
equals the one Python's `re` builds line by line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.engine.pipeline import tailmarks, triage
from app.engine.pipeline.ingest import ByteBudget, Source
from app.engine.pipeline.scan import CompiledLibrary, FileScan, scan_source
from app.engine.timeline import builder
from app.engine.timeline.stacks import stack_autopsy
from tests.conftest import ROOT

LOGS = sorted(p for d in ("tests/corpus", "rules") for p in (ROOT / d).rglob("*.log"))

CHECKS = (
    triage._sigbus_processes,
    triage._launcher_closed_pids,
    triage._ray_active_nodes,
    triage._nccl_shared_host,
    triage._tail_facts,
    triage._duplicate_rank_facts,
    builder.launcher_exits,
    stack_autopsy,
)


def _scan(compiled: CompiledLibrary, path: Path) -> FileScan:
    return scan_source(compiled, Source(name=path.name, path=path), budget=ByteBudget(None))


def _every_line(scan: Any) -> dict[str, list[int]]:
    every = list(range(len(scan.tail)))
    return {name: every for name in tailmarks.MARKS}


# each mark as a regex, line by line: what the one-pass index must find
ORACLE = {
    "sigbus": r"-7 \(pid|SIGBUS",
    "closing": r"closing signal",
    "ray_status": r"Active:|Idle:",
    "nccl": r"NCCL",
    "global_rank": r"GLOBAL_RANK: ",
    "oom_task_row": r"[0-9]\] +[0-9]",
    "ds_killing": r"Killing subprocess",
    "torchrun_table": r"Failures:|Root Cause|=====| : |\[[0-9]+\]:",
    "flight_recorder": r"\[FR rank",
    "pyspy_thread": r"Thread ",
}


def _oracle_index(lines: list[str]) -> dict[str, list[int]]:
    return {name: [i for i, t in enumerate(lines) if re.search(rx, t)] for name, rx in ORACLE.items()}


def _old_step_times(scans: list[FileScan], year: int | None) -> dict[int, dict[int, float]]:
    """The walk `_step_times` replaced: every tail line looked up among the step lines."""
    out: dict[int, dict[int, float]] = {}
    for scan in scans:
        steps = {mp.line: mp for mp in scan.metrics if mp.step is not None}
        for lineno, text in scan.tail:
            mp = steps.get(lineno)
            if mp is None:
                continue
            rank = mp.rank if mp.rank is not None else scan.rank_hint
            t = builder.parse_time(text, year_hint=year)
            if rank is not None and t is not None:
                out.setdefault(rank, {}).setdefault(mp.step, t)
    return out


def _answers(scans: list[FileScan]) -> list[Any]:
    tl = builder.build(scans)
    return [repr(check(scans)) for check in CHECKS] + [repr([v.summary for v in tl.verdicts])]


def test_the_corpora_are_there() -> None:
    assert len(LOGS) > 500


@pytest.mark.slow
def test_each_check_answers_as_a_walk_over_every_line(
    compiled: CompiledLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    differ: list[str] = []
    found = 0
    for path in LOGS:
        scans = [_scan(compiled, path)]
        fast = _answers(scans)
        with monkeypatch.context() as m:
            m.setattr(tailmarks, "_index_of", _every_line)
            slow = _answers(scans)
        if fast != slow:
            differ.append(path.name)
        found += any(tailmarks.marked_indices(scans[0], name) for name in tailmarks.MARKS)
        assert dict(builder._step_times(scans, None)) == _old_step_times(scans, None), path.name
    assert differ == []
    assert found > 100  # the marks do occur: the comparison is not between two empty answers


def test_the_index_equals_a_regex_line_by_line(compiled: CompiledLibrary) -> None:
    checked = 0
    for path in LOGS[::7]:
        scan = _scan(compiled, path)
        lines = [text for _n, text in scan.tail]
        want = _oracle_index(lines)
        assert tailmarks.index_lines(lines, one_by_one=False) == want, path.name
        assert tailmarks.index_lines(lines, one_by_one=True) == want, path.name
        checked += bool(lines)
    assert checked > 50


def test_the_index_on_made_up_lines() -> None:
    lines = [
        "[ 202779]  1000 202779 274650088 243385180 1957441536     7930          -998 python",
        "[2026-11-20 10:00:01] iteration 5/ 10 | lm loss: 2.1",  # a timestamp: no task row
        "[rank0]: Traceback (most recent call last):",  # no torchrun entry
        "  [0]:",
        "  [12]:",
        "€ ümlaut NCCL WARN x € closing signal",  # offsets past non-ASCII text
        "",
        "=" * 80,
        "Sending process 46807 closing signal SIGTERM",
    ]
    assert set(ORACLE) == set(tailmarks.MARKS)
    got = tailmarks.index_lines(lines, one_by_one=False)
    assert got == tailmarks.index_lines(lines, one_by_one=True) == _oracle_index(lines)
    assert got["oom_task_row"] == [0]
    assert got["torchrun_table"] == [3, 4, 7]
    assert got["closing"] == [5, 8]


def test_a_replaced_tail_is_indexed_again() -> None:
    scan = FileScan(name="x")
    scan.tail = [(1, "plain line"), (2, "Sending process 46807 closing signal SIGTERM")]
    assert tailmarks.marked(scan, "closing") == [(2, "Sending process 46807 closing signal SIGTERM")]
    scan.tail = [(7, "Sending process 9 closing signal SIGKILL"), (8, "plain")]
    assert tailmarks.marked(scan, "closing") == [(7, "Sending process 9 closing signal SIGKILL")]
    assert tailmarks.marked_indices(scan, "closing", "nccl") == [0]


def test_ray_status_node_lists_from_their_headers() -> None:
    scan = FileScan(name="ray.log")
    scan.tail = list(
        enumerate(
            [
                "======== Autoscaler status ========",
                "Active:",
                " 1 node_9a8e4a65aa2b4b3a",
                " 2 ray.worker.default",
                "Idle:",
                " 1 node_1b2c3d4e5f60",
                "Pending:",
                " 3 node_aaaaaaaaaaaa",  # after a line that is no node: not counted
            ],
            start=1,
        )
    )
    assert triage._ray_active_nodes([scan]) == 4
    idle_only = FileScan(name="idle.log")
    idle_only.tail = [(1, "Idle:"), (2, " 5 node_9a8e4a65aa2b")]
    assert triage._ray_active_nodes([idle_only]) is None


def _old_last_rows(
    blocks: list[tuple[int, bytes]], *, lines: int | None = None, nbytes: int | None = None
) -> Any:
    """`_last_rows` before it stopped building a tuple per row of the whole tail."""
    out: list[tuple[int, bytes]] = []
    left = nbytes
    for base, data in reversed(blocks):
        s = 0
        if left is not None:
            if left <= 0:
                break
            if len(data) > left:
                nl = data.find(b"\n", len(data) - left - 1)
                s = nl + 1 if nl >= 0 else len(data)
            left -= len(data)
        first = base + (data.count(b"\n", 0, s) if s else 0)
        out = [(first + i + 1, raw) for i, raw in enumerate(data[s:].split(b"\n")) if raw] + out
        if lines is not None and len(out) >= lines:
            return out[-lines:]
    return out


# pieces of random line-aligned blocks: words, empty lines, a split and a whole multi-byte
# character, an invalid byte; the escapes send a row down the row-by-row path
ROW_PIECES = [b"a", b"loss: 1.5 ", b"\n", b"\n\n", b"\xe2\x82", b"\xe2\x82\xac", b"\xff", b" "]
ESCAPES = [b"\r", b"\x1b[31m"]


def test_last_rows_and_their_texts_as_row_by_row() -> None:
    import random

    from app.engine.pipeline import scan as scan_mod
    from app.engine.pipeline.metrics import metric_text

    rnd = random.Random(20)
    alphabet = ROW_PIECES + ESCAPES
    compared = plain = 0
    for _ in range(400):
        blocks = []
        base = 0
        for _b in range(rnd.randint(1, 3)):
            data = b"".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 60)))
            if data and not data.endswith(b"\n"):
                data += b"\n"  # blocks are line-aligned
            blocks.append((base, data))
            base += data.count(b"\n")
        for kw in ({"lines": rnd.randint(1, 12)}, {"nbytes": rnd.randint(0, 80)}, {}):
            new = scan_mod._last_rows(blocks, **kw)  # type: ignore[arg-type]
            assert new == _old_last_rows(blocks, **kw), (blocks, kw)
            assert scan_mod._texts(new, cut=9) == [(n, metric_text(raw)[:9]) for n, raw in new]
            compared += bool(new)
            plain += bool(new) and not any(b"\r" in raw or b"\x1b" in raw for _n, raw in new)
    assert compared > 300
    assert plain > 50  # the one-decode path, not only the row-by-row one


def test_line_starts_by_length_equal_those_by_encoding() -> None:
    import random

    from app.engine.pipeline.matcher import line_starts

    rnd = random.Random(5)
    for _ in range(300):
        lines = [
            "".join(rnd.choice("ab €\udc80") for _ in range(rnd.randint(0, 6)))
            for _ in range(rnd.randint(1, 9))
        ]
        text = "\n".join(lines)
        data = text.encode("utf-8", "surrogatepass")
        fast = line_starts(lines, ascii=len(data) == len(text))
        assert fast == line_starts(lines, ascii=False)
        assert [data[s:].split(b"\n", 1)[0].decode("utf-8", "surrogatepass") for s in fast] == lines


def test_the_tail_lines_are_those_of_the_rows_decoded_one_by_one() -> None:
    """`_tail_texts` (a plain block decoded whole) gives what `_texts(_last_rows(...))` gives, on
    blocks of invalid UTF-8, split characters, escapes, carriage returns and empty lines."""
    import random

    from app.engine.pipeline import scan as scan_mod

    rnd = random.Random(21)
    alphabet = [*ROW_PIECES, b"\xe6\x97\xa5"]
    compared = plain = 0
    for _ in range(400):
        blocks = []
        base = 0
        for _b in range(rnd.randint(1, 4)):
            pieces = alphabet + (ESCAPES if rnd.random() < 0.3 else [])
            data = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 60)))
            if data and not data.endswith(b"\n"):
                data += b"\n"
            blocks.append((base, data))
            base += data.count(b"\n")
        if blocks[-1][1] and rnd.random() < 0.3:  # a file's last line may have no newline
            blocks[-1] = (blocks[-1][0], blocks[-1][1].rstrip(b"\n"))
        for lines in (1, rnd.randint(1, 12), 40):
            for cut in (3, 400):
                want = scan_mod._texts(scan_mod._last_rows(blocks, lines=lines), cut=cut)
                assert scan_mod._tail_texts(blocks, lines=lines, cut=cut) == want, (blocks, lines, cut)
                compared += bool(want)
                plain += bool(want) and not any(b"\r" in d or b"\x1b" in d for _b, d in blocks)
    assert compared > 1000
    assert plain > 300
