"""Which of a file's last lines hold which of the tail checks' marks, found in one pass.

Several checks read a file's last lines (`FileScan.tail`, up to 2,000) as a whole: torchrun's
failure table, the launcher's closing signals, `ray status`, NCCL's line prefix, the kernel's OOM
task table, DeepSpeed's killed subprocesses, Lightning's rank lines, the flight recorder, py-spy
stacks. Each walked every line with its own substring tests: about ten walks, 5-7 ms of a 1 MB
hook's CPU on a log of metric lines where no line qualifies (bench/README.md, "One hook alone").
The marks are found in the lines joined once, by one Hyperscan pass (`_Databases`); a few lines
are tested one by one.

A mark is a cheap superset of what its check parses: the check is handed the lines that hold the
mark, in order, and tests each as before, so its answer is the one a walk over every line gives
(`tests/test_tailmarks.py` compares both on the corpora). A check whose state runs from line to
line (`ray status`'s node list) is handed where its headers are and reads on from there.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
from collections.abc import Sequence
from typing import Any

from app.engine.pipeline.matcher import hyperscan_available, line_starts

__all__ = ["MARKS", "marked", "marked_indices"]

# name -> (literals, patterns): a line holds the mark when it holds one of the literals or one of
# the patterns matches in it. Patterns read alike in Hyperscan and Python's `re` and never match
# a newline (the lines are searched joined by newlines).
MARKS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # torchrun's failure table (triage._sigbus_processes): "exitcode : -7 (pid: 16615)",
    # "Signal 7 (SIGBUS) received by PID 16615"
    "sigbus": (("-7 (pid", "SIGBUS"), ()),
    # torchelastic stopping its workers: "Sending process 46807 closing signal SIGHUP"
    "closing": (("closing signal",), ()),
    # `ray status`: the "Active:" and "Idle:" headers of its node lists
    "ray_status": (("Active:", "Idle:"), ()),
    # NCCL's line prefix "host:pid:tid [cudaDev] ... NCCL INFO|WARN"
    "nccl": (("NCCL",), ()),
    # Lightning's "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/8"
    "global_rank": (("GLOBAL_RANK: ",), ()),
    # the kernel OOM killer's task table row "[ 202779]  1000 202779 274650088 ..." (a literal
    # "] " would pass every timestamped line)
    "oom_task_row": ((), (r"[0-9]\] +[0-9]",)),
    # DeepSpeed's launcher: "sigkill_handler] Killing subprocess 230"
    "ds_killing": (("Killing subprocess",), ()),
    # torchrun's failure table: its headers, "[0]:" entries (not "[rank0]:"), "time : ..."
    # fields, its closing rule
    "torchrun_table": (("Failures:", "Root Cause", "=====", " : "), (r"\[[0-9]+\]:",)),
    # the flight recorder's dump lines "[FR rank 3] ..."
    "flight_recorder": (("[FR rank",), ()),
    # py-spy dump's "Thread 0x7F... (active): "MainThread""
    "pyspy_thread": (("Thread ",), ()),
}

# fewer lines are tested one by one: no database to build for a short log (the CLI's start-up)
FEW_LINES = 256


def marked(scan: Any, *names: str) -> list[tuple[int, str]]:
    """The rows (line number, text) of `scan.tail` that hold any of the named marks, in order."""
    tail = scan.tail
    return [tail[i] for i in marked_indices(scan, *names)]


def marked_indices(scan: Any, *names: str) -> list[int]:
    """The indices into `scan.tail` of the rows that hold any of the named marks, ascending."""
    index = _index_of(scan)
    if len(names) == 1:
        return index[names[0]]
    return sorted({i for name in names for i in index[name]})


def _index_of(scan: Any) -> dict[str, list[int]]:
    # kept on the scan beside the very list it indexes: a scan whose tail is replaced (merged
    # ranges) is indexed again
    cached = getattr(scan, "_tail_marks", None)
    if cached is not None and cached[0] is scan.tail:
        return cached[1]  # type: ignore[no-any-return]
    index = index_lines([text for _n, text in scan.tail])
    scan._tail_marks = (scan.tail, index)
    return index


def index_lines(lines: Sequence[str], *, one_by_one: bool | None = None) -> dict[str, list[int]]:
    """Each mark's lines (indices, ascending) among `lines`. `one_by_one`: test each line in
    Python (default: for a few lines, or without Hyperscan)."""
    if one_by_one is None:
        one_by_one = len(lines) < FEW_LINES or not hyperscan_available()
    if one_by_one:
        return {
            name: [
                i
                for i, line in enumerate(lines)
                if any(lit in line for lit in literals) or any(rx.search(line) for rx in _python(patterns))
            ]
            for name, (literals, patterns) in MARKS.items()
        }
    return _databases().index(lines)


@functools.cache
def _python(patterns: tuple[str, ...]) -> list[re.Pattern[str]]:
    return [re.compile(p) for p in patterns]


class _Databases:
    """The marks in two Hyperscan databases, the literals in one and the patterns in the other:
    in one database together they took 40-80 ms to compile, more than a CLI run saves; apart,
    a few milliseconds, once per process."""

    def __init__(self) -> None:
        import hyperscan as hs

        self._owners: list[list[str]] = []
        self._dbs: list[Any] = []
        for kind in (0, 1):
            owners: list[str] = []
            expressions: list[bytes] = []
            for name, parts in MARKS.items():
                for e in parts[kind]:
                    expressions.append((re.escape(e) if kind == 0 else e).encode())
                    owners.append(name)
            db = hs.Database(mode=hs.HS_MODE_BLOCK)
            db.compile(
                expressions=expressions,
                ids=list(range(len(expressions))),
                elements=len(expressions),
                flags=[0] * len(expressions),
            )
            db.scratch = hs.Scratch(db)
            self._dbs.append(db)
            self._owners.append(owners)
        self._lock = threading.Lock()

    def index(self, lines: Sequence[str]) -> dict[str, list[int]]:
        text = "\n".join(lines)
        data = text.encode("utf-8", "surrogatepass")
        hits: list[tuple[str, int]] = []
        with self._lock:  # one scratch space a database: scans take turns (a fraction of a ms)
            for db, owners in zip(self._dbs, self._owners, strict=True):
                db.scan(
                    data, match_event_handler=lambda eid, _f, to, _fl, _c, o=owners: hits.append((o[eid], to))
                )
        found: dict[str, set[int]] = {name: set() for name in MARKS}
        if hits:
            starts = line_starts(lines, ascii=len(data) == len(text))
            for name, to in hits:
                found[name].add(bisect.bisect_right(starts, to - 1) - 1)  # the line of its last byte
        return {name: sorted(rows) for name, rows in found.items()}


@functools.cache
def _databases() -> _Databases:
    return _Databases()
