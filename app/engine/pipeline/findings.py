"""What rule evaluation produces: a rule's occurrences folded into one ``RuleMatch``.

Apart from the scan (``scan.py`` builds them from text hits) so that the trigger kinds
(``triggers.py``), which the rule schema declares, can build them too without importing the scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.engine.pipeline.library import Rule
    from app.engine.pipeline.lines import LineContext


@dataclass(slots=True)
class HitRecord:
    line: int
    text: str
    groups: dict[str, str]
    ctx: LineContext


@dataclass
class RuleMatch:
    """All occurrences of one rule across the scanned files, folded."""

    rule: Rule
    count: int = 0
    first: tuple[int, int] = (1 << 30, 0)  # (file index, line)
    last: tuple[int, int] = (-1, 0)
    evidence: list[tuple[str, HitRecord]] = field(default_factory=list)
    captures: dict[str, str] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    # occurrences Ray's log dedup folded into its lines ("[repeated 27x across cluster]"): printed
    # by other processes, whose ranks and hosts `ranks` and `hosts` cannot list
    folded: int = 0
    files: list[str] = field(default_factory=list)
    confidence: float = 0.0  # of the best signature that matched
    signatures: list[str] = field(default_factory=list)  # the names of those that matched
    implausible: str | None = None  # why a captured value cannot be true (app.engine.pipeline.triage)
    first_time: float | None = None  # the earliest timestamp of its evidence (app.engine.timeline.clock)
