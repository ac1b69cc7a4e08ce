"""Storing finished analyses: results, findings, files, blobs, rule versions, duplicates."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import bindparam, exists, func, insert, or_, select, text, tuple_
from sqlalchemy.orm import Session

from app.db import rollup
from app.db.models import (
    Analysis,
    AnalysisFile,
    AnalysisSignal,
    Blob,
    Finding,
    FindingHost,
    OddRankHost,
    RuleVersion,
    table_of,
    utcnow,
)
from app.db.repo.common import finding_hosts, insert_ignore
from app.db.repo.lifecycle import Draft, pending_row
from app.db.repo.outcomes import Counts, outcome_counts
from app.db.repo.standing import Standing, result_hardware_hosts, standing_of, suspect_hosts
from app.engine import fingerprint as fingerprinting
from app.engine.pipeline.verdict import real_host
from app.errors import NotFoundError


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size: int
    stored_size: int
    # its frames (app.blobstore.base.FrameIndex), kept only when this upload stored the blob
    line_index: Sequence[Sequence[int]] | None = None


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


def rule_version_ids(
    session: Session, *, rules: Iterable[RuleRecord], library_version: str
) -> dict[str, int]:
    """Ids of the rule versions (rule text as matched), inserting the ones not stored yet.

    Steady state is one SELECT: the library changes rarely, so the texts are almost always stored.
    """
    by_key = {(r.rule_id, r.version, hashlib.sha256(r.text.encode()).hexdigest()): r for r in rules}
    if not by_key:
        return {}

    def lookup() -> dict[tuple[str, int, str], int]:
        found = session.connection().execute(_stmts().rule_versions, {"keys": list(by_key)})
        return {(rid, ver, sha): rv_id for rid, ver, sha, rv_id in found}

    ids = lookup()
    missing = [k for k in by_key if k not in ids]
    if missing:
        now = utcnow()
        insert_ignore(
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


@functools.cache
def _stmts() -> SimpleNamespace:
    """The statements every stored upload runs, built once (ARCHITECTURE.md, "A hook's
    statements compile once")."""
    rv, an = table_of(RuleVersion), Analysis
    return SimpleNamespace(
        rule_versions=select(rv.c.rule_id, rv.c.version, rv.c.text_sha256, rv.c.id).where(
            tuple_(rv.c.rule_id, rv.c.version, rv.c.text_sha256).in_(bindparam("keys", expanding=True))
        ),
        # locked: two runs of one analysis (a hook's retry re-ran it while the first run, taken
        # for dead, was still alive) finish one after the other, and the second finds it done
        lock_rows=select(an).where(an.id.in_(bindparam("ids", expanding=True))).with_for_update(),
        earlier=select(an.log_digest, func.min(an.id))
        .where(
            an.log_digest.in_(bindparam("digests", expanding=True)),
            an.id.not_in(bindparam("ids", expanding=True)),
            an.duplicate_of_id.is_(None),
        )
        .group_by(an.log_digest),
        finding_ids=text(
            "SELECT nextval(seq) FROM "
            f"(SELECT pg_get_serial_sequence('{Finding.__tablename__}', 'id') AS seq) s, "
            "generate_series(1, :n)"
        ),
        files=insert(table_of(AnalysisFile)),
        signals=insert(table_of(AnalysisSignal)),
        odd_hosts=insert(table_of(OddRankHost)),
        findings=insert(table_of(Finding)).returning(table_of(Finding).c.id, sort_by_parameter_order=True),
        finding_hosts=insert(table_of(FindingHost)),
    )


def root_hosts(row: Analysis, analysis: dict[str, Any]) -> list[str]:
    """Hosts of the findings that carry the root cause's fingerprint (recurrence counts them)."""
    out: list[str] = []
    for f in analysis.get("findings") or []:
        fp = fingerprinting.fingerprint(
            f["rule_id"], f.get("captures") or {}, version=row.fingerprint_version
        )
        if fp == row.fingerprint:
            out += finding_hosts(row, f)
    return out


def set_result(row: Analysis, analysis: dict[str, Any], library_version: str) -> None:
    root = analysis.get("root_cause")
    fw = analysis.get("framework") or {}
    row.result = analysis
    row.library_version = library_version
    row.root_class = root["failure_class"] if root else "unknown"
    row.root_kind = root["kind"] if root else "unknown"
    row.root_rule_id = root["rule_id"] if root else None
    row.root_title = str(root["title"])[:300] if root else None
    # findings' fingerprints (insert_findings) are computed with the same, current, version
    row.fingerprint_version = fingerprinting.CURRENT
    row.fingerprint = (
        fingerprinting.fingerprint(root["rule_id"], root.get("captures") or {}) if root else None
    )
    row.framework_detected = fw.get("name")


# the timeline's lead verdicts that name the rank(s) the others waited for
_ODD_KINDS = frozenset({"straggler", "silent_rank", "vanished", "first_collective"})


def odd_rank_hosts(analysis: dict[str, Any]) -> list[str]:
    """Hosts of the rank(s) a timed-out job waited for, as its timeline names them (none when
    the root cause is a hardware fault: that host is counted as such)."""
    root = analysis.get("root_cause") or {}
    tl = analysis.get("timeline") or {}
    lead = tl.get("verdict") or {}
    if root.get("failure_class") != "nccl.collective_timeout" or lead.get("kind") not in _ODD_KINDS:
        return []
    ranks = set(lead.get("ranks") or [])
    if not ranks or len(ranks) >= len(tl.get("ranks") or []):
        return []  # every rank named: no odd one
    hosts = {h for r in tl.get("ranks") or [] if r.get("rank") in ranks for h in r.get("hosts") or []}
    return sorted(h for h in hosts if real_host(h))


def insert_odd_hosts(session: Session, results: Sequence[tuple[Analysis, dict[str, Any]]]) -> None:
    rows = [{"analysis_id": row.id, "host": h} for row, a in results for h in odd_rank_hosts(a)]
    if rows:
        session.connection().execute(_stmts().odd_hosts, rows)


def _no_nul(text: str) -> str:
    # PostgreSQL refuses NUL in text; a log line may hold one (shown as U+FFFD, as elsewhere)
    return text.replace("\x00", "\ufffd")


def insert_signals(session: Session, results: Sequence[tuple[Analysis, dict[str, Any]]]) -> None:
    """Each analysis' signal lines (app.engine.signals), in their order."""
    rows = [
        {
            "analysis_id": row.id,
            "position": i,
            "key": str(sig.get("key") or "")[:16],
            "template": _no_nul(str(sig.get("template") or "")),
            "file": _no_nul(str(sig.get("file") or "")),
            "line": int(sig.get("line") or 0),
            "text": _no_nul(str(sig.get("text") or "")),
            "weight": int(sig.get("weight") or 0),
        }
        for row, a in results
        for i, sig in enumerate(a.get("signals") or [])
    ]
    if rows:
        session.connection().execute(_stmts().signals, rows)


def insert_findings(
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
                    "fingerprint": fingerprinting.fingerprint(f["rule_id"], f.get("captures") or {}),
                }
            )
            owners.append((row, f))
    if not finding_rows:
        return
    if session.get_bind().dialect.name == "postgresql":
        _copy_findings(session, finding_rows, owners)
        return
    ids = session.connection().execute(_stmts().findings, finding_rows).scalars().all()
    host_rows = [
        {"finding_id": fid, "host": h}
        for fid, (row, f) in zip(ids, owners, strict=True)
        for h in finding_hosts(row, f)
    ]
    if host_rows:
        session.connection().execute(_stmts().finding_hosts, host_rows)


def _copy_findings(
    session: Session, rows: list[dict[str, Any]], owners: list[tuple[Analysis, dict[str, Any]]]
) -> None:
    """PostgreSQL: ids from the sequence, then COPY. A multi-row INSERT ... RETURNING of a write
    group is a new statement text for every group size, which psycopg parses in Python each
    time: 13 ms of a web process's CPU for 180 findings, against 1.6 ms this way."""
    ids = session.connection().execute(_stmts().finding_ids, {"n": len(rows)}).scalars().all()
    columns = list(rows[0])  # every row is built with the same keys, in the same order
    cursor = session.connection().connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY {Finding.__tablename__} (id, {', '.join(columns)}) FROM STDIN") as copy:
        for fid, row in zip(ids, rows, strict=True):
            copy.write_row((fid, *row.values()))
    hosts = [(fid, h) for fid, (row, f) in zip(ids, owners, strict=True) for h in finding_hosts(row, f)]
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
        rows = {r.id: r for r in session.scalars(_stmts().lock_rows, {"ids": stored})}
    for c in items:
        if c.draft is None and c.analysis_id not in rows:
            raise NotFoundError(f"analysis {c.analysis_id} vanished while it was running")
    # stored already by the other run: this one's result is the same log's, left as it is
    done_before = {c.analysis_id for c in items if c.draft is None and rows[c.analysis_id].status == "done"}
    todo = [c for c in items if c.analysis_id not in done_before]
    for c in todo:
        if c.draft is not None:
            rows[c.analysis_id] = pending_row(c.draft)
            session.add(rows[c.analysis_id])
    pairs = [(rows[c.analysis_id], c) for c in todo]
    out = {
        aid: (
            rows[aid],
            standing_of(session, row=rows[aid], days=recurrence_days, suspect_min_jobs=suspect_min_jobs),
        )
        for aid in done_before
    }
    if not pairs:
        return [out[c.analysis_id] for c in items]
    # no autoflush: each row goes out in the one INSERT or UPDATE below, not one per query;
    # the rows referencing the analyses follow it
    with session.no_autoflush:
        _insert_blobs(session, pairs)
        duplicates = _describe_files(session, pairs)
        finished = utcnow()
        for row, c in pairs:
            set_result(row, c.analysis, c.library_version)
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
        for x in (rollup.contribution_of(row, hosts=root_hosts(row, c.analysis)) for row, c in pairs)
        if x is not None
    ]
    standings = _standings(
        session, pairs, pending=pending, days=recurrence_days, suspect_min_jobs=suspect_min_jobs
    )
    if pending:
        # last before commit: every upload of a common failure updates these same rows, and a
        # row stays locked from its update until commit
        rollup.count(session, pending)
    out.update({row.id: (row, standing) for (row, _), standing in zip(pairs, standings, strict=True)})
    return [out[c.analysis_id] for c in items]


def _insert_blobs(session: Session, pairs: Sequence[tuple[Analysis, Completion]]) -> None:
    now = utcnow()
    blobs: dict[str, StoredBlob] = {}
    for _, c in pairs:
        for b in [f.blob for f in c.files] + ([c.config.blob] if c.config else []):
            if blobs.get(b.sha256) is None or blobs[b.sha256].line_index is None:
                blobs[b.sha256] = b  # the upload that stored it knows its frames
    insert_ignore(
        session,
        Blob,
        [
            {
                "sha256": b.sha256,
                "size": b.size,
                "stored_size": b.stored_size,
                "created_at": now,
                "line_index": [list(e) for e in b.line_index] if b.line_index is not None else None,
            }
            for b in sorted(blobs.values(), key=lambda b: b.sha256)
        ],
    )


def _describe_files(
    session: Session, pairs: Sequence[tuple[Analysis, Completion]]
) -> list[tuple[Analysis, str]]:
    """Each row's log digest, size and config, and which repeat a log stored before (duplicates).
    Returns the duplicate links to set after the rows are flushed."""
    digests = [log_digest([f.blob.sha256 for f in c.files]) for _, c in pairs]
    earlier = session.connection().execute(
        _stmts().earlier, {"digests": sorted(set(digests)), "ids": [row.id for row, _ in pairs]}
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
        session.connection().execute(_stmts().files, file_rows)


def _insert_results(session: Session, pairs: Sequence[tuple[Analysis, Completion]]) -> None:
    """The findings and their hosts (the rows already hold their results)."""
    for version in sorted({c.library_version for _, c in pairs}):
        group = [(row, c) for row, c in pairs if c.library_version == version]
        rule_ids = rule_version_ids(
            session, rules=[r for _, c in group for r in c.rules], library_version=version
        )
        insert_findings(session, [(row, c.analysis) for row, c in group], rule_ids)
        insert_odd_hosts(session, [(row, c.analysis) for row, c in group])
        insert_signals(session, [(row, c.analysis) for row, c in group])


def _standings(
    session: Session,
    pairs: Sequence[tuple[Analysis, Completion]],
    *,
    pending: Sequence[rollup.Contribution],
    days: int,
    suspect_min_jobs: int,
) -> list[Standing]:
    """Recurrence (one query set per fingerprint) and suspect hosts (one query) of a group."""
    keys = {
        row.id: (row.fingerprint, tuple(rollup.other_versions(row))) for row, _ in pairs if row.fingerprint
    }
    recs = {
        (fp, also): rollup.recurrence(session, fingerprint_=fp, days=days, pending=pending, also=also)
        for fp, also in sorted(set(keys.values()))
    }
    hardware = [
        set(result_hardware_hosts(row, c.analysis)) | set(odd_rank_hosts(c.analysis)) for row, c in pairs
    ]
    every = sorted(set().union(*hardware))
    suspects = suspect_hosts(session, days=days, min_jobs=suspect_min_jobs, only=every) if every else []
    # one count per distinct root failure of the group: the history its action shows
    kinds = {
        (row.root_class, row.root_rule_id, row.fingerprint)
        for row, _ in pairs
        if row.root_class and row.root_class != "unknown"
    }
    counts: dict[tuple[str | None, str | None, str | None], Counts] = {
        k: outcome_counts(session, failure_class=k[0] or "", rule_id=k[1], fingerprint=k[2])
        for k in sorted(kinds, key=str)
    }
    return [
        Standing(
            recs[keys[row.id]] if row.id in keys else None,
            [s for s in suspects if s.host in mine],
            counts.get((row.root_class, row.root_rule_id, row.fingerprint)),
        )
        for (row, _), mine in zip(pairs, hardware, strict=True)
    ]


def blob_line_index(session: Session, *, sha256: str) -> list[list[int]] | None:
    """The stored blob's frame index (None: one frame, or no row)."""
    return session.scalar(select(Blob.line_index).where(Blob.sha256 == sha256))


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


def pending_runner_pids(session: Session, *, host: str) -> set[int]:
    """The process ids of this host's servers that have analyses pending (runner "host:pid")."""
    runners = session.scalars(
        select(Analysis.runner)
        .where(Analysis.status == "pending", Analysis.runner.like(f"{host}:%"))
        .distinct()
    )
    return {int(r.rsplit(":", 1)[1]) for r in runners if r and r.rsplit(":", 1)[-1].isdigit()}


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
            "detail": "the server stopped before this analysis finished; send the same request again "
            "(with the same Idempotency-Key it runs again under the same id)",
        }
        n += 1
    return n
