"""Recurrence, suspect hosts and the stats/trends of the history."""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, case, func, or_, select, union
from sqlalchemy.orm import Session

from app.db import rollup
from app.db.models import (
    Analysis,
    Feedback,
    Finding,
    FindingHost,
    HostClearance,
    OddRankHost,
    table_of,
    utcnow,
)
from app.db.repo.common import aware_utc, finding_hosts, iso_utc
from app.db.repo.outcomes import Counts, outcome_counts

# how the ledger names a host's timeouts as the odd rank among its classes
ODD_RANK_CLASS = "nccl.collective_timeout (the rank waited for)"


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
    """Hosts hit by hardware-class failures, or running the rank a timed-out job waited for, in at
    least `min_jobs` distinct jobs in the window (since an operator last cleared them)."""
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
    # an operator's clearance (repaired, replaced) restarts a host's count
    cleared = HostClearance.__table__
    stmt = stmt.outerjoin(cleared, cleared.c.host == FindingHost.host).where(
        or_(cleared.c.cleared_at.is_(None), Analysis.created_at > cleared.c.cleared_at)
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
        h["times"].append(aware_utc(created))
        h["latest"] = max(h["latest"], aid)
    # the hosts of the ranks timed-out jobs waited for: one such job is a hang, the same host
    # in several is the machine (the same window, clearances and duplicates as above)
    odd = (
        select(OddRankHost.host, Analysis.id, Analysis.job_id, Analysis.created_at)
        .join(Analysis, Analysis.id == OddRankHost.analysis_id)
        .outerjoin(cleared, cleared.c.host == OddRankHost.host)
        .where(
            Analysis.status == "done",
            Analysis.duplicate_of_id.is_(None),
            Analysis.created_at >= now - dt.timedelta(days=days),
            or_(cleared.c.cleared_at.is_(None), Analysis.created_at > cleared.c.cleared_at),
        )
    )
    if hosts_filter is not None:
        odd = odd.where(OddRankHost.host.in_(hosts_filter))
    for host, aid, job_id, created in session.execute(odd):
        h = per_host[host]
        h["analyses"].add(aid)
        h["jobs"].add(job_id or aid)
        h["classes"][ODD_RANK_CLASS] += 1
        h["times"].append(aware_utc(created))
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
    """How an analysis' failure stands in the history: recurrence, suspect hosts, and how reruns
    after failures like it ended (its action's history)."""

    recurrence: rollup.Recurrence | None = None
    suspects: list[SuspectHost] = field(default_factory=list)
    outcomes: Counts | None = None


@functools.cache
def _hosts_of() -> Any:
    """The hosts an analysis' standing looks up: its hardware findings' and the odd ranks', in
    one statement built once (every poll of an analysis reads its standing)."""
    fh, f, odd = table_of(FindingHost), table_of(Finding), table_of(OddRankHost)
    the_id: Any = bindparam("id")
    hardware = (
        select(fh.c.host)
        .join(f, f.c.id == fh.c.finding_id)
        .where(f.c.analysis_id == the_id, f.c.kind == "hardware")
    )
    return union(hardware, select(odd.c.host).where(odd.c.analysis_id == the_id))


def result_hardware_hosts(row: Analysis, analysis: dict[str, Any]) -> list[str]:
    """The hardware hosts `_hosts_of` would read back once `analysis` is stored for `row`."""
    return sorted(
        {h for f in analysis.get("findings") or [] if f["kind"] == "hardware" for h in finding_hosts(row, f)}
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
    rec = (
        rollup.recurrence(
            session,
            fingerprint_=row.fingerprint,
            days=days,
            version=row.fingerprint_version,
            also=rollup.other_versions(row),
        )
        if row.fingerprint
        else None
    )
    hosts = sorted(set(session.connection().execute(_hosts_of(), {"id": row.id}).scalars()))
    suspects = suspect_hosts(session, days=days, min_jobs=suspect_min_jobs, only=hosts) if hosts else []
    outcomes = (
        outcome_counts(
            session, failure_class=row.root_class, rule_id=row.root_rule_id, fingerprint=row.fingerprint
        )
        if row.root_class and row.root_class != "unknown"
        else None
    )
    return Standing(rec, suspects, outcomes)


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
    is_pg = session.get_bind().dialect.name == "postgresql"
    day = func.date(func.timezone("UTC", Analysis.created_at)) if is_pg else func.date(Analysis.created_at)
    # one pass over the window for the status, class, kind and day counts (four scans before)
    counted = session.execute(
        select(Analysis.status, day, Analysis.root_class, Analysis.root_kind, func.count())
        .where(*window)
        .group_by(Analysis.status, day, Analysis.root_class, Analysis.root_kind)
    ).all()
    status_counts: Counter[str] = Counter()
    per_class: Counter[Any] = Counter()
    per_kind: Counter[Any] = Counter()
    per_day: dict[str, dict[str, int]] = {}
    per_day_class: dict[str, dict[str, int]] = {}
    for status, d, root_class, root_kind, n in counted:
        status_counts[str(status)] += int(n)
        if status != "done":
            continue
        per_class[root_class] += int(n)
        per_kind[root_kind] += int(n)
        key = str(d)[:10]
        slot = per_day.setdefault(key, {"total": 0, "unknown": 0})
        slot["total"] += int(n)
        if root_class == "unknown":
            slot["unknown"] += int(n)
        by = per_day_class.setdefault(key, {})
        by[str(root_class)] = by.get(str(root_class), 0) + int(n)
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
    # the latest analysis of each: its denormalised columns, one query (not its result JSON)
    latest_cols = {
        aid: (cls, rid, title)
        for aid, cls, rid, title in session.execute(
            select(Analysis.id, Analysis.root_class, Analysis.root_rule_id, Analysis.root_title).where(
                Analysis.id.in_([r[4] for r in recurring_rows])
            )
        )
    }
    recurring = []
    for fp, n, first, last, latest, jobs in recurring_rows:
        cls, rid, title = latest_cols.get(latest, (None, None, None))
        recurring.append(
            {
                "fingerprint": fp,
                "count": int(n),
                "jobs": int(jobs),
                "failure_class": cls,
                "rule_id": rid,
                "title": title if cls not in (None, "unknown") else None,
                "first_seen": iso_utc(first),
                "last_seen": iso_utc(last),
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
        "since": iso_utc(since),
        "until": iso_utc(until),
        "analyses": int(sum(status_counts.values())),
        "by_status": {k: int(v) for k, v in status_counts.items()},
        "by_class": {k: int(v) for k, v in sorted(per_class.items(), key=lambda kv: (-kv[1], kv[0]))},
        "by_kind": {k: int(v) for k, v in sorted(per_kind.items(), key=lambda kv: (-kv[1], kv[0]))},
        "by_day": dict(sorted(per_day.items())),
        "by_day_class": dict(sorted(per_day_class.items())),
        "unknown_rate": round(unknown / total_done, 4) if total_done else None,
        "top_recurring": recurring,
        "suspect_hosts": [
            {
                "host": s.host,
                "failures": s.failures,
                "jobs": s.jobs,
                "classes": s.classes,
                "first_seen": iso_utc(s.first_seen),
                "last_seen": iso_utc(s.last_seen),
                "latest_analysis_id": s.latest_analysis_id,
            }
            for s in suspects
        ],
        "feedback": {k: int(v) for k, v in feedback_counts.items()},
    }


def rule_activity(session: Session, *, since: Sequence[dt.datetime]) -> dict[str, dict[str, list[int]]]:
    """Per rule: in how many analyses since each given time it fired, as the root cause and in
    any role (`{"root": [n, ...], "any": [n, ...]}`, one number per time).

    Findings are reached from the window's analyses (`IN` a subquery, one per time). A join
    grouped by rule let SQLite walk every finding in rule order and fetch each one's analysis
    row: ~90 ms at 10,000 analyses, against ~50 ms this way, and ~7 ms once both sides are
    read from covering indexes (analyses by created_at with id, findings by analysis with
    rule: the pending migration 0005)."""
    out: dict[str, dict[str, list[int]]] = {}
    if not since:
        return out
    widest = min(since)

    def slot(rid: object) -> dict[str, list[int]]:
        return out.setdefault(str(rid), {"root": [0] * len(since), "any": [0] * len(since)})

    # a rule yields one finding per analysis, so a count of rows is a count of analyses
    for i, start in enumerate(since):
        window = select(Analysis.id).where(Analysis.created_at >= start)
        any_rows = session.execute(
            select(Finding.rule_id, func.count())
            .where(Finding.analysis_id.in_(window))
            .group_by(Finding.rule_id)
        )
        for rid, n in any_rows:
            slot(rid)["any"][i] = int(n)
    root_rows = session.execute(
        select(
            Analysis.root_rule_id,
            *(func.sum(case((Analysis.created_at >= start, 1), else_=0)) for start in since),
        )
        .where(Analysis.created_at >= widest, Analysis.root_rule_id.is_not(None))
        .group_by(Analysis.root_rule_id)
    )
    for rid, *counts in root_rows:
        slot(rid)["root"] = [int(n or 0) for n in counts]
    return out


def rule_feedback(session: Session, *, rule_id: str | None = None) -> dict[str, dict[str, int]]:
    """Feedback verdicts on analyses whose root cause each rule named: its precision."""
    stmt = (
        select(Analysis.root_rule_id, Feedback.verdict, func.count())
        .join(Feedback, Feedback.analysis_id == Analysis.id)
        .where(Analysis.root_rule_id.is_not(None))
        .group_by(Analysis.root_rule_id, Feedback.verdict)
    )
    if rule_id is not None:
        stmt = stmt.where(Analysis.root_rule_id == rule_id)
    out: dict[str, dict[str, int]] = {}
    for rid, verdict, n in session.execute(stmt):
        out.setdefault(str(rid), {})[str(verdict)] = int(n)
    return out


def rule_comments(session: Session, *, rule_id: str, limit: int = 10) -> list[dict[str, Any]]:
    """The latest feedback on analyses the rule led, with comments and corrections."""
    rows = session.execute(
        select(
            Feedback.analysis_id,
            Feedback.created_at,
            Feedback.verdict,
            Feedback.correct_class,
            Feedback.comment,
        )
        .join(Analysis, Analysis.id == Feedback.analysis_id)
        .where(Analysis.root_rule_id == rule_id)
        .order_by(Feedback.id.desc())
        .limit(limit)
    )
    return [
        {
            "analysis_id": aid,
            "created_at": iso_utc(created),
            "verdict": verdict,
            "correct_class": correct,
            "comment": comment,
        }
        for aid, created, verdict, correct, comment in rows
    ]


def clear_host(session: Session, *, host: str, note: str | None, token_id: int | None) -> dt.datetime:
    """Record that `host` was repaired now; returns the time its count restarts from."""
    now = utcnow()
    row = session.get(HostClearance, host)
    if row is None:
        session.add(HostClearance(host=host, cleared_at=now, note=note, token_id=token_id))
    else:
        row.cleared_at, row.note, row.token_id = now, note, token_id
    session.flush()
    return now
