"""The back-test's loop over stored signal lines: one definition for the in-process back-test
(`app.service.drafts`) and each Ray task (`app.service.backtest_ray`), which both import it
from here (neither imports the other's module for it)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

__all__ = ["BACKTEST_ROWS", "backtest_matcher", "scan_signal_lines"]

BACKTEST_ROWS = 400_000  # signal lines read for one back-test (newest first)


def backtest_matcher(pattern: str) -> tuple[Any, list[str]]:
    """The compiled pattern and the literals a line must hold one of (each alternative's longest
    piece, tried with a plain `in` at C speed); no literals: every line goes through the regex."""
    import regex

    from app.blobstore.grams import required_literals

    rx = regex.compile(pattern)
    found = required_literals(pattern)
    lits = [max(alt, key=len) for alt in found[0]] if found and not found[1] else []
    return rx, lits


def scan_signal_lines(
    rows: Sequence[tuple[Any, ...]], *, rx: Any, lits: list[str], started: float, budget_s: float
) -> tuple[list[str], int, bool]:
    """The back-test's inner loop, the same in process and in each Ray task: rows are (analysis id,
    position, text, ...) in the back-test's order (analysis ids descending, then position).
    Returns the matched analysis ids in first-match order, the lines read, and whether every row
    was read before `budget_s` (counted from `started`, time.monotonic()) ran out."""
    matched: dict[str, None] = {}
    read = 0
    for i, row in enumerate(rows):
        if i % 4096 == 0 and time.monotonic() - started > budget_s:
            return list(matched), read, False  # a pattern this slow on the history: say so rather than wait
        read = i + 1
        aid = row[0]
        if aid in matched:
            continue
        text = row[2]
        if lits and not any(lit in text for lit in lits):
            continue
        try:
            if rx.search(text, timeout=0.05) is not None:
                matched[aid] = None
        except TimeoutError:
            pass
    return list(matched), read, True
