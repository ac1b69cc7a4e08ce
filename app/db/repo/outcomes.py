"""Outcomes of the next attempt of failed jobs, and the history they give an action."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.models import Analysis, Outcome, OutcomeTally, utcnow

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
            _tally(session, row)
    except IntegrityError:
        return None
    return row


def outcomes_of_job(session: Session, *, job_id: str, limit: int = 100) -> list[Outcome]:
    return list(
        session.scalars(
            select(Outcome).where(Outcome.job_id == job_id).order_by(Outcome.id.desc()).limit(limit)
        )
    )


def _keys(failure_class: str, rule_id: str | None, fingerprint: str | None) -> list[tuple[str, str]]:
    keys = [("class", failure_class)]
    if rule_id:
        keys.append(("rule", f"{failure_class} {rule_id}"))
    if fingerprint:
        keys.append(("fingerprint", fingerprint))
    return keys


def _tally(session: Session, row: Outcome) -> None:
    """Count an outcome into its scopes' tallies (an atomic upsert: concurrent hooks add up)."""
    if row.failure_class is None or row.action is None:
        return
    retried = row.action in RETRIES
    ok = row.status == "succeeded"
    add = {
        "retries": int(retried),
        "retries_ok": int(retried and ok),
        "fixes": int(not retried),
        "fixes_ok": int(not retried and ok),
    }
    is_pg = session.get_bind().dialect.name == "postgresql"
    ins = postgresql.insert(OutcomeTally) if is_pg else sqlite.insert(OutcomeTally)
    stmt = ins.on_conflict_do_update(
        index_elements=["scope", "key"], set_={k: getattr(OutcomeTally, k) + ins.excluded[k] for k in add}
    )
    keys = sorted(_keys(row.failure_class, row.rule_id, row.fingerprint))  # one lock order for all
    session.execute(stmt, [{"scope": sc, "key": k, **add} for sc, k in keys])


# built once: a select built per call (the ORM's expressions, an IN of tuples) cost ~1 ms on
# SQLite, ten times the reads themselves
_COUNTS = text(
    "SELECT scope, retries, retries_ok, fixes, fixes_ok FROM outcome_tallies"
    " WHERE (scope = 'class' AND key = :cls) OR (scope = 'rule' AND key = :rule)"
    " OR (scope = 'fingerprint' AND key = :fp)"
)


def outcome_counts(
    session: Session, *, failure_class: str, rule_id: str | None, fingerprint: str | None
) -> Counts:
    """Reruns and successes after failures like this one, per scope: at most three primary-key
    reads of the tallies (the history is read on every stored and every read analysis)."""
    params = {
        "cls": failure_class,
        "rule": f"{failure_class} {rule_id}" if rule_id else "",
        "fp": fingerprint or "",
    }
    rows = session.connection().execute(_COUNTS, params)
    return {scope: (r, rok, f, fok) for scope, r, rok, f, fok in rows}
