"""Re-triage: a stored analysis' result replaced, with what changed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.db import rollup
from app.db.models import (
    Analysis,
    AnalysisSignal,
    Finding,
    OddRankHost,
    Retriage,
    utcnow,
)
from app.db.repo.completion import (
    RuleRecord,
    insert_findings,
    insert_odd_hosts,
    insert_signals,
    root_hosts,
    rule_version_ids,
    set_result,
)
from app.errors import NotFoundError


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
    rule_ids = rule_version_ids(session, rules=rules, library_version=library_version)
    session.execute(delete(Finding).where(Finding.analysis_id == row.id))
    session.execute(delete(OddRankHost).where(OddRankHost.analysis_id == row.id))
    session.execute(delete(AnalysisSignal).where(AnalysisSignal.analysis_id == row.id))
    set_result(row, analysis, library_version)
    insert_findings(session, [(row, analysis)], rule_ids)
    insert_odd_hosts(session, [(row, analysis)])
    insert_signals(session, [(row, analysis)])
    row.retriaged_at = utcnow()
    new = rollup.contribution_of(row, hosts=root_hosts(row, analysis))
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
