"""Outcomes (issue 24): how the next attempt of a failed job ended, recorded by the same hooks
that post failures, and the lemon-node ledger built from hardware failures. Blocking (database):
the edges call these in a thread.

An outcome is linked to the analysed failure it followed: the one named by `analysis_id`, else
the job's newest analysis created before the attempt started (`started_at`), else its newest
one without an outcome. One outcome per failure and one per (job, attempt id): a hook that
retries its post gets the stored outcome back, never a second count.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.db import repo
from app.db.models import Analysis, Outcome
from app.errors import ConflictError, ValidationFailedError
from app.service import present
from app.service.access import Principal, check_can_read
from app.service.context import ServiceContext
from app.service.metadata import checked_text

__all__ = ["ExcludeList", "Recorded", "clear_host", "exclude_list", "job_outcomes", "record_outcome"]

STATUSES = ("succeeded", "failed")
ACTIONS = ("retry", "retry_excluding", "fix_and_rerun")


@dataclass(frozen=True)
class Recorded:
    outcome: dict[str, Any]
    created: bool  # False: this attempt (or this failure's outcome) was recorded before


def outcome_dict(o: Outcome, *, base: str) -> dict[str, Any]:
    return {
        "id": o.id,
        "job_id": o.job_id,
        "attempt_id": o.attempt_id,
        "analysis_id": o.analysis_id,
        "status": o.status,
        "action": o.action,
        "advised": o.advised,
        "failure_class": o.failure_class,
        "rule_id": o.rule_id,
        "excluded_hosts": list(o.excluded_hosts or []),
        "detail": o.detail,
        "created_at": present.iso(o.created_at),
        "links": {"analysis": present.analysis_url(base, o.analysis_id) if o.analysis_id else None},
    }


def _again(o: Outcome, *, status: str, what: str, base: str) -> Recorded:
    """The stored outcome, for a post that repeats it; a post that contradicts it is a conflict."""
    if o.status != status:
        raise ConflictError(f"{what} was recorded as {o.status}; an outcome is recorded once")
    return Recorded(outcome_dict(o, base=base), False)


def record_outcome(
    ctx: ServiceContext,
    *,
    job_id: str,
    status: str,
    action: str | None,
    attempt_id: str | None,
    analysis_id: str | None,
    started_at: dt.datetime | None,
    excluded_hosts: Sequence[str],
    detail: str | None,
    principal: Principal,
    base: str,
) -> Recorded:
    """Record how the next attempt after a failure of `job_id` ended."""
    job = checked_text(job_id, "job_id", limit=256)
    assert job is not None
    if status not in STATUSES:
        raise ValidationFailedError(f"status must be one of {', '.join(STATUSES)}, not {status[:40]!r}")
    if action is not None and action not in ACTIONS:
        raise ValidationFailedError(f"action must be one of {', '.join(ACTIONS)}, not {action[:40]!r}")
    attempt = checked_text(attempt_id, "attempt_id", limit=256)
    detail = checked_text(detail, "detail", limit=4000, multiline=True)
    hosts = [h for h in (checked_text(h, "excluded_hosts[]", limit=255) for h in excluded_hosts) if h]
    with ctx.db.write() as s:
        if attempt is not None and (old := repo.outcome_of_attempt(s, job_id=job, attempt_id=attempt)):
            return _again(old, status=status, what=f"attempt {attempt!r}", base=base)
        row: Analysis | None
        if analysis_id is not None:
            row = repo.get_analysis(s, analysis_id=analysis_id)
            if row.job_id != job:
                raise ValidationFailedError(f"analysis {row.id} is of job {row.job_id!r}, not {job!r}")
        else:
            row = repo.failure_to_link(s, job_id=job, before=started_at)
        if row is not None:
            check_can_read(principal, row)
            if (old := repo.outcome_of_analysis(s, analysis_id=row.id)) is not None:
                return _again(old, status=status, what=f"the attempt after {row.id}", base=base)
        new = repo.add_outcome(
            s,
            job_id=job,
            attempt_id=attempt,
            status=status,
            action=action,
            analysis=row,
            excluded_hosts=hosts,
            detail=detail,
            token_id=principal.token_id,
        )
        if new is None:
            # another hook's post of the same attempt or failure won the insert: answer with it
            old = (
                repo.outcome_of_attempt(s, job_id=job, attempt_id=attempt) if attempt is not None else None
            ) or (repo.outcome_of_analysis(s, analysis_id=row.id) if row is not None else None)
            if old is None:
                raise ConflictError("the outcome was recorded by another request; send it again")
            return _again(old, status=status, what="this attempt", base=base)
        return Recorded(outcome_dict(new, base=base), True)


def job_outcomes(ctx: ServiceContext, *, job_id: str, base: str) -> list[dict[str, Any]]:
    with ctx.db.read() as s:
        return [outcome_dict(o, base=base) for o in repo.outcomes_of_job(s, job_id=job_id)]


@dataclass(frozen=True)
class ExcludeList:
    hosts: list[dict[str, Any]]
    days: int
    min_jobs: int

    def forms(self) -> dict[str, str]:
        """The list in the forms schedulers take it."""
        names = [h["host"] for h in self.hosts]
        joined = ",".join(names)
        return {
            "slurm": f"--exclude={joined}" if names else "",
            "kubernetes": "\n".join(
                f"kubectl taint nodes {n} logtriage/suspect=true:NoSchedule --overwrite" for n in names
            ),
            # Ray cannot exclude a node from a job; a label on the node (Ray >= 2.49, beta) and a
            # selector that refuses it in the job's actors and placement groups do
            "ray": "\n".join(
                f"# on {n}: restart its Ray node with the label, e.g. ray start --address=HEAD:6379 "
                f'--labels=\'{{"logtriage-suspect": "true"}}\''
                for n in names
            )
            + (
                '\n# in the job: @ray.remote(label_selector={"logtriage-suspect": "!true"}), '
                "or the same label_selector on its placement group bundles"
                if names
                else ""
            ),
            "plain": "\n".join(names),
        }


def exclude_list(ctx: ServiceContext, *, days: int | None = None, min_jobs: int | None = None) -> ExcludeList:
    """Hosts behind hardware-class failures in at least `min_jobs` jobs within `days`."""
    d = days or ctx.settings.recurrence_days
    m = min_jobs or ctx.settings.suspect_min_jobs
    with ctx.db.read() as s:
        suspects = repo.suspect_hosts(s, days=d, min_jobs=m)
    return ExcludeList([present.suspect_dict(x) for x in suspects], d, m)


def clear_host(ctx: ServiceContext, *, host: str, note: str | None, principal: Principal) -> dict[str, Any]:
    """An operator's "repaired": the host's hardware failures until now stop counting."""
    name = checked_text(host, "host", limit=255)
    assert name is not None
    note = checked_text(note, "note", limit=4000, multiline=True)
    with ctx.db.write() as s:
        at = repo.clear_host(s, host=name, note=note, token_id=principal.token_id)
    return {"host": name, "cleared_at": present.iso(at), "note": note}
