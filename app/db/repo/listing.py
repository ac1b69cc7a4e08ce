"""The history: filters, full-text search, cursor and page pagination."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, String, cast, exists, func, or_, select
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session, defer

from app.db.models import (
    Analysis,
    Feedback,
    Finding,
    FindingHost,
)
from app.db.repo.ids import is_valid_id
from app.errors import UsageError


@dataclass(frozen=True)
class AnalysisFilter:
    failure_class: str | None = None
    kind: str | None = None
    framework: str | None = None
    job_id: str | None = None
    host: str | None = None
    status: str | None = None
    source: str | None = None
    rule_id: str | None = None
    fingerprint: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # words that must all appear in the root cause's title, the job id or the analysis id
    query: str | None = None
    has_feedback: bool | None = None
    token_id: int | None = None  # only the analyses this token posted (an ingest-only caller)


def _like(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _sqlite(session: Session) -> bool:
    return session.get_bind().dialect.name == "sqlite"


def _filtered(stmt: Select[Any], f: AnalysisFilter, *, sqlite: bool = False) -> Select[Any]:
    """`sqlite`: SQLite's LIKE already ignores ASCII case, as its lower() does (it folds nothing
    else): ILIKE's lower() on three columns a row only made a search 2x slower there."""
    if f.failure_class:
        stmt = stmt.where(Analysis.root_class == f.failure_class)
    if f.kind:
        stmt = stmt.where(Analysis.root_kind == f.kind)
    if f.framework:
        stmt = stmt.where(or_(Analysis.framework_detected == f.framework, Analysis.framework == f.framework))
    if f.job_id:
        stmt = stmt.where(Analysis.job_id == f.job_id)
    if f.status:
        stmt = stmt.where(Analysis.status == f.status)
    if f.source:
        stmt = stmt.where(Analysis.source == f.source)
    if f.fingerprint:
        stmt = stmt.where(Analysis.fingerprint == f.fingerprint)
    if f.rule_id:
        stmt = stmt.where(exists().where(Finding.analysis_id == Analysis.id, Finding.rule_id == f.rule_id))
    if f.host:
        stmt = stmt.where(
            or_(
                Analysis.host == f.host,
                exists().where(
                    Finding.analysis_id == Analysis.id,
                    FindingHost.finding_id == Finding.id,
                    FindingHost.host == f.host,
                ),
            )
        )
    if f.query:
        for word in f.query.split()[:8]:
            pattern = _like(word)
            cols = (Analysis.root_title, Analysis.job_id, Analysis.root_class)
            matches = [
                c.like(pattern, escape="\\") if sqlite else c.ilike(pattern, escape="\\") for c in cols
            ]
            stmt = stmt.where(or_(*matches, Analysis.id == word.upper()))
    if f.token_id is not None:
        stmt = stmt.where(Analysis.token_id == f.token_id)
    if f.has_feedback is not None:
        has = exists().where(Feedback.analysis_id == Analysis.id)
        stmt = stmt.where(has if f.has_feedback else ~has)
    if f.since:
        stmt = stmt.where(Analysis.created_at >= f.since)
    if f.until:
        stmt = stmt.where(Analysis.created_at < f.until)
    return stmt


def encode_cursor(analysis_id: str) -> str:
    return base64.urlsafe_b64encode(f"v1:{analysis_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except ValueError:
        raw = ""
    if not raw.startswith("v1:") or not is_valid_id(raw[3:]):
        raise UsageError("invalid cursor: pass the `next_cursor` of the previous page unchanged")
    return raw[3:]


def list_analyses(
    session: Session,
    *,
    filters: AnalysisFilter,
    limit: int,
    cursor: str | None = None,
    newer_than: str | None = None,
) -> tuple[list[Analysis], str | None]:
    """A page, newest first: older than `cursor`, or (`newer_than`, a cursor too) the page just
    before it, for a "newer" link. Returns the rows and the cursor of the next older page."""
    # a page shows the denormalised columns: the result document (KBs of JSON a row, ~half the
    # page's time to decode) is left unloaded; `root_confidences` reads the one number it needs
    light = defer(Analysis.result)
    if newer_than:
        after = decode_cursor(newer_than)
        stmt = (
            _filtered(select(Analysis), filters, sqlite=_sqlite(session))
            .where(Analysis.id > after)
            .order_by(Analysis.id)
            .limit(limit)
            .options(light)
        )
        rows = list(reversed(list(session.scalars(stmt))))
        if filters.labels:
            rows = [r for r in rows if all((r.labels or {}).get(k) == v for k, v in filters.labels.items())]
        return rows, (encode_cursor(rows[-1].id) if rows else None)
    stmt = (
        _filtered(select(Analysis), filters, sqlite=_sqlite(session))
        .order_by(Analysis.id.desc())
        .limit(limit + 1)
        .options(light)
    )
    if cursor:
        stmt = stmt.where(Analysis.id < decode_cursor(cursor))
    rows = list(session.scalars(stmt))
    if filters.labels:  # JSON containment differs by backend: filter labels in Python
        rows = [r for r in rows if all((r.labels or {}).get(k) == v for k, v in filters.labels.items())]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(rows[-1].id) if more and rows else None)


def root_confidences(session: Session, *, analysis_ids: Sequence[str]) -> dict[str, float | None]:
    """The root cause's confidence of each analysis, read inside the database from its result."""
    if not analysis_ids:
        return {}
    ids = list(analysis_ids)
    conf = cast(Analysis.result[("root_cause", "confidence")], String)
    try:
        with session.begin_nested():  # a failed statement must not abort the page's transaction
            rows = session.execute(select(Analysis.id, conf).where(Analysis.id.in_(ids))).all()
        return {str(aid): _number(c) for aid, c in rows}
    except DataError:
        # PostgreSQL refuses any path into a JSON document that holds `\u0000` (a NUL from the
        # log): read those results whole, as before, in Python
        results = session.execute(select(Analysis.id, Analysis.result).where(Analysis.id.in_(ids)))
        return {
            str(aid): _number(((res or {}).get("root_cause") or {}).get("confidence")) for aid, res in results
        }


def finding_hosts_of(session: Session, *, analysis_ids: Sequence[str]) -> dict[str, list[str]]:
    """The hosts each analysis' findings were seen on, the root cause's first: what the report
    shows and what the history's host filter matches, where the hook may have named none."""
    if not analysis_ids:
        return {}
    stmt = (
        select(Finding.analysis_id, FindingHost.host, Finding.role, Finding.position)
        .join(FindingHost, FindingHost.finding_id == Finding.id)
        .where(Finding.analysis_id.in_(list(analysis_ids)))
    )
    ranked = sorted(session.execute(stmt).all(), key=lambda r: (r[2] != "root", r[3], r[1]))
    out: dict[str, list[str]] = {}
    for aid, host, _role, _pos in ranked:
        hosts = out.setdefault(str(aid), [])
        if host not in hosts:
            hosts.append(host)
    return out


def _number(value: object) -> float | None:
    try:
        return float(str(value)) if value is not None else None
    except ValueError:  # JSON null: no root cause
        return None


def count_analyses(session: Session, *, filters: AnalysisFilter, cap: int = 10_000) -> int:
    """How many analyses match, counting at most `cap` (a page says "10,000+" past it: an exact
    count of a huge history costs a full scan for a number nobody reads)."""
    if filters.labels:
        rows, _ = list_analyses(session, filters=filters, limit=cap)
        return len(rows)
    inner = _filtered(select(Analysis.id), filters, sqlite=_sqlite(session)).limit(cap + 1).subquery()
    return int(session.scalar(select(func.count()).select_from(inner)) or 0)


def has_newer(session: Session, *, filters: AnalysisFilter, analysis_id: str) -> bool:
    """Whether any analysis matching the filters is newer than this one (a "newer" link)."""
    stmt = _filtered(select(Analysis.id), filters, sqlite=_sqlite(session))
    stmt = stmt.where(Analysis.id > analysis_id).limit(1)
    return session.scalar(stmt) is not None


def feedback_counts(session: Session, *, analysis_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """Verdicts per analysis, for a page of the history."""
    if not analysis_ids:
        return {}
    out: dict[str, dict[str, int]] = {}
    rows = session.execute(
        select(Feedback.analysis_id, Feedback.verdict, func.count())
        .where(Feedback.analysis_id.in_(list(analysis_ids)))
        .group_by(Feedback.analysis_id, Feedback.verdict)
    )
    for aid, verdict, n in rows:
        out.setdefault(str(aid), {})[str(verdict)] = int(n)
    return out
