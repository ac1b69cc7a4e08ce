"""Signal lines of stored analyses (app.engine.signals) and what is built on them: unknown
failures to cluster, analyses that share lines, failure groups' triage state (issue 23)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import exists, func, or_, select
from sqlalchemy.orm import Session

from app.db.models import Analysis, AnalysisFile, AnalysisSignal, FailureGroup, Feedback, utcnow


@dataclass(frozen=True)
class SignalRow:
    analysis_id: str
    position: int
    key: str
    template: str
    file: str
    line: int
    text: str
    weight: int


@dataclass(frozen=True)
class AnalysisBrief:
    id: str
    created_at: dt.datetime
    job_id: str | None
    host: str | None
    framework: str | None
    root_class: str | None
    root_title: str | None
    fingerprint: str | None
    feedback: str | None  # the latest verdict: correct | wrong
    comment: str | None  # ... and its comment


def _brief_cols() -> tuple[object, ...]:
    return (
        Analysis.id,
        Analysis.created_at,
        Analysis.job_id,
        Analysis.host,
        func.coalesce(Analysis.framework_detected, Analysis.framework),
        Analysis.root_class,
        Analysis.root_title,
        Analysis.fingerprint,
    )


def briefs(session: Session, *, ids: Sequence[str]) -> dict[str, AnalysisBrief]:
    if not ids:
        return {}
    rows = session.execute(select(*_brief_cols()).where(Analysis.id.in_(list(ids)))).all()  # type: ignore[call-overload]
    verdicts: dict[str, tuple[str, str | None]] = {}
    for aid, verdict, comment in session.execute(
        select(Feedback.analysis_id, Feedback.verdict, Feedback.comment)
        .where(Feedback.analysis_id.in_(list(ids)))
        .order_by(Feedback.created_at, Feedback.id)
    ):
        verdicts[aid] = (verdict, comment)
    return {r[0]: AnalysisBrief(*r, *(verdicts.get(r[0]) or (None, None))) for r in rows}


def unknown_candidates(
    session: Session, *, since: dt.datetime | None, limit: int, include_wrong: bool = True
) -> list[str]:
    """Newest first: finished analyses with no named cause, and those a person marked wrong."""
    wrong = exists().where(Feedback.analysis_id == Analysis.id, Feedback.verdict == "wrong")
    cond = or_(Analysis.root_class == "unknown", wrong) if include_wrong else Analysis.root_class == "unknown"
    stmt = select(Analysis.id).where(Analysis.status == "done", cond)
    if since is not None:
        stmt = stmt.where(Analysis.created_at >= since)
    return list(session.scalars(stmt.order_by(Analysis.created_at.desc(), Analysis.id.desc()).limit(limit)))


def known_candidates(
    session: Session, *, since: dt.datetime | None, limit: int
) -> list[tuple[str, str, str]]:
    """Newest first: finished analyses with a named cause, (id, fingerprint, root title)."""
    stmt = select(Analysis.id, Analysis.fingerprint, Analysis.root_title).where(
        Analysis.status == "done", Analysis.fingerprint.is_not(None)
    )
    if since is not None:
        stmt = stmt.where(Analysis.created_at >= since)
    rows = session.execute(stmt.order_by(Analysis.created_at.desc(), Analysis.id.desc()).limit(limit))
    return [(a, f or "", t or "") for a, f, t in rows]


def signals_of(session: Session, *, analysis_ids: Sequence[str]) -> dict[str, list[SignalRow]]:
    out: dict[str, list[SignalRow]] = {aid: [] for aid in analysis_ids}
    if not analysis_ids:
        return out
    for r in session.execute(
        select(
            AnalysisSignal.analysis_id,
            AnalysisSignal.position,
            AnalysisSignal.key,
            AnalysisSignal.template,
            AnalysisSignal.file,
            AnalysisSignal.line,
            AnalysisSignal.text,
            AnalysisSignal.weight,
        )
        .where(AnalysisSignal.analysis_id.in_(list(analysis_ids)))
        .order_by(AnalysisSignal.analysis_id, AnalysisSignal.position)
    ):
        out.setdefault(r[0], []).append(SignalRow(*r))
    return out


def sharing_keys(
    session: Session, *, keys: Sequence[str], exclude: str, limit: int
) -> list[tuple[str, int, int]]:
    """Analyses with signal lines of these templates: (id, shared keys, best position of a
    shared line), the most shared first, then the newest (ids are ULIDs: they sort by time)."""
    if not keys:
        return []
    shared = func.count(func.distinct(AnalysisSignal.key))
    stmt = (
        select(AnalysisSignal.analysis_id, shared, func.min(AnalysisSignal.position))
        .where(AnalysisSignal.key.in_(list(keys)), AnalysisSignal.analysis_id != exclude)
        .group_by(AnalysisSignal.analysis_id)
        .order_by(shared.desc(), AnalysisSignal.analysis_id.desc())
        .limit(limit)
    )
    return [(a, int(n), int(p)) for a, n, p in session.execute(stmt)]


def posted_by(session: Session, *, analysis_ids: Sequence[str], token_id: int | None) -> set[str]:
    """Of these analyses, the ones this token posted (what an ingest token may read)."""
    if not analysis_ids or token_id is None:
        return set()
    rows = session.scalars(
        select(Analysis.id).where(Analysis.id.in_(list(analysis_ids)), Analysis.token_id == token_id)
    )
    return set(rows)


def file_positions(session: Session, *, analysis_ids: Sequence[str]) -> dict[tuple[str, str], int]:
    """(analysis id, file name) -> the file's position (for links into the log viewer)."""
    if not analysis_ids:
        return {}
    rows = session.execute(
        select(AnalysisFile.analysis_id, AnalysisFile.name, AnalysisFile.position).where(
            AnalysisFile.analysis_id.in_(list(analysis_ids))
        )
    )
    return {(a, n): p for a, n, p in rows}


def signal_texts(
    session: Session, *, since: dt.datetime | None = None, limit: int = 200_000
) -> list[tuple[str, int, str, str, int]]:
    """Stored signal lines to back-test a draft on: (analysis id, position, text, file, line),
    newest analyses first."""
    stmt = select(
        AnalysisSignal.analysis_id,
        AnalysisSignal.position,
        AnalysisSignal.text,
        AnalysisSignal.file,
        AnalysisSignal.line,
    )
    if since is not None:
        stmt = stmt.join(Analysis, Analysis.id == AnalysisSignal.analysis_id).where(
            Analysis.created_at >= since
        )
    stmt = stmt.order_by(AnalysisSignal.analysis_id.desc(), AnalysisSignal.position).limit(limit)
    return [(a, p, t, f, ln) for a, p, t, f, ln in session.execute(stmt)]


def classes_of(session: Session, *, analysis_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """id -> (root class, root rule id)."""
    if not analysis_ids:
        return {}
    rows = session.execute(
        select(Analysis.id, Analysis.root_class, Analysis.root_rule_id).where(
            Analysis.id.in_(list(analysis_ids))
        )
    )
    return {a: (c, r) for a, c, r in rows}


def groups(session: Session, *, ids: Sequence[str]) -> dict[str, FailureGroup]:
    if not ids:
        return {}
    return {g.id: g for g in session.scalars(select(FailureGroup).where(FailureGroup.id.in_(list(ids))))}


def set_group(
    session: Session,
    *,
    group_id: str,
    status: str | None,
    assignee: str | None,
    note: str | None,
    tracker_url: str | None,
    token_id: int | None,
    clear: Sequence[str] = (),
) -> FailureGroup:
    """Create or update a group's state; fields given as None stay as they were (``clear``
    names the ones to empty)."""
    g = session.get(FailureGroup, group_id, with_for_update=True)
    if g is None:
        g = FailureGroup(id=group_id, status="open")
        session.add(g)
    if status is not None:
        g.status = status
    for name, value in (("assignee", assignee), ("note", note), ("tracker_url", tracker_url)):
        if value is not None:
            setattr(g, name, value)
        elif name in clear:
            setattr(g, name, None)
    g.updated_at = utcnow()
    g.token_id = token_id
    session.flush()
    return g


__all__ = [
    "AnalysisBrief",
    "SignalRow",
    "briefs",
    "classes_of",
    "file_positions",
    "groups",
    "known_candidates",
    "posted_by",
    "set_group",
    "sharing_keys",
    "signal_texts",
    "signals_of",
    "unknown_candidates",
]
