"""What to do with the failed job: the action every analysis carries (`rules/verdicts.yaml`).

The class (or a rule that overrides it) gives the decision; the log's facts give the hosts to
leave out and the reasons shown. `with_history` lets measured outcomes of earlier reruns decide
where the class cannot (a timeout or a dead actor: transient or repeating). Pure: the service
counts the outcomes and passes the counts in.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Mapping, Sequence

from app.engine.models import Action, Finding, OutcomeHistory, PossibleCause
from app.engine.pipeline.expr import ExprError, Missing, Scope, holds, render_template
from app.engine.pipeline.library import Library, Verdict

__all__ = ["MIN_OUTCOMES", "OutcomeCounts", "decide", "real_host", "with_history"]

_UNKNOWN = Verdict(
    decision="investigate", why="No known failure matched: nothing says whether a rerun would pass."
)

# below this many reruns of a kind, a rate says nothing: the class decides
MIN_OUTCOMES = 3
# an ambiguous class whose reruns pass at most this often is treated as one that repeats
_REPEATS_AT_MOST = 1 / 3


def real_host(host: str) -> bool:
    """A host a scheduler could leave out: not loopback, not a wildcard, not empty."""
    h = host.strip().strip("[]")
    if not h or h.lower() in {"localhost", "localhost.localdomain"}:
        return False
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return True
    return not (ip.is_loopback or ip.is_unspecified)


def _by_facts(library: Library, root: Finding, scope: Scope) -> Verdict | None:
    """The first `conditions:` entry of verdicts.yaml for the root's class that the log's facts
    satisfy (a condition that cannot be evaluated does not hold)."""
    for cond in library.verdict_conditions:
        if root.failure_class in cond.classes:
            with contextlib.suppress(ExprError):
                if holds(cond.when, scope):
                    return cond.verdict
    return None


def _hosts_from_facts(verdict: Verdict, facts: Mapping[str, object]) -> list[tuple[str, str]]:
    """(fact, host) for the facts the verdict names as the host of the fault, where the log
    states them (the finding's own lines carried no host in a launcher prefix)."""
    out: list[tuple[str, str]] = []
    for name in verdict.hosts:
        value = facts.get(name)
        if isinstance(value, str) and real_host(value) and all(h != value for _, h in out):
            out.append((name, value))
    return out


def _where(f: Finding) -> str:
    if f.evidence:
        ev = f.evidence[0]
        return f" ({ev.file}:{ev.line})"
    return ""


def decide(
    *,
    library: Library,
    root: Finding | None,
    possible: Sequence[PossibleCause] = (),
    facts: Mapping[str, object] | None = None,
) -> Action:
    """The action for an analysis from its root cause, or from its possible causes when none."""
    facts = facts or {}
    if root is None:
        why = [
            _UNKNOWN.why
            if not possible
            else "No cause is certain, so nothing says whether a rerun would pass."
        ]
        if possible:
            named = ", ".join(f"{p.title} [{p.failure_class}]" for p in possible[:3])
            why.append(f"The log suggests: {named}; what would decide each is listed with it.")
        return Action(decision="investigate", why=why)
    scope = Scope(facts=facts)
    verdict, basis = _by_facts(library, root, scope), "facts"
    if verdict is None:
        verdict = library.rule_verdicts.get(root.rule_id)
        basis = "rule" if verdict else "class"
    verdict = verdict or library.verdicts.get(root.failure_class) or _UNKNOWN
    reason = verdict.why
    if basis == "facts":
        with contextlib.suppress(Missing, ExprError, TypeError, ValueError):
            reason = render_template(verdict.why, scope)
    why = [reason, f"Root cause: {root.title} [{root.failure_class}]{_where(root)}."]
    hosts: list[str] = []
    if verdict.decision == "retry_excluding":
        hosts = sorted({h for h in root.hosts if real_host(h)})
        from_facts = [] if hosts else _hosts_from_facts(verdict, facts)
        if hosts:
            them = "it" if len(hosts) == 1 else "them"
            why.append(f"The log places the fault on {', '.join(hosts)}: leave {them} out.")
        elif from_facts:
            hosts = sorted({h for _, h in from_facts})
            them = "it" if len(hosts) == 1 else "them"
            said = "; ".join(f"{h} (`{fact}`)" for fact, h in from_facts)
            why.append(f"The log names the host that reported the fault: {said}: leave {them} out.")
        else:
            why.append(
                "The log names no host for the fault: leave out the node the failing rank ran on "
                "(the scheduler's record of the job)."
            )
    steps = facts.get("metric_lines")
    if verdict.ambiguous and isinstance(steps, int) and steps > 0:
        why.append(f"It ran {steps} logged training step{'s' if steps != 1 else ''} before failing.")
    return Action(
        decision=verdict.decision,  # type: ignore[arg-type]  # checked against DECISIONS at load
        why=why,
        exclude_hosts=hosts,
        basis=basis,  # type: ignore[arg-type]
        ambiguous=verdict.ambiguous,
    )


# scope -> (retries, retries that succeeded, reruns after a fix, of those succeeded)
OutcomeCounts = Mapping[str, tuple[int, int, int, int]]


def with_history(action: Action, counts: OutcomeCounts) -> Action:
    """The action with the outcomes of earlier reruns of the same failure (narrowest scope with
    enough of them: the same fingerprint, else the same rule, else the same class). Only an
    ambiguous class changes its decision by them; the others show the figures as evidence."""
    for scope in ("fingerprint", "rule", "class"):
        retries, ok, fixed, fixed_ok = counts.get(scope, (0, 0, 0, 0))
        if retries + fixed >= MIN_OUTCOMES:
            break
    else:
        return action
    hist = OutcomeHistory(
        scope=scope,
        retries=retries,
        succeeded=ok,
        fixed=fixed,
        fixed_succeeded=fixed_ok,
    )
    what = {
        "fingerprint": "this same failure",
        "rule": "this rule's failures",
        "class": "failures of this class",
    }[scope]
    said = []
    if retries:
        said.append(
            f"after {what}, {retries} rerun{'s' if retries != 1 else ''} without a change: {ok} succeeded"
        )
    if fixed:
        said.append(f"{fixed} after a fix: {fixed_ok} succeeded")
    line = "History on this service: " + "; ".join(said) + "."
    decision, basis = action.decision, action.basis
    if action.ambiguous and retries >= MIN_OUTCOMES:
        if ok / retries <= _REPEATS_AT_MOST:
            decision, basis = "fix_and_rerun", "history"
            line += " Reruns rarely pass here: fix it rather than retry."
        elif decision in ("retry", "retry_excluding"):
            basis = "history"
            line += " Reruns usually pass here."
    return action.model_copy(
        update={"decision": decision, "basis": basis, "history": hist, "why": [*action.why, line]}
    )
