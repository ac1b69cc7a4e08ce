"""Root cause versus symptoms.

Invariants:
- a finding whose class another present finding *explains* (rule ``explains:`` plus
  ``rules/class-relations.yaml``) is a symptom, folded under the finding that explains it;
- among the rest, higher severity wins, then hardware over everything else, then the earliest
  occurrence, then confidence; ``info`` findings never become the root cause;
- nothing is guessed: with no candidate the root cause is ``None`` and the caller lists the
  evidence to collect next.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.library import Library, Severity
from app.engine.scan import RuleMatch

# Catch-all classes (an unhandled traceback) that any known error of severity >= error explains.
FALLBACK_CLASSES = {"python.unhandled_exception"}


@dataclass
class Ranked:
    match: RuleMatch
    role: str = "related"
    explained_by: str | None = None
    confidence: float = 0.0
    explains: set[str] = field(default_factory=set)

    @property
    def failure_class(self) -> str:
        return self.match.rule.failure_class


def _key(r: Ranked, library: Library) -> tuple[int, int, tuple[int, int], float]:
    rule = r.match.rule
    hardware = library.kind_of(rule.failure_class) == "hardware"
    return (-rule.severity.weight, -int(hardware), r.match.first, -rule.confidence)


def rank(matches: list[RuleMatch], library: Library) -> list[Ranked]:
    items = [Ranked(match=m, confidence=m.rule.confidence) for m in matches]
    for r in items:
        fc = library.classes.get(r.failure_class)
        r.explains = set(r.match.rule.explains) | set(fc.explains if fc else ())
        if r.match.rule.severity.weight >= Severity.error.weight:
            r.explains |= FALLBACK_CLASSES  # a known error explains the traceback it raised
        r.explains.discard(r.failure_class)
    items.sort(key=lambda r: _key(r, library))

    # A finding is a symptom of the best-ranked finding that explains its class and is not
    # itself explained by it (two classes that explain each other: the better-ranked wins).
    for i, r in enumerate(items):
        for j, o in enumerate(items):
            if o is r or r.failure_class not in o.explains:
                continue
            if o.failure_class in r.explains and j > i:
                continue
            r.role, r.explained_by = "symptom", o.match.rule.id
            break

    candidates = [r for r in items if r.role != "symptom" and r.match.rule.severity is not Severity.info]
    if candidates:
        root = candidates[0]
        root.role = "root_cause"
        # Follow chains (ECC -> NCCL error -> NCCL timeout): symptoms of symptoms hang under root.
        by_id = {r.match.rule.id: r for r in items}
        for r in items:
            seen: set[str] = set()
            parent = r.explained_by
            while parent and parent not in seen and by_id[parent].explained_by:
                seen.add(parent)
                parent = by_id[parent].explained_by
            if parent and by_id[parent] is root:
                r.explained_by = root.match.rule.id
        symptoms = [
            r
            for r in items
            if r.explained_by == root.match.rule.id and r.failure_class not in FALLBACK_CLASSES
        ]
        conf = root.match.rule.confidence
        if symptoms:
            conf += 0.04  # the expected cascade is present: corroboration
        rivals = [
            c for c in candidates[1:] if c.match.rule.severity.weight >= root.match.rule.severity.weight
        ]
        if rivals:
            conf *= 0.85  # another unexplained error of the same weight: less certain
        if root.match.rule.severity is Severity.warning:
            conf *= 0.8
        root.confidence = round(min(conf, 0.99), 2)
    order = {"root_cause": 0, "symptom": 1, "related": 2}
    items.sort(key=lambda r: (order[r.role], _key(r, library)))
    return items
