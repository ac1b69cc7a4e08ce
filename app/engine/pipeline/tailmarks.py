"""Which of a file's last lines hold which of the tail checks' marks, found in one pass.

Several checks read a file's last lines (`FileScan.tail`, up to 2,000) as a whole: torchrun's
failure table, the launcher's closing signals, `ray status`, NCCL's line prefix, the kernel's OOM
task table, DeepSpeed's killed subprocesses, Lightning's rank lines, the flight recorder, py-spy
stacks. Each walked every line with its own substring tests: about ten walks, 5-7 ms of a 1 MB
hook's CPU on a log of metric lines where no line qualifies (bench/README.md, "One hook alone").
One Hyperscan pass over the joined lines answers all of them at once.

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

# name -> (literals, expressions): a line holds the mark when it holds a literal or an
# expression matches in it. Expressions are written so Hyperscan and Python's `re` read them
# alike, and never match a newline (the lines are searched joined by newlines).
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
    # the kernel OOM killer's task table row "[ 202779]  1000 202779 274650088 ..."
    "oom_task_row": ((), (r"\[ *[0-9]+\] +[0-9]+ +[0-9]+",)),
    # DeepSpeed's launcher: "sigkill_handler] Killing subprocess 230"
    "ds_killing": (("Killing subprocess",), ()),
    # torchrun's failure table: its headers, "[0]:" entries, "time : ..." fields, closing rule
    "torchrun_table": (("Failures:", "Root Cause", "=====", " : "), (r"\[[0-9]+\]:",)),
    # the flight recorder's dump lines "[FR rank 3] ..."
    "flight_recorder": (("[FR rank",), ()),
    # py-spy dump's "Thread 0x7F... (active): "MainThread""
    "pyspy_thread": (("Thread ",), ()),
}

_NAMES = tuple(MARKS)


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
    index = _marks().index([text for _n, text in scan.tail])
    scan._tail_marks = (scan.tail, index)
    return index


class _Marks:
    def __init__(self) -> None:
        self._owner: list[int] = []  # expression id -> position of its mark in _NAMES
        expressions: list[str] = []
        for k, name in enumerate(_NAMES):
            literals, regexes = MARKS[name]
            for e in [re.escape(lit) for lit in literals] + list(regexes):
                expressions.append(e)
                self._owner.append(k)
        self._python = [re.compile(e) for e in expressions]
        self._db: Any = None
        self._lock = threading.Lock()
        if hyperscan_available():
            import hyperscan as hs

            db = hs.Database(mode=hs.HS_MODE_BLOCK)
            db.compile(
                expressions=[e.encode() for e in expressions],
                ids=list(range(len(expressions))),
                elements=len(expressions),
                flags=[0] * len(expressions),
            )
            db.scratch = hs.Scratch(db)
            self._db = db

    def index(self, lines: Sequence[str]) -> dict[str, list[int]]:
        found: list[set[int]] = [set() for _ in _NAMES]
        if self._db is None:
            owner = self._owner
            for i, line in enumerate(lines):
                for e, rx in enumerate(self._python):
                    if rx.search(line) is not None:
                        found[owner[e]].add(i)
        else:
            text = "\n".join(lines)
            data = text.encode("utf-8", "surrogatepass")
            hits: list[tuple[int, int]] = []
            with self._lock:  # one scratch space: scans take turns (a fraction of a ms)
                self._db.scan(data, match_event_handler=lambda eid, _f, to, _fl, _c: hits.append((eid, to)))
            if hits:
                starts = line_starts(lines, ascii=len(data) == len(text))
                owner = self._owner
                for eid, to in hits:
                    found[owner[eid]].add(bisect.bisect_right(starts, to - 1) - 1)
        return {name: sorted(found[k]) for k, name in enumerate(_NAMES)}


@functools.cache
def _marks() -> _Marks:
    return _Marks()
