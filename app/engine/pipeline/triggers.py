"""Trigger kinds: the evidence other than log text that a rule may fire on, each declared once.

A rule says ``trigger: <kind>`` instead of ``match:``. A kind is one ``TriggerKind`` in ``KINDS``:
its name (the rule's ``trigger:`` value and the schema's enum), the captures a rule's
remediation may name, the stage of ``triage`` that evaluates it, and its evaluator, which turns
that stage's evidence into the rule's finding. Adding a kind is one entry here, its row in
docs/rules.md and a rule or test that uses it (tests/test_triggers.py checks both).

Stages, in the order triage runs them:

- ``metrics``: after the text rules, on each file's metric issues; a class a text rule already
  reported is not reported again.
- ``timeline``: once the timeline is built, on its verdicts.
- ``exit_status``: after ranking, only when the job reported exit status 0; the first active rule
  of this stage is the only one evaluated, and triage places its finding (the root cause when
  there is none, else related).

This module imports neither the scan nor the rule schema at run time: the schema (library.py)
reads ``KINDS`` to validate rules, and the scan imports the schema.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from app.engine.pipeline.findings import HitRecord, RuleMatch
from app.engine.pipeline.lines import parse_context

if TYPE_CHECKING:
    from app.engine.pipeline.library import Rule
    from app.engine.pipeline.metrics import MetricIssue
    from app.engine.pipeline.rank import Ranked
    from app.engine.pipeline.scan import FileScan
    from app.engine.timeline.model import Timeline

Stage = Literal["metrics", "timeline", "exit_status"]


@dataclass(frozen=True)
class TriggerInput:
    """What a stage has to offer its evaluators."""

    scans: Sequence[FileScan]
    seen: frozenset[str] = frozenset()  # classes the text rules reported (stage `metrics`)
    timeline: Timeline | None = None  # stage `timeline`
    ranked: Sequence[Ranked] = ()  # stage `exit_status`


Evaluator = Callable[["Rule", TriggerInput], RuleMatch | None]


@dataclass(frozen=True)
class TriggerKind:
    name: str
    stage: Stage
    captures: frozenset[str]
    evaluate: Evaluator
    summary: str  # one line for humans; docs/rules.md says it at length


def _metric(issue_kind: str) -> Evaluator:
    """Findings from each file's parsed training metrics (app.engine.pipeline.metrics)."""

    def evaluate(rule: Rule, inp: TriggerInput) -> RuleMatch | None:
        if rule.failure_class in inp.seen:
            return None
        m = RuleMatch(rule=rule, confidence=rule.confidence, signatures=["metrics"])
        told: MetricIssue | None = None  # the issue the captures describe
        earliest: MetricIssue | None = None  # the one at the earliest step
        for fi, scan in enumerate(inp.scans):
            issues = [(i, text) for i, text in scan.metric_issues if i.kind == issue_kind]
            if not issues:
                continue
            m.count += len(issues)
            m.files.append(scan.name)
            shown: set[int] = set()  # one evidence line for several metrics of one line
            for issue, text in issues:
                ctx = parse_context(text)
                if ctx.rank is None:
                    ctx.rank = scan.rank_hint
                if issue.line not in shown:
                    shown.add(issue.line)
                    m.evidence.append((scan.name, HitRecord(issue.line, text, {}, ctx)))
                if ctx.rank is not None:
                    m.ranks.add(ctx.rank)
                if ctx.where:
                    m.hosts.add(ctx.where)
                if (fi, issue.line) < m.first:
                    m.first = (fi, issue.line)
                    told = issue
                m.last = max(m.last, (fi, issue.line))
                if issue.step is not None and (earliest is None or issue.step < cast(int, earliest.step)):
                    earliest = issue
        if not m.count:
            return None
        # the first bad step is what the advice is about ("resume from before it"): where the
        # issues name steps, the earliest step, which need not be the earliest line (a summary
        # line above the metrics, ranks' files interleaved); else the earliest line
        if told is not None:
            if told.step is not None and earliest is not None and earliest.step != told.step:
                told = earliest
            m.captures = {
                "metric": told.name,
                "value": f"{told.value:g}",
                **({"step": str(told.step)} if told.step is not None else {}),
                **({"baseline": f"{told.baseline:g}"} if told.baseline is not None else {}),
            }
        m.evidence = m.evidence[:4]
        return m

    return evaluate


def _verdict(rule: Rule, inp: TriggerInput) -> RuleMatch | None:
    """A finding the timeline establishes on its own (a collective desync, a rank that exited
    without a word): its verdict of the rule's trigger and class."""
    tl = inp.timeline
    if tl is None:
        return None
    v = next(
        (v for v in tl.verdicts if v.trigger == rule.trigger and v.failure_class == rule.failure_class),
        None,
    )
    if v is None:
        return None
    m = RuleMatch(rule=rule, count=1, confidence=rule.confidence, signatures=["timeline"])
    m.captures = {
        "ranks": ", ".join(map(str, v.ranks)) or "?",
        "seq": str(v.seq) if v.seq is not None else "?",
        "summary": v.summary,
    }
    m.ranks = set(v.ranks)
    for ev in v.evidence:
        ctx = parse_context(ev.text)
        m.evidence.append((ev.file, HitRecord(ev.line, ev.text, {}, ctx)))
        m.files += [ev.file] if ev.file not in m.files else []
    if m.evidence:
        m.first = (0, m.evidence[0][1].line)
        m.last = (0, m.evidence[-1][1].line)
    return m


TAIL_LINES = 200  # an exception this close to the end of a log is what ended the job
# severities of a root cause that is itself the fatal error (Severity.error.weight and above)
FATAL_SEVERITIES = frozenset({"critical", "error"})


def _masked_exit(rule: Rule, inp: TriggerInput) -> RuleMatch | None:
    """Exit status 0, yet the log ends in a fatal error: the job's status is masked.

    The fatal error is the root cause when a rule knows it; otherwise an unhandled traceback in
    the last lines of a log. The finding carries that error's last evidence line."""
    root = next((r for r in inp.ranked if r.role == "root_cause"), None)
    evidence_of: RuleMatch | None = None
    if root is not None and root.match.rule.severity in FATAL_SEVERITIES:
        evidence_of = root.match
    else:
        for r in inp.ranked:
            fi, line = r.match.last
            if r.failure_class == "python.unhandled_exception" and inp.scans[fi].lines - line <= TAIL_LINES:
                evidence_of = r.match
                break
    if evidence_of is None:
        return None
    masked = RuleMatch(
        rule=rule, count=1, first=evidence_of.first, last=evidence_of.last, confidence=rule.confidence
    )
    masked.evidence = evidence_of.evidence[-1:]
    masked.files = evidence_of.files[-1:]
    return masked


_METRIC_CAPTURES = frozenset({"metric", "value", "step"})
_VERDICT_CAPTURES = frozenset({"ranks", "seq", "summary"})

# the order is the rule schema's enum order (`logtriage rules schema`)
KINDS: dict[str, TriggerKind] = {
    k.name: k
    for k in (
        TriggerKind(
            "exit_status_masked",
            "exit_status",
            frozenset(),
            _masked_exit,
            "the job reported exit status 0 although its log ends in a fatal error",
        ),
        TriggerKind(
            "metric_not_finite",
            "metrics",
            _METRIC_CAPTURES | {"baseline"},
            _metric("not_finite"),
            "a training metric (loss, grad norm) is NaN or infinite",
        ),
        TriggerKind(
            "metric_spike",
            "metrics",
            _METRIC_CAPTURES | {"baseline"},
            _metric("spike"),
            "a loss or grad-norm value far above its recent baseline",
        ),
        TriggerKind(
            "metric_steps_skipped",
            "metrics",
            _METRIC_CAPTURES | {"baseline"},
            _metric("skipped"),
            "the loss scaler skipped optimizer steps (fp16 overflow) again and again",
        ),
        TriggerKind(
            "collective_desync",
            "timeline",
            _VERDICT_CAPTURES,
            _verdict,
            "ranks disagree on a collective (sequence number, operation or shapes)",
        ),
        TriggerKind(
            "rank_exited",
            "timeline",
            _VERDICT_CAPTURES,
            _verdict,
            "a rank's output stops without an error while the others wait for it",
        ),
        TriggerKind(
            "rank_failed_first",
            "timeline",
            _VERDICT_CAPTURES,
            _verdict,
            "torchrun saw a rank exit with an error first while other ranks timed out waiting for it",
        ),
    )
}


def fire(rules: Sequence[Rule], stage: Stage, inp: TriggerInput) -> list[RuleMatch]:
    """The findings of the active rules whose trigger kind runs at `stage`, in rule order."""
    out: list[RuleMatch] = []
    for rule in rules:
        kind = KINDS.get(rule.trigger or "")
        if kind is None or kind.stage != stage or rule.status.value == "deprecated":
            continue
        m = kind.evaluate(rule, inp)
        if m is not None:
            out.append(m)
    return out


def stage_of(rule: Rule) -> Stage | None:
    kind = KINDS.get(rule.trigger or "")
    return kind.stage if kind else None
