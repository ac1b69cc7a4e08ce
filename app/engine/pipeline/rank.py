"""Root cause versus symptoms.

Invariants:
- a finding that a rule declares a *consequence* of another present class (`consequence_of:`,
  e.g. the "communicator was aborted" that follows a watchdog timeout) is a symptom of it, when
  the cause is not later in the same log: the rule's own meaning and the log's order outrank
  the class relations;
- otherwise a finding whose class another present finding *explains* (rule ``explains:`` plus
  ``rules/class-relations.yaml``) is a symptom, folded under the finding that explains it; when
  two findings explain each other, the one first in the log wins (same file), else the better
  ranked;
- among the rest, higher severity wins, then hardware over everything else, then the earliest
  occurrence, then confidence; an ``info`` finding leads only when nothing else is there, at a
  reduced confidence; a catch-all (an unhandled traceback) only then and only when a specific
  signature matched it (an assertion raised in a framework's own code);
- nothing is guessed: a root cause needs ``MIN_ROOT_CONFIDENCE``. Below it (or with no
  candidate at all) the root cause is ``None``; the candidates below the threshold are returned
  as *possible causes* and the caller lists the evidence to collect next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.engine.pipeline.findings import RuleMatch
from app.engine.pipeline.library import Library, Severity

# Catch-all classes (an unhandled traceback) that any known error of severity >= error explains.
FALLBACK_CLASSES = {"python.unhandled_exception"}
MIN_ROOT_CONFIDENCE = 0.35
INFO_ALONE = 0.6  # an info finding that leads alone keeps this share of its confidence
# a catch-all finding matched this surely (a signature more specific than its rule's main
# pattern) may lead when nothing else is there
FALLBACK_LEADS_AT = 0.6


@dataclass
class Ranked:
    match: RuleMatch
    role: str = "related"
    explained_by: str | None = None
    confidence: float = 0.0
    explains: set[str] = field(default_factory=set)
    possible: bool = False  # a candidate below the threshold: a possible cause, not the root

    @property
    def failure_class(self) -> str:
        return self.match.rule.failure_class


def _key(r: Ranked, library: Library) -> tuple[int, int, float, tuple[int, int], float]:
    rule = r.match.rule
    hardware = library.kind_of(rule.failure_class) == "hardware"
    # the earliest by time across ranks' files, where the lines say when; else the log's order
    t = r.match.first_time if r.match.first_time is not None else math.inf
    return (-rule.severity.weight, -int(hardware), t, r.match.first, -r.match.confidence)


# A collective's timeout is reported when the wait ends, `ran_ms` after it began: a line printed
# just before that report (the main thread's exception as the watchdog aborts the communicator,
# prime-rl#1098: "NCCL Error 3: internal error" 12 rows above "ran for 600071 milliseconds") came
# out of the same teardown, after the wait had begun. Only this close, and only for a wait of a
# minute or more, so an error from minutes before is not taken for the timeout's echo.
TEARDOWN_LINES = 15
LONG_WAIT_MS = 60_000


def _not_later(cause: RuleMatch, effect: RuleMatch) -> bool:
    """The cause is not after the effect: by time when both lines say when, else in the same
    file by line (different files without times are not ordered). A timed-out wait counts from
    when it began: an untimed line just above its report is not before it."""
    if cause.first_time is not None and effect.first_time is not None:
        return cause.first_time <= effect.first_time
    if cause.first[0] == effect.first[0] and effect.first_time is None:
        ran = cause.captures.get("ran_ms") or cause.captures.get("bw_ran_ms") or ""
        gap = cause.first[1] - effect.first[1]
        if ran.isdigit() and int(ran) >= LONG_WAIT_MS and 0 < gap <= TEARDOWN_LINES:
            return True
    return cause.first[0] != effect.first[0] or cause.first <= effect.first


def _earlier(a: RuleMatch, b: RuleMatch) -> bool | None:
    """Whether a comes first (by time, else in the same file); None when unknown."""
    if a.first_time is not None and b.first_time is not None and a.first_time != b.first_time:
        return a.first_time < b.first_time
    if a.first[0] != b.first[0]:
        return None
    return a.first < b.first


def rank(matches: list[RuleMatch], library: Library) -> list[Ranked]:
    items = [Ranked(match=m, confidence=m.confidence) for m in matches]
    by_class: dict[str, list[Ranked]] = {}
    for r in items:
        fc = library.classes.get(r.failure_class)
        r.explains = set(r.match.rule.explains) | set(fc.explains if fc else ())
        if r.match.rule.severity.weight >= Severity.error.weight:
            r.explains |= FALLBACK_CLASSES  # a known error explains the traceback it raised
        r.explains.discard(r.failure_class)
        by_class.setdefault(r.failure_class, []).append(r)
    # a rule that says it is a consequence of a class: that class explains it, never the reverse
    for r in items:
        for cause_class in r.match.rule.consequence_of:
            for o in by_class.get(cause_class, []):
                if o is not r and _not_later(o.match, r.match):
                    o.explains.add(r.failure_class)
                    r.explains.discard(o.failure_class)
    items.sort(key=lambda r: _key(r, library))

    # A finding is a symptom of the best-ranked finding that explains its class and is not
    # itself explained by it (two classes that explain each other: the first in the log wins).
    for i, r in enumerate(items):
        for j, o in enumerate(items):
            if o is r or r.failure_class not in o.explains:
                continue
            if o.failure_class in r.explains:
                first = _earlier(o.match, r.match)
                if first is False or (first is None and j > i):
                    continue
            r.role, r.explained_by = "symptom", o.match.rule.id
            break

    unexplained = [r for r in items if r.role != "symptom" and r.failure_class not in FALLBACK_CLASSES]
    candidates = [r for r in unexplained if r.match.rule.severity is not Severity.info]
    alone = not candidates
    if alone:
        # only info findings: the best may lead, less certain; a catch-all only through a
        # signature that says more than "a traceback ended" (a framework's own assertion)
        candidates = unexplained + [
            r
            for r in items
            if r.role != "symptom"
            and r.failure_class in FALLBACK_CLASSES
            and r.match.confidence >= FALLBACK_LEADS_AT
        ]
    for r in candidates:
        r.confidence = _confidence(r, items, candidates, alone=alone)
    leaders = [r for r in candidates if r.confidence >= MIN_ROOT_CONFIDENCE]
    if leaders:
        root = leaders[0]
        # the same failure seen two ways (torch's "device-side assert triggered" and the kernel's
        # own assertion line): the more specific rule leads, so its line is the evidence shown
        same = [r for r in leaders if r.failure_class == root.failure_class]
        root = max(same, key=lambda r: (r.match.confidence, -same.index(r)))
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
    else:
        for r in candidates:
            r.possible = True
    order = {"root_cause": 0, "symptom": 1, "related": 2}
    items.sort(key=lambda r: (order[r.role], _key(r, library)))
    return items


def _confidence(r: Ranked, items: list[Ranked], candidates: list[Ranked], *, alone: bool) -> float:
    conf = r.match.confidence
    if any(o.explained_by == r.match.rule.id and o.failure_class not in FALLBACK_CLASSES for o in items):
        conf += 0.04  # the expected cascade is present: corroboration
    # another unexplained error of its weight competes; one of its own class corroborates
    rivals = [
        c
        for c in candidates
        if c is not r
        and c.failure_class != r.failure_class
        and c.match.rule.severity.weight >= r.match.rule.severity.weight
    ]
    if rivals and candidates and candidates[0] is r:
        conf *= 0.85  # another unexplained error of the same weight: less certain
    if r.match.rule.severity is Severity.warning:
        conf *= 0.8
    if alone:
        conf *= INFO_ALONE
    return round(min(conf, 0.99), 2)
