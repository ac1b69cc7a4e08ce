"""`LineFilter` (the tail checks' one-pass literal search) answers what testing each line does."""

from __future__ import annotations

import random

import pytest

from app.engine.pipeline import matcher
from app.engine.pipeline.matcher import LineFilter
from app.engine.signals import ERROR_LITERALS

# pieces that put literals at a line's start, end and middle, next to multi-byte characters
PIECES = [
    *ERROR_LITERALS,
    "iteration 12/ 500 |",
    "lm loss: 2.8E+00",
    "é",
    "日本",
    "\u2028",
    " ",
    "E",
    "Err",
    "[",
    "x",
]


def _lines(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6))) for _ in range(n)]


def _reference(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if any(lit in line for lit in ERROR_LITERALS)]


@pytest.mark.skipif(not matcher.hyperscan_available(), reason="the one-pass path needs Hyperscan")
def test_the_one_pass_search_finds_exactly_the_lines_each_test_finds() -> None:
    filt = LineFilter(ERROR_LITERALS)
    rng = random.Random(20261127)
    # below FEW_LINES each line is tested in Python and no database is compiled (a one-line
    # log's start-up); from there on the one pass answers
    for _ in range(50):
        lines = _lines(rng, rng.randrange(0, matcher.FEW_LINES))
        assert filt.lines_with(lines) == _reference(lines), lines
    assert filt._db is None
    for _ in range(300):
        lines = _lines(rng, rng.randrange(matcher.FEW_LINES, 3 * matcher.FEW_LINES))
        assert filt.lines_with(lines) == _reference(lines), lines
    assert filt._db is not None
    for _ in range(50):  # and once compiled, it answers for a few lines too
        lines = _lines(rng, rng.randrange(0, matcher.FEW_LINES))
        assert filt.lines_with(lines) == _reference(lines), lines


def test_without_hyperscan_each_line_is_tested(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matcher, "hyperscan_available", lambda: False)
    filt = LineFilter(ERROR_LITERALS)
    rng = random.Random(7)
    for _ in range(50):
        lines = _lines(rng, 20)
        assert filt.lines_with(lines) == _reference(lines)


def test_no_lines_and_no_hits() -> None:
    filt = LineFilter(("Traceback",))
    assert filt.lines_with([]) == []
    assert filt.lines_with(["a", "", "b"]) == []
    assert filt.lines_with(["", "Traceback", "Traceback Traceback"]) == [1, 2]


RANK_PIECES = [
    "[rank3]: ",
    "Rank 2",
    "[default0]:",
    "[1,0]<stdout>:",
    "3: ",
    "3:\u00a0",
    "10:00:01",
    "x",
    ":",
    " ",
    "é",
]


@pytest.mark.parametrize("hyperscan", [True, False])
def test_the_rank_gate_for_many_lines_keeps_every_line_the_one_line_gate_keeps(
    monkeypatch: pytest.MonkeyPatch, hyperscan: bool
) -> None:
    from app.engine.pipeline import lines as lines_mod

    if not hyperscan:
        monkeypatch.setattr(matcher, "hyperscan_available", lambda: False)
    monkeypatch.setattr(lines_mod, "_rank_filter", lines_mod._rank_filter.__wrapped__)
    rng = random.Random(3)
    for _ in range(200):
        n = rng.choice((30, 3 * matcher.FEW_LINES))  # each line in Python, or one pass
        texts = ["".join(rng.choice(RANK_PIECES) for _ in range(rng.randrange(0, 5))) for _ in range(n)]
        kept = set(lines_mod.lines_naming_ranks(texts))
        assert {i for i, t in enumerate(texts) if lines_mod.may_name_rank(t)} <= kept
        # what it keeps beyond them names no rank
        assert all(
            lines_mod.parse_context(texts[i]).rank is None
            for i in kept
            if not lines_mod.may_name_rank(texts[i])
        )
