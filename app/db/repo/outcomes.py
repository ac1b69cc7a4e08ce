"""Outcomes of the next attempt of failed jobs, and the history they give an action."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import case, func, literal, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.models import Analysis, Outcome, utcnow

RETRIES = ("retry", "retry_excluding")

# scope -> (retries, retries that succeeded, reruns after a fix, of those succeeded)
Counts = dict[str, tuple[int, int, int, int]]


def failure_to_link(session: Session, *, job_id: str, before: dt.datetime | None = None) -> Analysis | None:
    """The analysed failure an attempt's outcome follows: the job's newest finished analysis
    created before the attempt started (`before`), else its newest one that has no outcome yet."""
    stmt = select(Analysis).where(Analysis.job_id == job_id, Analysis.status == "done")
    if before is not None:
        stmt = stmt.where(Analysis.created_at < before)
    else:
        stmt = stmt.where(~select(Outcome.id).where(Outcome.analysis_id == Analysis.id).exists())
    return session.scalar(stmt.order_by(Analysis.created_at.desc(), Analysis.id.desc()).limit(1))


def outcome_of_attempt(session: Session, *, job_id: str, attempt_id: str) -> Outcome | None:
    return session.scalar(select(Outcome).where(Outcome.job_id == job_id, Outcome.attempt_id == attempt_id))


def outcome_of_analysis(session: Session, *, analysis_id: str) -> Outcome | None:
    return session.scalar(select(Outcome).where(Outcome.analysis_id == analysis_id))


def add_outcome(
    session: Session,
    *,
    job_id: str,
    attempt_id: str | None,
    status: str,
    action: str | None,
    analysis: Analysis | None,
    excluded_hosts: Iterable[str],
    detail: str | None,
    token_id: int | None,
) -> Outcome | None:
    """Insert an outcome; None when another request recorded the same attempt or the same
    failure's outcome first (the unique keys decide a race between two hooks)."""
    result = (analysis.result or {}) if analysis is not None else {}
    advised = (result.get("action") or {}).get("decision")
    row = Outcome(
        job_id=job_id,
        attempt_id=attempt_id,
        analysis_id=analysis.id if analysis is not None else None,
        status=status,
        action=action or advised,
        advised=advised,
        failure_class=analysis.root_class if analysis is not None else None,
        rule_id=analysis.root_rule_id if analysis is not None else None,
        fingerprint=analysis.fingerprint if analysis is not None else None,
        excluded_hosts=sorted(set(excluded_hosts)),
        detail=detail,
        token_id=token_id,
        created_at=utcnow(),
    )
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:
        return None
    return row


def outcomes_of_job(session: Session, *, job_id: str, limit: int = 100) -> list[Outcome]:
    return list(
        session.scalars(
            select(Outcome).where(Outcome.job_id == job_id).order_by(Outcome.id.desc()).limit(limit)
        )
    )


def outcome_counts(
    session: Session, *, failure_class: str, rule_id: str | None, fingerprint: str | None
) -> Counts:
    """Reruns and successes after failures like this one, per scope (one indexed query)."""
    retried = Outcome.action.in_(RETRIES)
    ok = Outcome.status == "succeeded"
    same_fp = (Outcome.fingerprint == fingerprint) if fingerprint else literal(False)
    same_rule = (Outcome.rule_id == rule_id) if rule_id else literal(False)
    stmt = (
        select(
            same_fp,
            same_rule,
            func.sum(case((retried, 1), else_=0)),
            func.sum(case((retried & ok, 1), else_=0)),
            func.sum(case((~retried, 1), else_=0)),
            func.sum(case((~retried & ok, 1), else_=0)),
        )
        .where(Outcome.failure_class == failure_class, Outcome.action.is_not(None))
        .group_by(same_fp, same_rule)
    )
    out: dict[str, list[int]] = {s: [0, 0, 0, 0] for s in ("fingerprint", "rule", "class")}
    for same_fp, same_rule, *nums in session.execute(stmt):
        scopes = ["class"] + (["rule"] if same_rule else []) + (["fingerprint"] if same_fp else [])
        for scope in scopes:
            out[scope] = [a + int(b or 0) for a, b in zip(out[scope], nums, strict=True)]
    return {k: (v[0], v[1], v[2], v[3]) for k, v in out.items()}
