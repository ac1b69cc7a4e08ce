"""The action's words, one place for every edge: what to do with the failed job."""

from __future__ import annotations

from typing import Any

__all__ = ["DECISION_LABELS", "folded_note", "headline"]

DECISION_LABELS = {
    "retry": "Retry",
    "retry_excluding": "Retry elsewhere",
    "fix_and_rerun": "Fix, then rerun",
    "stop": "Stop",
    "investigate": "Investigate",
}


def headline(action: Any) -> str:
    """One line: the decision in words, with the hosts to leave out. Takes the model or its dict
    (the API's resource and the Slack bot carry dicts)."""
    get = action.get if isinstance(action, dict) else lambda k, d=None: getattr(action, k, d)
    decision = get("decision")
    hosts = list(get("exclude_hosts") or [])
    if decision == "retry":
        if get("basis") == "history":
            return "Retry the job as it is: reruns after this failure have usually passed here."
        if get("ambiguous"):
            # one log cannot tell a fault of the moment from one that repeats: say so, not "transient"
            return "Retry once as it is: this often passes; if it fails the same way again, fix it instead."
        return "Retry the job as it is: the fault was transient."
    if decision == "retry_excluding":
        if hosts:
            return f"Retry the job without {', '.join(hosts)}."
        return (
            "Retry the job on other nodes (the log names no host: leave out the one the failing rank ran on)."
        )
    if decision == "fix_and_rerun":
        return "Fix the job before rerunning it: as it is, it fails the same way."
    if decision == "stop":
        return "Stop: do not rerun the job until someone has acted on the cause."
    return "Investigate before rerunning: the log does not say whether a rerun would pass."


def folded_note(n: int) -> str:
    """What a finding's ranks leave out when Ray's log dedup folded its lines together."""
    # n sums the suffixes of every line kept ("[repeated 27x across cluster]"): not quoted as one
    return (
        f"Ray's log dedup folded {n} alike lines into these (its `[repeated ...x across cluster]`): "
        "more processes printed it than the ranks listed"
    )
