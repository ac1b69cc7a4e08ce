"""Typed, keyword-only storage functions. Callers own the session and its transaction."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, and_, delete, exists, func, insert, or_, select, text, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from app.db import rollup
from app.db.models import (
    Analysis,
    AnalysisFile,
    ApiToken,
    Blob,
    Feedback,
    Finding,
    FindingHost,
    Retriage,
    RuleVersion,
    table_of,
    utcnow,
)
from app.errors import ConflictError, NotFoundError, UsageError
from app.fingerprint import fingerprint

SCOPES = ("ingest", "read", "admin")
TOKEN_PREFIX = "lt_"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


# --- ids ---------------------------------------------------------------------------------------


def new_id(now: dt.datetime | None = None) -> str:
    """A ULID: 48-bit millisecond time + 80 random bits, Crockford base32 (sorts by time)."""
    ms = int((now or utcnow()).timestamp() * 1000)
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        out.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(out))


def id_time(analysis_id: str) -> dt.datetime:
    value = 0
    for ch in analysis_id.upper():
        value = value * 32 + _CROCKFORD.index(ch)
    return dt.datetime.fromtimestamp((value >> 80) / 1000, dt.UTC)


def is_valid_id(analysis_id: str) -> bool:
    return (
        len(analysis_id) == 26 and all(c in _CROCKFORD for c in analysis_id.upper()) and analysis_id[0] <= "7"
    )


# --- helpers -----------------------------------------------------------------------------------


def _insert_ignore(session: Session, model: Any, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    # executemany, not .values(rows): a statement holding its rows compiles anew every time
    if dialect == "postgresql":
        session.execute(postgresql.insert(model).on_conflict_do_nothing(), rows)
    elif dialect == "sqlite":
        session.execute(sqlite.insert(model).on_conflict_do_nothing(), rows)
    else:  # pragma: no cover - other backends: one at a time with a savepoint
        for row in rows:
            try:
                with session.begin_nested():
                    session.add(model(**row))
            except IntegrityError:
                pass


# --- analyses: lifecycle -----------------------------------------------------------------------


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


def _pending_row(
    draft: Draft,
    *,
    idempotency_scope: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> Analysis:
    meta = draft.meta
    return Analysis(
        id=draft.analysis_id,
        created_at=draft.created_at,
        status="pending",
        source=meta.source,
        job_id=meta.job_id,
        framework=meta.framework,
        exit_code=meta.exit_code,
        host=meta.host,
        labels=dict(meta.labels),
        token_id=draft.token_id,
        idempotency_scope=idempotency_scope if idempotency_key else None,
        idempotency_key=idempotency_key,
        request_digest=request_digest,
        runner=draft.runner,
    )


def insert_pending(
    session: Session,
    *,
    draft: Draft,
    idempotency_scope: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> Analysis:
    row = _pending_row(
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
    row = None
    if is_valid_id(analysis_id):
        stmt = select(Analysis).where(Analysis.id == analysis_id.upper())
        if full:
            stmt = stmt.options(selectinload(Analysis.files), selectinload(Analysis.feedback))
        row = session.scalar(stmt)
    if row is None:
        raise NotFoundError(f"no analysis {analysis_id!r}")
    return row


def delete_analysis(session: Session, *, analysis_id: str) -> None:
    session.execute(delete(Analysis).where(Analysis.id == analysis_id))


def fail_analysis(session: Session, *, analysis_id: str, problem: dict[str, Any]) -> None:
    session.execute(
        update(Analysis)
        .where(Analysis.id == analysis_id, Analysis.status == "pending")
        .values(status="failed", error=problem, finished_at=utcnow())
    )


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size: int
    stored_size: int


@dataclass(frozen=True)
class FileRecord:
    name: str
    blob: StoredBlob


@dataclass(frozen=True)
class RuleRecord:
    rule_id: str
    version: int
    text: str
    failure_class: str
    title: str


def log_digest(shas: Sequence[str]) -> str:
    if len(shas) == 1:
        return shas[0]
    return hashlib.sha256("\n".join(sorted(shas)).encode()).hexdigest()


def _rule_version_ids(
    session: Session, *, rules: Iterable[RuleRecord], library_version: str
) -> dict[str, int]:
    """Ids of the rule versions (rule text as matched), inserting the ones not stored yet.

    Steady state is one SELECT: the library changes rarely, so the texts are almost always stored.
    """
    by_key = {(r.rule_id, r.version, hashlib.sha256(r.text.encode()).hexdigest()): r for r in rules}
    if not by_key:
        return {}

    def lookup() -> dict[tuple[str, int, str], int]:
        found = session.execute(
            select(RuleVersion.rule_id, RuleVersion.version, RuleVersion.text_sha256, RuleVersion.id).where(
                tuple_(RuleVersion.rule_id, RuleVersion.version, RuleVersion.text_sha256).in_(list(by_key))
            )
        )
        return {(rid, ver, sha): rv_id for rid, ver, sha, rv_id in found}

    ids = lookup()
    missing = [k for k in by_key if k not in ids]
    if missing:
        now = utcnow()
        _insert_ignore(
            session,
            RuleVersion,
            [
                {
                    "rule_id": rid,
                    "version": ver,
                    "text_sha256": sha,
                    "text": by_key[(rid, ver, sha)].text,
                    "failure_class": by_key[(rid, ver, sha)].failure_class,
                    "title": by_key[(rid, ver, sha)].title[:200],
                    "library_version": library_version,
                    "first_seen_at": now,
                }
                for rid, ver, sha in missing
            ],
        )
        ids = lookup()
    return {rid: rv_id for (rid, _ver, _sha), rv_id in ids.items()}


def _finding_hosts(row: Analysis, finding: dict[str, Any]) -> list[str]:
    """Where a finding happened: the hosts its lines name, else the host the hook reported."""
    named = [h[:255] for h in (finding.get("hosts") or [])]
    return list(dict.fromkeys(named or ([row.host[:255]] if row.host else [])))


def _root_hosts(row: Analysis, analysis: dict[str, Any]) -> list[str]:
    """Hosts of the findings that carry the root cause's fingerprint (recurrence counts them)."""
    out: list[str] = []
    for f in analysis.get("findings") or []:
        if fingerprint(f["rule_id"], f.get("captures") or {}) == row.fingerprint:
            out += _finding_hosts(row, f)
    return out


def _set_result(row: Analysis, analysis: dict[str, Any], library_version: str) -> None:
    root = analysis.get("root_cause")
    fw = analysis.get("framework") or {}
    row.result = analysis
    row.library_version = library_version
    row.root_class = root["failure_class"] if root else "unknown"
    row.root_kind = root["kind"] if root else "unknown"
    row.root_rule_id = root["rule_id"] if root else None
    row.fingerprint = fingerprint(root["rule_id"], root.get("captures") or {}) if root else None
    row.framework_detected = fw.get("name")


def _insert_findings(
    session: Session, results: Sequence[tuple[Analysis, dict[str, Any]]], rule_ids: dict[str, int]
) -> None:
    """Findings and their hosts of several analyses, two statements in all (Core: the ORM's
    unit of work cost more than the database did for these rows)."""
    finding_rows: list[dict[str, Any]] = []
    owners: list[tuple[Analysis, dict[str, Any]]] = []
    for row, analysis in results:
        for i, f in enumerate(analysis.get("findings") or []):
            finding_rows.append(
                {
                    "analysis_id": row.id,
                    "position": i,
                    "rule_version_id": rule_ids.get(f["rule_id"]),
                    "rule_id": f["rule_id"],
                    "rule_version": f["rule_version"],
                    "failure_class": f["failure_class"],
                    "kind": f["kind"],
                    "severity": f["severity"],
                    "role": f["role"],
                    "confidence": float(f["confidence"]),
                    "count": int(f["count"]),
                    "fingerprint": fingerprint(f["rule_id"], f.get("captures") or {}),
                }
            )
            owners.append((row, f))
    if not finding_rows:
        return
    table = table_of(Finding)
    if session.get_bind().dialect.name == "postgresql":
        _copy_findings(session, finding_rows, owners)
        return
    ids = session.scalars(
        insert(table).returning(table.c.id, sort_by_parameter_order=True), finding_rows
    ).all()
    host_rows = [
        {"finding_id": fid, "host": h}
        for fid, (row, f) in zip(ids, owners, strict=True)
        for h in _finding_hosts(row, f)
    ]
    if host_rows:
        session.execute(insert(table_of(FindingHost)), host_rows)


def _copy_findings(
    session: Session, rows: list[dict[str, Any]], owners: list[tuple[Analysis, dict[str, Any]]]
) -> None:
    """PostgreSQL: ids from the sequence, then COPY. A multi-row INSERT ... RETURNING of a write
    group is a new statement text for every group size, which psycopg parses in Python each
    time: 13 ms of a web process's CPU for 180 findings, against 1.6 ms this way."""
    ids = session.scalars(
        text(
            "SELECT nextval(seq) FROM "
            f"(SELECT pg_get_serial_sequence('{Finding.__tablename__}', 'id') AS seq) s, "
            "generate_series(1, :n)"
        ),
        {"n": len(rows)},
    ).all()
    columns = list(rows[0])  # every row is built with the same keys, in the same order
    cursor = session.connection().connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY {Finding.__tablename__} (id, {', '.join(columns)}) FROM STDIN") as copy:
        for fid, row in zip(ids, rows, strict=True):
            copy.write_row((fid, *row.values()))
    hosts = [(fid, h) for fid, (row, f) in zip(ids, owners, strict=True) for h in _finding_hosts(row, f)]
    if hosts:
        with cursor.copy(f"COPY {FindingHost.__tablename__} (finding_id, host) FROM STDIN") as copy:
            for item in hosts:
                copy.write_row(item)


@dataclass(frozen=True)
class Completion:
    """A finished scan to store on its pending analysis."""

    analysis_id: str
    analysis: dict[str, Any]
    library_version: str
    files: Sequence[FileRecord]
    config: FileRecord | None
    rules: Sequence[RuleRecord]
    draft: Draft | None = None  # set when the analysis has no row yet: it is inserted, done


def complete_analyses(
    session: Session,
    *,
    items: Sequence[Completion],
    recurrence_days: int = 7,
    suspect_min_jobs: int = 2,
) -> list[tuple[Analysis, Standing]]:
    """Store finished analyses together (the server groups the uploads that finish while it
    writes: one statement per table for the group instead of one set per upload). Each comes
    back with its standing; analyses of one group count as stored at the same moment."""
    stored = [c.analysis_id for c in items if c.draft is None]
    rows: dict[str, Analysis] = {}
    if stored:
        rows = {r.id: r for r in session.scalars(select(Analysis).where(Analysis.id.in_(stored)))}
    for c in items:
        if c.draft is not None:
            rows[c.analysis_id] = _pending_row(c.draft)
            session.add(rows[c.analysis_id])
        elif c.analysis_id not in rows:
            raise NotFoundError(f"analysis {c.analysis_id} vanished while it was running")
    pairs = [(rows[c.analysis_id], c) for c in items]
    # no autoflush: each row goes out in the one INSERT or UPDATE below, not one per query;
    # the rows referencing the analyses follow it
    with session.no_autoflush:
        _insert_blobs(session, pairs)
        duplicates = _describe_files(session, pairs)
        finished = utcnow()
        for row, c in pairs:
            _set_result(row, c.analysis, c.library_version)
            row.status = "done"
            row.finished_at = finished
            row.runner = None
    session.flush()
    for row, first in duplicates:
        row.duplicate_of_id = first
    if duplicates:
        session.flush()
    _insert_file_rows(session, pairs)
    _insert_results(session, pairs)
    pending = [
        x
        for x in (rollup.contribution_of(row, hosts=_root_hosts(row, c.analysis)) for row, c in pairs)
        if x is not None
    ]
    standings = _standings(
        session, pairs, pending=pending, days=recurrence_days, suspect_min_jobs=suspect_min_jobs
    )
    if pending:
        # last before commit: every upload of a common failure updates these same rows, and a
        # row stays locked from its update until commit
        rollup.count(session, pending)
    return [(row, standing) for (row, _), standing in zip(pairs, standings, strict=True)]


def _insert_blobs(session: Session, pairs: Sequence[tuple[Analysis, Completion]]) -> None:
    now = utcnow()
    blobs = {
        b.sha256: b
        for _, c in pairs
        for b in [f.blob for f in c.files] + ([c.config.blob] if c.config else [])
    }
    _insert_ignore(
        session,
        Blob,
        [
            {"sha256": b.sha256, "size": b.size, "stored_size": b.stored_size, "created_at": now}
            for b in sorted(blobs.values(), key=lambda b: b.sha256)
        ],
    )


def _describe_files(
    session: Session, pairs: Sequence[tuple[Analysis, Completion]]
) -> list[tuple[Analysis, str]]:
    """Each row's log digest, size and config, and which repeat a log stored before (duplicates).
    Returns the duplicate links to set after the rows are flushed."""
    digests = [log_digest([f.blob.sha256 for f in c.files]) for _, c in pairs]
    earlier = session.execute(
        select(Analysis.log_digest, func.min(Analysis.id))
        .where(
            Analysis.log_digest.in_(sorted(set(digests))),
            Analysis.id.not_in([row.id for row, _ in pairs]),
            Analysis.duplicate_of_id.is_(None),
        )
        .group_by(Analysis.log_digest)
    )
    first_of = {str(d): str(first) for d, first in earlier}
    inserted = {row.id for row, c in pairs if c.draft is not None}
    later: list[tuple[Analysis, str]] = []
    for (row, c), digest in zip(pairs, digests, strict=True):
        row.log_digest = digest
        row.log_bytes = sum(f.blob.size for f in c.files)
        if c.config:
            row.config_name = c.config.name[:255]
            row.config_sha256 = c.config.blob.sha256
        # the same log earlier in this group counts as stored before
        first = first_of.setdefault(digest, row.id)
        if first != row.id and first in inserted and c.draft is None:
            # one flush UPDATEs before it INSERTs: the row it points to would not exist yet
            later.append((row, first))
        else:
            row.duplicate_of_id = first if first != row.id else None
    return later


def _insert_file_rows(session: Session, pairs: Sequence[tuple[Analysis, Completion]]) -> None:
    file_rows = [
        {
            "analysis_id": row.id,
            "position": i,
            "name": f.name[:255],
            "blob_sha256": f.blob.sha256,
            "size": f.blob.size,
        }
        for row, c in pairs
        for i, f in enumerate(c.files)
    ]
    if file_rows:
        session.execute(insert(table_of(AnalysisFile)), file_rows)


def _insert_results(session: Session, pairs: Sequence[tuple[Analysis, Completion]]) -> None:
    """The findings and their hosts (the rows already hold their results)."""
    for version in sorted({c.library_version for _, c in pairs}):
        group = [(row, c) for row, c in pairs if c.library_version == version]
        rule_ids = _rule_version_ids(
            session, rules=[r for _, c in group for r in c.rules], library_version=version
        )
        _insert_findings(session, [(row, c.analysis) for row, c in group], rule_ids)


def _standings(
    session: Session,
    pairs: Sequence[tuple[Analysis, Completion]],
    *,
    pending: Sequence[rollup.Contribution],
    days: int,
    suspect_min_jobs: int,
) -> list[Standing]:
    """Recurrence (one query set per fingerprint) and suspect hosts (one query) of a group."""
    recs = {
        fp: rollup.recurrence(session, fingerprint_=fp, days=days, pending=pending)
        for fp in sorted({row.fingerprint for row, _ in pairs if row.fingerprint})
    }
    hardware = [set(result_hardware_hosts(row, c.analysis)) for row, c in pairs]
    every = sorted(set().union(*hardware))
    suspects = suspect_hosts(session, days=days, min_jobs=suspect_min_jobs, only=every) if every else []
    return [
        Standing(
            recs.get(row.fingerprint) if row.fingerprint else None, [s for s in suspects if s.host in mine]
        )
        for (row, _), mine in zip(pairs, hardware, strict=True)
    ]


def blob_referenced(session: Session, *, sha256: str) -> bool:
    return bool(
        session.scalar(
            select(
                or_(
                    exists().where(AnalysisFile.blob_sha256 == sha256),
                    exists().where(Analysis.config_sha256 == sha256),
                )
            )
        )
    )


def mark_interrupted(session: Session, *, host: str, alive: Iterable[int]) -> int:
    """Fail pending analyses whose server process (on this host) is gone."""
    alive_set = {f"{host}:{pid}" for pid in alive}
    rows = session.scalars(
        select(Analysis).where(Analysis.status == "pending", Analysis.runner.like(f"{host}:%"))
    ).all()
    n = 0
    for row in rows:
        if row.runner in alive_set:
            continue
        row.status = "failed"
        row.finished_at = utcnow()
        row.error = {
            "type": "/problems/interrupted",
            "title": "Interrupted",
            "status": 503,
            "detail": "the server stopped before this analysis finished; submit the log again",
        }
        n += 1
    return n


# --- re-triage ---------------------------------------------------------------------------------


def result_summary(result: dict[str, Any] | None) -> dict[str, Any]:
    root = (result or {}).get("root_cause")
    return {
        "failure_class": root["failure_class"] if root else "unknown",
        "rule_id": root["rule_id"] if root else None,
        "rule_version": root["rule_version"] if root else None,
        "title": root["title"] if root else None,
        "library_version": (result or {}).get("library_version"),
    }


def diff_results(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    before, after = result_summary(old), result_summary(new)
    old_rules = {(f["rule_id"], f["role"]) for f in (old or {}).get("findings") or []}
    new_rules = {(f["rule_id"], f["role"]) for f in new.get("findings") or []}
    old_ids = {r for r, _ in old_rules}
    new_ids = {r for r, _ in new_rules}
    return {
        "changed": before["failure_class"] != after["failure_class"]
        or before["rule_id"] != after["rule_id"]
        or old_rules != new_rules,
        "root_cause_changed": before["failure_class"] != after["failure_class"]
        or before["rule_id"] != after["rule_id"],
        "before": before,
        "after": after,
        "added_rules": sorted(new_ids - old_ids),
        "removed_rules": sorted(old_ids - new_ids),
    }


def apply_retriage(
    session: Session,
    *,
    analysis_id: str,
    analysis: dict[str, Any],
    library_version: str,
    rules: Iterable[RuleRecord],
) -> tuple[Analysis, dict[str, Any]]:
    row = session.get(Analysis, analysis_id)
    if row is None:
        raise NotFoundError(f"no analysis {analysis_id!r}")
    changes = diff_results(row.result, analysis)
    session.add(
        Retriage(
            analysis_id=row.id,
            from_library_version=row.library_version,
            to_library_version=library_version,
            from_class=row.root_class,
            to_class=changes["after"]["failure_class"],
            changes=changes,
        )
    )
    old = None
    if row.status == "done" and row.fingerprint:
        old = rollup.contribution_of(
            row, hosts=rollup.stored_root_hosts(session, analysis_id=row.id, fingerprint_=row.fingerprint)
        )
    rule_ids = _rule_version_ids(session, rules=rules, library_version=library_version)
    session.execute(delete(Finding).where(Finding.analysis_id == row.id))
    _set_result(row, analysis, library_version)
    _insert_findings(session, [(row, analysis)], rule_ids)
    row.retriaged_at = utcnow()
    new = rollup.contribution_of(row, hosts=_root_hosts(row, analysis))
    session.flush()
    if old != new:
        if old is not None:
            rollup.uncount(session, old)
        if new is not None:
            rollup.count(session, [new])
    return row, changes


def retriage_candidates(
    session: Session,
    *,
    since: dt.datetime | None,
    until: dt.datetime | None = None,
    failure_class: str | None = None,
    limit: int | None = None,
) -> list[str]:
    stmt = select(Analysis.id).where(Analysis.status == "done").order_by(Analysis.id)
    if since:
        stmt = stmt.where(Analysis.created_at >= since)
    if until:
        stmt = stmt.where(Analysis.created_at < until)
    if failure_class:
        stmt = stmt.where(Analysis.root_class == failure_class)
    if limit:
        stmt = stmt.limit(limit)
    return list(session.scalars(stmt))


def retriages_of(session: Session, *, analysis_id: str) -> list[Retriage]:
    return list(
        session.scalars(select(Retriage).where(Retriage.analysis_id == analysis_id).order_by(Retriage.id))
    )


# --- listing -----------------------------------------------------------------------------------


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


def _filtered(stmt: Select[Any], f: AnalysisFilter) -> Select[Any]:
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
    session: Session, *, filters: AnalysisFilter, limit: int, cursor: str | None = None
) -> tuple[list[Analysis], str | None]:
    stmt = _filtered(select(Analysis), filters).order_by(Analysis.id.desc()).limit(limit + 1)
    if cursor:
        stmt = stmt.where(Analysis.id < decode_cursor(cursor))
    rows = list(session.scalars(stmt))
    if filters.labels:  # JSON containment differs by backend: filter labels in Python
        rows = [r for r in rows if all((r.labels or {}).get(k) == v for k, v in filters.labels.items())]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(rows[-1].id) if more and rows else None)


# --- feedback ----------------------------------------------------------------------------------


def add_feedback(
    session: Session,
    *,
    analysis_id: str,
    verdict: str,
    correct_class: str | None,
    comment: str | None,
    token_id: int | None,
) -> Feedback:
    row = Feedback(
        analysis_id=analysis_id,
        verdict=verdict,
        correct_class=correct_class,
        comment=comment,
        token_id=token_id,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


# --- recurrence, suspect hosts, stats -----------------------------------------------------------


def _iso(value: Any) -> str:
    return _aware(value).isoformat().replace("+00:00", "Z")


def _aware(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    # SQLite returns MIN()/MAX() of a datetime column as text
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


@dataclass
class SuspectHost:
    host: str
    failures: int
    jobs: int
    classes: list[str]
    first_seen: dt.datetime
    last_seen: dt.datetime
    latest_analysis_id: str


def suspect_hosts(
    session: Session,
    *,
    days: int,
    min_jobs: int,
    now: dt.datetime | None = None,
    only: Iterable[str] | None = None,
) -> list[SuspectHost]:
    """Hosts hit by hardware-class failures in at least `min_jobs` distinct jobs in the window."""
    now = now or utcnow()
    stmt = (
        select(FindingHost.host, Analysis.id, Analysis.job_id, Analysis.created_at, Finding.failure_class)
        .join(Finding, Finding.id == FindingHost.finding_id)
        .join(Analysis, Analysis.id == Finding.analysis_id)
        .where(
            Finding.kind == "hardware",
            Analysis.status == "done",
            Analysis.duplicate_of_id.is_(None),
            Analysis.created_at >= now - dt.timedelta(days=days),
        )
    )
    hosts_filter = list(only) if only is not None else None
    if hosts_filter is not None:
        if not hosts_filter:
            return []
        stmt = stmt.where(FindingHost.host.in_(hosts_filter))
    per_host: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"analyses": set(), "jobs": set(), "classes": Counter(), "times": [], "latest": ""}
    )
    for host, aid, job_id, created, fclass in session.execute(stmt):
        h = per_host[host]
        h["analyses"].add(aid)
        h["jobs"].add(job_id or aid)
        h["classes"][fclass] += 1
        h["times"].append(_aware(created))
        h["latest"] = max(h["latest"], aid)
    out = [
        SuspectHost(
            host=host,
            failures=len(h["analyses"]),
            jobs=len(h["jobs"]),
            classes=[c for c, _ in h["classes"].most_common()],
            first_seen=min(h["times"]),
            last_seen=max(h["times"]),
            latest_analysis_id=h["latest"],
        )
        for host, h in per_host.items()
        if len(h["jobs"]) >= min_jobs
    ]
    return sorted(out, key=lambda s: (-s.jobs, -s.failures, s.host))


@dataclass(frozen=True)
class Standing:
    """How an analysis' failure stands in the history: recurrence and suspect hosts."""

    recurrence: rollup.Recurrence | None = None
    suspects: list[SuspectHost] = field(default_factory=list)


def hardware_hosts(session: Session, *, analysis_id: str) -> list[str]:
    return sorted(
        set(
            session.scalars(
                select(FindingHost.host)
                .join(Finding, Finding.id == FindingHost.finding_id)
                .where(Finding.analysis_id == analysis_id, Finding.kind == "hardware")
            )
        )
    )


def result_hardware_hosts(row: Analysis, analysis: dict[str, Any]) -> list[str]:
    """The hosts `hardware_hosts` would read back once `analysis` is stored for `row`."""
    return sorted(
        {h for f in analysis.get("findings") or [] if f["kind"] == "hardware" for h in _finding_hosts(row, f)}
    )


def standing_of(
    session: Session,
    *,
    row: Analysis,
    days: int,
    suspect_min_jobs: int,
) -> Standing:
    """Recurrence and suspect hosts of a stored, finished analysis."""
    if row.status != "done" or row.result is None:
        return Standing()
    rec = rollup.recurrence(session, fingerprint_=row.fingerprint, days=days) if row.fingerprint else None
    hosts = hardware_hosts(session, analysis_id=row.id)
    suspects = suspect_hosts(session, days=days, min_jobs=suspect_min_jobs, only=hosts) if hosts else []
    return Standing(rec, suspects)


def stats(
    session: Session,
    *,
    since: dt.datetime,
    until: dt.datetime,
    recurrence_days: int,
    suspect_min_jobs: int,
    top: int = 10,
) -> dict[str, Any]:
    window = (Analysis.created_at >= since, Analysis.created_at < until)
    done = (*window, Analysis.status == "done")
    status_counts = dict(
        session.execute(select(Analysis.status, func.count()).where(*window).group_by(Analysis.status)).all()
    )
    per_class = dict(
        session.execute(
            select(Analysis.root_class, func.count()).where(*done).group_by(Analysis.root_class)
        ).all()
    )
    per_kind = dict(
        session.execute(
            select(Analysis.root_kind, func.count()).where(*done).group_by(Analysis.root_kind)
        ).all()
    )
    is_pg = session.get_bind().dialect.name == "postgresql"
    day = func.date(func.timezone("UTC", Analysis.created_at)) if is_pg else func.date(Analysis.created_at)
    per_day_rows = session.execute(
        select(day, Analysis.root_class, func.count()).where(*done).group_by(day, Analysis.root_class)
    ).all()
    per_day: dict[str, dict[str, int]] = {}
    for d, root_class, n in per_day_rows:
        key = str(d)[:10]
        slot = per_day.setdefault(key, {"total": 0, "unknown": 0})
        slot["total"] += int(n)
        if root_class == "unknown":
            slot["unknown"] += int(n)
    total_done = sum(int(v) for v in per_class.values())
    unknown = int(per_class.get("unknown", 0))
    recurring_rows = session.execute(
        select(
            Analysis.fingerprint,
            func.count(),
            func.min(Analysis.created_at),
            func.max(Analysis.created_at),
            func.max(Analysis.id),
            func.count(func.distinct(func.coalesce(Analysis.job_id, Analysis.id))),
        )
        .where(*done, Analysis.fingerprint.is_not(None), Analysis.duplicate_of_id.is_(None))
        .group_by(Analysis.fingerprint)
        .order_by(func.count().desc(), func.max(Analysis.id).desc())
        .limit(top)
    ).all()
    recurring = []
    for fp, n, first, last, latest, jobs in recurring_rows:
        latest_row = session.get(Analysis, latest)
        root = (latest_row.result or {}).get("root_cause") if latest_row else None
        recurring.append(
            {
                "fingerprint": fp,
                "count": int(n),
                "jobs": int(jobs),
                "failure_class": latest_row.root_class if latest_row else None,
                "rule_id": latest_row.root_rule_id if latest_row else None,
                "title": root["title"] if root else None,
                "first_seen": _iso(first),
                "last_seen": _iso(last),
                "latest_analysis_id": latest,
            }
        )
    feedback_counts = dict(
        session.execute(
            select(Feedback.verdict, func.count())
            .join(Analysis, Analysis.id == Feedback.analysis_id)
            .where(*window)
            .group_by(Feedback.verdict)
        ).all()
    )
    suspects = suspect_hosts(session, days=recurrence_days, min_jobs=suspect_min_jobs, now=until)
    return {
        "since": _iso(since),
        "until": _iso(until),
        "analyses": int(sum(status_counts.values())),
        "by_status": {k: int(v) for k, v in status_counts.items()},
        "by_class": {k: int(v) for k, v in sorted(per_class.items(), key=lambda kv: (-kv[1], kv[0]))},
        "by_kind": {k: int(v) for k, v in sorted(per_kind.items(), key=lambda kv: (-kv[1], kv[0]))},
        "by_day": dict(sorted(per_day.items())),
        "unknown_rate": round(unknown / total_done, 4) if total_done else None,
        "top_recurring": recurring,
        "suspect_hosts": [
            {
                "host": s.host,
                "failures": s.failures,
                "jobs": s.jobs,
                "classes": s.classes,
                "first_seen": _iso(s.first_seen),
                "last_seen": _iso(s.last_seen),
                "latest_analysis_id": s.latest_analysis_id,
            }
            for s in suspects
        ],
        "feedback": {k: int(v) for k, v in feedback_counts.items()},
    }


# --- rule versions -----------------------------------------------------------------------------


def rule_versions(session: Session, *, rule_id: str) -> list[RuleVersion]:
    return list(
        session.scalars(
            select(RuleVersion)
            .where(RuleVersion.rule_id == rule_id)
            .order_by(RuleVersion.version, RuleVersion.id)
        )
    )


def rule_version_text(session: Session, *, rule_version_id: int) -> RuleVersion | None:
    return session.get(RuleVersion, rule_version_id)


def finding_rule_versions(session: Session, *, analysis_id: str) -> dict[str, RuleVersion]:
    rows = session.execute(
        select(Finding.rule_id, RuleVersion)
        .join(RuleVersion, RuleVersion.id == Finding.rule_version_id)
        .where(Finding.analysis_id == analysis_id)
    ).all()
    return {rid: rv for rid, rv in rows}


# --- tokens ------------------------------------------------------------------------------------


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    session: Session, *, name: str, scopes: Sequence[str], expires_at: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise UsageError(f"scopes must be among {', '.join(SCOPES)} (got {', '.join(scopes) or 'none'})")
    if session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None:
        raise ConflictError(f"a token named {name!r} exists; pick another name or revoke it first")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        name=name,
        prefix=secret[:10],
        token_hash=hash_token(secret),
        scopes=" ".join(s for s in SCOPES if s in scopes),
        created_at=utcnow(),
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return row, secret


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def revoke_token(session: Session, *, name_or_id: str) -> ApiToken:
    cond = ApiToken.name == name_or_id
    if name_or_id.isdigit():
        cond = or_(cond, ApiToken.id == int(name_or_id))
    row = session.scalar(select(ApiToken).where(cond))
    if row is None:
        raise NotFoundError(f"no token {name_or_id!r}; `logtriage tokens list` shows them")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return row


def token_by_hash(session: Session, *, token_hash: str) -> ApiToken | None:
    """The unrevoked token with this hash, expired or not (callers check expiry at use)."""
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash))
    return None if row is None or row.revoked_at is not None else row


def token_for_secret(session: Session, *, secret: str) -> ApiToken | None:
    row = token_by_hash(session, token_hash=hash_token(secret))
    if row is None or (row.expires_at is not None and row.expires_at <= utcnow()):
        return None
    return row


def any_active_token(session: Session) -> bool:
    now = utcnow()
    return bool(
        session.scalar(
            select(
                exists().where(
                    ApiToken.revoked_at.is_(None),
                    or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
                )
            )
        )
    )


_LAST_TOUCH: dict[str, float] = {}  # token hash -> when this process last recorded its use


def touch_due(token_hash: str) -> bool:
    """Whether this process should record the token's use now: at most once a minute per token,
    so a fleet of hooks sharing one token does not queue on updates of its row. (Keyed by the
    hash, not the id: ids repeat across databases.)"""
    return time.monotonic() - _LAST_TOUCH.get(token_hash, 0) >= 60


def touch_token(session: Session, *, token_id: int, token_hash: str) -> None:
    """Record last use (callers check `touch_due` first: no write transaction when not due)."""
    _LAST_TOUCH[token_hash] = time.monotonic()
    session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=utcnow()))


# --- housekeeping ------------------------------------------------------------------------------


def known_blobs(session: Session) -> set[str]:
    return set(session.scalars(select(Blob.sha256)))


def unreferenced_blobs(session: Session) -> list[str]:
    stmt = select(Blob.sha256).where(
        ~exists().where(AnalysisFile.blob_sha256 == Blob.sha256),
        ~exists().where(and_(Analysis.config_sha256 == Blob.sha256)),
    )
    return list(session.scalars(stmt))


def delete_blob_rows(session: Session, *, shas: Sequence[str]) -> None:
    if shas:
        session.execute(delete(Blob).where(Blob.sha256.in_(list(shas))))
