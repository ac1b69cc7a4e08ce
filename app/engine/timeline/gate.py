r"""A case-insensitive alternation searched only where one of its literals occurs.

Python's `re` tries every alternative at every position of a line, so a wide `re.I` alternation
costs tens of µs per line; the timeline runs several over every line of every rank's tail. Most
lines hold none of the words, and `str.__contains__` on the lowered line rules them out in a few
hundred ns. Invariant: every match of `pattern` contains one of `literals` (lowercase), or starts
in a line that is empty or begins with whitespace when `leading_space` is set (for the anchored
alternatives such as `^\s+File "`); tests/test_gate.py checks it on
every corpus line and on generated variants.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Gated:
    pattern: re.Pattern[str]
    literals: tuple[str, ...]
    leading_space: bool = False

    def search(self, text: str) -> re.Match[str] | None:
        if self.leading_space and (not text or text[0].isspace()):
            return self.pattern.search(text)
        low = text.lower()
        for lit in self.literals:
            if lit in low:
                return self.pattern.search(text)
        return None


def gated(pattern: str, literals: tuple[str, ...], *, leading_space: bool = False) -> Gated:
    if not literals or not all(lit and lit == lit.lower() for lit in literals):
        raise ValueError(f"gate literals must be non-empty lowercase strings: {literals!r}")
    return Gated(re.compile(pattern, re.I), literals, leading_space)
