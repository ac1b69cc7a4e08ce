"""An analysis' row before its result: drafts, pending rows, idempotency, failure."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sqlalchemy import bindparam, delete, inspect, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.db.models import (
    Analysis,
    AnalysisFile,
    Feedback,
    table_of,
    utcnow,
)
from app.db.repo.ids import is_valid_id, new_id
from app.errors import ConflictError, NotFoundError


@dataclass(frozen=True)
class JobMeta:
    """What the failed job's hook tells us about it."""

    source: str = "api"
    job_id: str | None = None
    framework: str | None = None
    exit_code: int | None = None
    host: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def find_idempotent(session: Session, *, scope: str, key: str) -> Analysis | None:
    return session.scalar(
        select(Analysis).where(Analysis.idempotency_scope == scope, Analysis.idempotency_key == key)
    )


@dataclass(frozen=True)
class Draft:
    """A new analysis that has no row yet: what its row will say about the request.

    The server writes a hook's analysis in one transaction when it finishes, unless the request
    stops waiting for it (202) or reserves an idempotency key: those insert the pending row
    first (`insert_pending`)."""

    analysis_id: str
    created_at: dt.datetime
    meta: JobMeta
    token_id: int | None
    runner: str | None

    @classmethod
    def new(cls, *, meta: JobMeta, token_id: int | None, runner: str | None) -> Draft:
        now = utcnow()
        return cls(new_id(now), now, meta, token_id, runner)


def _pending_values(
    draft: Draft,
    *,
    idempotency_scope: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> dict[str, Any]:
    meta = draft.meta
    return {
        "id": draft.analysis_id,
        "created_at": draft.created_at,
        "status": "pending",
        "source": meta.source,
        "job_id": meta.job_id,
        "framework": meta.framework,
        "exit_code": meta.exit_code,
        "host": meta.host,
        "labels": dict(meta.labels),
        "token_id": draft.token_id,
        "idempotency_scope": idempotency_scope if idempotency_key else None,
        "idempotency_key": idempotency_key,
        "request_digest": request_digest,
        "runner": draft.runner,
    }


def pending_row(
    draft: Draft,
    *,
    idempotency_scope: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> Analysis:
    return Analysis(
        **_pending_values(
            draft,
            idempotency_scope=idempotency_scope,
            idempotency_key=idempotency_key,
            request_digest=request_digest,
        )
    )


def reserve_key(session: Session, *, draft: Draft, scope: str, key: str, request_digest: str) -> bool:
    """Insert `draft`'s pending row holding the idempotency key, unless a row holds it already
    (False: look that one up). One statement where a look-up and an insert were two: every
    hook reserves its key, and in a burst the round trips are the web process's waits. A
    request holding the same key uncommitted is waited for; its row is then the one found."""
    values = _pending_values(
        draft, idempotency_scope=scope, idempotency_key=key, request_digest=request_digest
    )
    stmt = _reserve_stmt(session.get_bind().dialect.name)
    return session.connection().execute(stmt, values).scalar() is not None


@functools.cache
def _reserve_stmt(dialect: str) -> Any:
    """Built once per dialect, run on the connection: every hook runs it (ARCHITECTURE.md, "A
    hook's statements compile once")."""
    table = table_of(Analysis)
    insert_ = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        insert_(table)
        .on_conflict_do_nothing(index_elements=["idempotency_scope", "idempotency_key"])
        .returning(table.c.id)
    )


def insert_pending(
    session: Session,
    *,
    draft: Draft,
    idempotency_scope: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> Analysis:
    row = pending_row(
        draft,
        idempotency_scope=idempotency_scope,
        idempotency_key=idempotency_key,
        request_digest=request_digest,
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError:
        raise ConflictError(
            "a request with this Idempotency-Key is being processed right now; retry in a moment"
        ) from None
    return row


def create_pending(
    session: Session,
    *,
    meta: JobMeta,
    token_id: int | None,
    runner: str,
    idempotency_scope: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> Analysis:
    return insert_pending(
        session,
        draft=Draft.new(meta=meta, token_id=token_id, runner=runner),
        idempotency_scope=idempotency_scope,
        idempotency_key=idempotency_key,
        request_digest=request_digest,
    )


def get_analysis(session: Session, *, analysis_id: str, full: bool = False) -> Analysis:
    row: Analysis | None = None
    if is_valid_id(analysis_id):
        row = session.scalar(_get_stmts().row, {"id": analysis_id.upper()})
    if row is None:
        raise NotFoundError(f"no analysis {analysis_id!r}")
    if full:
        # not selectinload, whose loader built its statement on every call; a collection this
        # session already holds (it may have changes not flushed) is left as it is, as there
        unloaded = inspect(row).unloaded
        stmts = _get_stmts()
        for name, stmt in (("files", stmts.files), ("feedback", stmts.feedback)):
            if name in unloaded:
                set_committed_value(row, name, list(session.scalars(stmt, {"id": row.id})))
    return row


@functools.cache
def _get_stmts() -> SimpleNamespace:
    """`get_analysis`'s statements, built once (ARCHITECTURE.md, "A hook's statements compile
    once"): every poll of an analysis runs them."""
    return SimpleNamespace(
        row=select(Analysis).where(Analysis.id == bindparam("id")),
        files=select(AnalysisFile)
        .where(AnalysisFile.analysis_id == bindparam("id"))
        .order_by(AnalysisFile.position),
        feedback=select(Feedback).where(Feedback.analysis_id == bindparam("id")).order_by(Feedback.id),
    )


def delete_analysis(session: Session, *, analysis_id: str) -> None:
    session.execute(delete(Analysis).where(Analysis.id == analysis_id))


# a failure the server caused (it stopped, it was overloaded, its disk was full): the same
# request, replayed with its Idempotency-Key, runs the analysis again instead of replaying it
RETRYABLE_FAILURES = frozenset({503, 507})


def is_retryable_failure(row: Analysis) -> bool:
    return row.status == "failed" and (row.error or {}).get("status") in RETRYABLE_FAILURES


def restart_failed(session: Session, *, analysis_id: str, runner: str) -> bool:
    """Make a retryable failed analysis pending again under `runner`; False when another
    request restarted it first (it is then pending or done: the caller replays it)."""
    res = session.execute(
        update(Analysis)
        .where(Analysis.id == analysis_id, Analysis.status == "failed")
        .values(status="pending", error=None, finished_at=None, runner=runner)
    )
    return bool(getattr(res, "rowcount", 0) == 1)


def fail_analysis(session: Session, *, analysis_id: str, problem: dict[str, Any]) -> None:
    session.execute(
        update(Analysis)
        .where(Analysis.id == analysis_id, Analysis.status == "pending")
        .values(status="failed", error=problem, finished_at=utcnow())
    )
