"""Recurrence counters: how often a failure fingerprint was seen, kept as it happens.

Every upload's response says how often its root cause recurred ("seen 12 times in 7 days, across
5 jobs, 3 hosts"). Counting that from ``analyses``/``findings`` costs time proportional to the
history of the fingerprint, and a common failure (an NCCL timeout) has tens of thousands of rows:
measured on PostgreSQL, the distinct-hosts join alone grew to 150 ms per request after 6,000
analyses. So each counted analysis adds to four small tables in the transaction that completes
it, and reading recurrence touches one row per day and the fingerprint's totals:

- ``recurrence_days``: analyses per (fingerprint, UTC day), with the first/last time and first id;
- ``recurrence_jobs``: analyses per (fingerprint, job) (the job is the analysis id when unnamed);
- ``recurrence_hosts``: analyses per (fingerprint, host) of the root cause's findings;
- ``recurrence_totals``: how many job and host rows each fingerprint has (its distinct jobs and
  hosts), changed only when such a row is inserted or deleted.

An analysis counts when it is done, has a root-cause fingerprint and is not a duplicate upload.
Re-triage can change an analysis' fingerprint: ``uncount`` takes its old contribution back first.
Writers lock the tables in one order (days, jobs, hosts, totals) and the keys of each in sorted
order, so concurrent writers of one fingerprint (uploads, re-triage) never deadlock.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import bindparam, delete, distinct, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.db.models import (
    Analysis,
    Finding,
    FindingHost,
    RecurrenceDay,
    RecurrenceHost,
    RecurrenceJob,
    RecurrenceTotal,
    table_of,
)
from app.engine import fingerprint as fingerprinting


@dataclass(frozen=True)
class Contribution:
    """What one analysis adds to the counters of its root-cause fingerprint."""

    fingerprint: str
    analysis_id: str
    created_at: dt.datetime
    job_key: str
    hosts: tuple[str, ...]

    @property
    def day(self) -> dt.date:
        return self.created_at.astimezone(dt.UTC).date()


@dataclass(frozen=True)
class Recurrence:
    fingerprint: str
    fingerprint_version: int  # the algorithm of `fingerprint` (app.engine.fingerprint)
    total: int
    in_window: int
    window_days: int
    first_seen: dt.datetime
    first_analysis_id: str
    last_seen: dt.datetime
    jobs: int
    hosts: int


def contribution_of(row: Analysis, *, hosts: Iterable[str]) -> Contribution | None:
    if row.status != "done" or not row.fingerprint or row.duplicate_of_id is not None:
        return None
    return Contribution(
        fingerprint=row.fingerprint,
        analysis_id=row.id,
        created_at=row.created_at,
        job_key=(row.job_id or row.id)[:256],
        hosts=tuple(sorted({h[:255] for h in hosts})),
    )


def stored_root_hosts(session: Session, *, analysis_id: str, fingerprint_: str) -> list[str]:
    """Hosts of an analysis' stored findings that carry its root-cause fingerprint."""
    return list(
        session.scalars(
            select(FindingHost.host)
            .join(Finding, Finding.id == FindingHost.finding_id)
            .where(Finding.analysis_id == analysis_id, Finding.fingerprint == fingerprint_)
            .distinct()
        )
    )


@functools.cache
def _statements(dialect: str) -> SimpleNamespace:
    """The counters' statements, built once per dialect: building a statement (its expression
    tree and cache key) cost more Python than running it, and every stored upload runs them."""
    is_pg = dialect == "postgresql"
    insert_ = postgresql.insert if is_pg else sqlite.insert
    least, greatest = (func.least, func.greatest) if is_pg else (func.min, func.max)
    days = table_of(RecurrenceDay)
    ins = insert_(days)
    ex = ins.excluded
    upsert_days = ins.on_conflict_do_update(
        index_elements=["fingerprint", "day"],
        set_={
            "analyses": days.c.analyses + ex.analyses,
            "first_at": least(days.c.first_at, ex.first_at),
            "last_at": greatest(days.c.last_at, ex.last_at),
            "first_analysis_id": least(days.c.first_analysis_id, ex.first_analysis_id),
        },
    )
    keyed = {}
    for table, key in ((table_of(RecurrenceJob), "job_key"), (table_of(RecurrenceHost), "host")):
        # executemany with RETURNING (SQLAlchemy's "insertmanyvalues"): one cached statement
        # for any number of rows, where `.values(rows)` compiled anew for every count of rows
        keyed[key] = (
            insert_(table)
            .on_conflict_do_nothing(index_elements=["fingerprint", key])
            .returning(table.c.fingerprint, table.c[key]),
            update(table)
            .where(table.c.fingerprint == bindparam("b_fp"), table.c[key] == bindparam("b_key"))
            .values(analyses=table.c.analyses + bindparam("b_n")),
        )
    totals = table_of(RecurrenceTotal)
    tins = insert_(totals)
    upsert_totals = tins.on_conflict_do_update(
        index_elements=["fingerprint"],
        set_={"jobs": totals.c.jobs + tins.excluded.jobs, "hosts": totals.c.hosts + tins.excluded.hosts},
    )
    return SimpleNamespace(upsert_days=upsert_days, keyed=keyed, upsert_totals=upsert_totals)


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name


def count(session: Session, contributions: Iterable[Contribution]) -> None:
    """Add analyses to the counters, one upsert per row touched (a batch of uploads of one
    failure touches the same few rows)."""
    days: dict[tuple[str, dt.date], dict[str, Any]] = {}
    jobs: dict[tuple[str, str], int] = {}
    hosts: dict[tuple[str, str], int] = {}
    for c in contributions:
        d = days.get((c.fingerprint, c.day))
        if d is None:
            days[(c.fingerprint, c.day)] = {
                "fingerprint": c.fingerprint,
                "day": c.day,
                "analyses": 1,
                "first_at": c.created_at,
                "last_at": c.created_at,
                "first_analysis_id": c.analysis_id,
            }
        else:
            d["analyses"] += 1
            d["first_at"] = min(d["first_at"], c.created_at)
            d["last_at"] = max(d["last_at"], c.created_at)
            d["first_analysis_id"] = min(d["first_analysis_id"], c.analysis_id)
        jobs[(c.fingerprint, c.job_key)] = jobs.get((c.fingerprint, c.job_key), 0) + 1
        for h in c.hosts:
            hosts[(c.fingerprint, h)] = hosts.get((c.fingerprint, h), 0) + 1
    if days:
        # sorted: the lock order (the module's docstring)
        rows = sorted(days.values(), key=lambda r: (r["fingerprint"], r["day"]))
        session.connection().execute(_statements(_dialect(session)).upsert_days, rows)
    job_rows = [{"fingerprint": fp, "job_key": k, "analyses": n} for (fp, k), n in jobs.items()]
    new_jobs = _add_keyed(session, job_rows, "job_key")
    host_rows = [{"fingerprint": fp, "host": h, "analyses": n} for (fp, h), n in hosts.items()]
    new_hosts = _add_keyed(session, host_rows, "host")
    _add_totals(session, {fp: (new_jobs[fp], new_hosts[fp]) for fp in new_jobs | new_hosts})


def _add_keyed(session: Session, rows: list[dict[str, Any]], key: str) -> Counter[str]:
    """Add to the per-job (`key` "job_key") or per-host ("host") counters; returns how many of
    the rows were new, per fingerprint. New rows are told by the insert itself (ON CONFLICT DO
    NOTHING RETURNING): a row another transaction inserts at the same moment is waited for and
    then counted by one of the two only, which a look-up before the upsert could not promise."""
    if not rows:
        return Counter()
    rows = sorted(rows, key=lambda r: (r["fingerprint"], r[key]))  # the lock order
    insert_new, add_to = _statements(_dialect(session)).keyed[key]
    conn = session.connection()
    fresh = {(fp, k) for fp, k in conn.execute(insert_new, rows)}
    seen = [
        {"b_fp": r["fingerprint"], "b_key": r[key], "b_n": r["analyses"]}
        for r in rows
        if (r["fingerprint"], r[key]) not in fresh
    ]
    if seen:
        conn.execute(add_to, seen)
    return Counter(fp for fp, _ in fresh)


def _add_totals(session: Session, change: dict[str, tuple[int, int]]) -> None:
    """Add (jobs, hosts) to the fingerprints' totals; a total taken down to nothing is deleted."""
    rows: list[dict[str, Any]] = [
        {"fingerprint": fp, "jobs": j, "hosts": h} for fp, (j, h) in sorted(change.items()) if j or h
    ]
    if not rows:
        return
    session.connection().execute(_statements(_dialect(session)).upsert_totals, rows)
    table = table_of(RecurrenceTotal)
    taken = [fp for fp, (j, h) in change.items() if j < 0 or h < 0]
    if taken:
        session.execute(
            delete(table).where(table.c.fingerprint.in_(taken), table.c.jobs <= 0, table.c.hosts <= 0)
        )


def uncount(session: Session, c: Contribution) -> None:
    """Take an analysis' contribution back (before its fingerprint or status changes)."""
    fp = c.fingerprint
    # the rows in the order `count` locks them (day, jobs, hosts, totals), so a re-triage and an
    # upload of the same failure cannot each hold a row the other waits for. The day row's
    # first/last may have been this analysis: that one day is recounted from the source
    start = dt.datetime.combine(c.day, dt.time(), dt.UTC)
    n, first, last, first_id = session.execute(
        select(
            func.count(), func.min(Analysis.created_at), func.max(Analysis.created_at), func.min(Analysis.id)
        )
        .where(*_counted([fp]), Analysis.id != c.analysis_id)
        .where(Analysis.created_at >= start, Analysis.created_at < start + dt.timedelta(days=1))
    ).one()
    key = (RecurrenceDay.fingerprint == fp, RecurrenceDay.day == c.day)
    if not n:
        session.execute(delete(RecurrenceDay).where(*key))
    else:
        session.execute(
            update(RecurrenceDay)
            .where(*key)
            .values(analyses=int(n), first_at=_aware(first), last_at=_aware(last), first_analysis_id=first_id)
        )
    jobs_gone = _decrement(
        session, RecurrenceJob, RecurrenceJob.fingerprint == fp, RecurrenceJob.job_key == c.job_key
    )
    hosts_gone = sum(
        _decrement(session, RecurrenceHost, RecurrenceHost.fingerprint == fp, RecurrenceHost.host == h)
        for h in c.hosts  # sorted (`contribution_of`)
    )
    _add_totals(session, {fp: (-jobs_gone, -hosts_gone)})


def _decrement(session: Session, model: type[RecurrenceJob | RecurrenceHost], *key: Any) -> int:
    """Take one analysis off a counter row; returns 1 when that emptied and deleted it."""
    session.execute(update(model).where(*key).values(analyses=model.analyses - 1))
    gone = session.execute(delete(model).where(*key, model.analyses <= 0))
    return int(gone.rowcount or 0)  # type: ignore[attr-defined]


def _counted(fps: Sequence[str]) -> tuple[Any, ...]:
    return (_among(Analysis.fingerprint, fps), Analysis.status == "done", Analysis.duplicate_of_id.is_(None))


def _among(column: Any, fps: Sequence[str]) -> Any:
    # one key (one fingerprint version registered): the statements recurrence always ran
    return column == fps[0] if len(fps) == 1 else column.in_(fps)


def other_versions(row: Analysis) -> list[str]:
    """The root cause's fingerprints under the other registered fingerprint versions: stored
    repeats of it are counted under those keys too (app.engine.fingerprint)."""
    root = (row.result or {}).get("root_cause")
    if not root or not row.fingerprint:
        return []
    return [
        fp
        for fp in fingerprinting.matching(root["rule_id"], root.get("captures") or {})
        if fp != row.fingerprint
    ]


def _days_of(fps: Sequence[str]) -> Any:
    c = table_of(RecurrenceDay).c
    of_key = _among(c.fingerprint, fps)
    return select(c.day, c.analyses, c.first_at, c.last_at, c.first_analysis_id).where(of_key)


def _known_of(fps: Sequence[str], job_keys: Sequence[str], new_hosts: Sequence[str]) -> Any:
    """Distinct jobs and hosts under several keys (a job or host may sit under each: counted
    once), and how many of the pending ones are known."""
    jobs, hosts = table_of(RecurrenceJob), table_of(RecurrenceHost)
    jobs_q = select(func.count(distinct(jobs.c.job_key))).where(_among(jobs.c.fingerprint, fps))
    hosts_q = select(func.count(distinct(hosts.c.host))).where(_among(hosts.c.fingerprint, fps))
    return select(
        jobs_q.scalar_subquery(),
        jobs_q.where(jobs.c.job_key.in_(job_keys)).scalar_subquery(),
        hosts_q.scalar_subquery(),
        hosts_q.where(hosts.c.host.in_(new_hosts)).scalar_subquery(),
    )


@functools.cache
def _reads() -> SimpleNamespace:
    """`recurrence`'s statements for one key, built once (every stored upload runs them)."""
    jobs, hosts, totals = table_of(RecurrenceJob), table_of(RecurrenceHost), table_of(RecurrenceTotal)
    fp: Any = bindparam("fp")

    def of_totals(column: Any) -> Any:
        return func.coalesce(select(column).where(totals.c.fingerprint == fp).scalar_subquery(), 0)

    def known(table: Any, column: Any, param: str) -> Any:
        return (
            select(func.count())
            .where(table.c.fingerprint == fp, column.in_(bindparam(param, expanding=True)))
            .scalar_subquery()
        )

    return SimpleNamespace(
        days=_days_of([fp]),
        known=select(
            of_totals(totals.c.jobs),
            known(jobs, jobs.c.job_key, "jobs"),
            of_totals(totals.c.hosts),
            known(hosts, hosts.c.host, "hosts"),
        ),
    )


def recurrence(
    session: Session,
    *,
    fingerprint_: str,
    days: int,
    now: dt.datetime | None = None,
    pending: Iterable[Contribution] = (),
    version: int | None = None,
    also: Sequence[str] = (),
) -> Recurrence | None:
    """Recurrence of a fingerprint from the counters: cost bounded by days, jobs and hosts seen.

    `pending` are analyses being stored in this transaction, not counted yet: they are added
    here, so the caller can write the counters as the last thing before commit (their rows are
    the ones every upload of a common failure contends for). `also`: the same failure's
    fingerprints under the other versions (`other_versions`), counted with it; `version` is the
    one `fingerprint_` was computed with.
    """
    fps = [fingerprint_, *(fp for fp in also if fp != fingerprint_)]
    now = now or dt.datetime.now(dt.UTC)
    cutoff = now - dt.timedelta(days=days)
    cut_day = cutoff.astimezone(dt.UTC).date()
    next_day = dt.datetime.combine(cut_day + dt.timedelta(days=1), dt.time(), dt.UTC)
    one_key = len(fps) == 1
    mine = [c for c in pending if c.fingerprint in fps]
    job_keys = sorted({c.job_key for c in mine})
    new_hosts = sorted({h for c in mine for h in c.hosts})
    conn = session.connection()
    if one_key:  # the common case, its statements built once
        st = _reads()
        rows = conn.execute(st.days, {"fp": fingerprint_}).all()
    else:
        rows = conn.execute(_days_of(fps)).all()
    total = sum(int(r.analyses) for r in rows)
    in_window = sum(int(r.analyses) for r in rows if r.day > cut_day)
    if any(r.day == cut_day for r in rows):
        # the window starts inside this day: count its part exactly (one day of index range)
        in_window += int(
            session.scalar(
                select(func.count()).where(
                    *_counted(fps),
                    Analysis.created_at >= cutoff,
                    Analysis.created_at < next_day,
                )
            )
            or 0
        )
    firsts = [(_aware(r.first_at), r.first_analysis_id) for r in rows]
    lasts = [_aware(r.last_at) for r in rows]
    # one round trip: distinct jobs and hosts, and how many of the pending ones are known
    if one_key:
        # the totals row says how many jobs and hosts the key has (a count over them grows with
        # the failure's history)
        known = conn.execute(st.known, {"fp": fingerprint_, "jobs": job_keys, "hosts": new_hosts})
    else:
        known = conn.execute(_known_of(fps, job_keys, new_hosts))
    n_jobs, jobs_known, n_hosts, hosts_known = known.one()
    total += len(mine)
    in_window += sum(c.created_at >= cutoff for c in mine)
    firsts += [(c.created_at, c.analysis_id) for c in mine]
    lasts += [c.created_at for c in mine]
    n_jobs += len(job_keys) - jobs_known
    n_hosts += len(new_hosts) - hosts_known
    if not total:
        return None
    first_seen, first_id = min(firsts)
    return Recurrence(
        fingerprint=fingerprint_,
        fingerprint_version=version or fingerprinting.CURRENT,
        total=total,
        in_window=in_window,
        window_days=days,
        first_seen=first_seen,
        first_analysis_id=first_id,
        last_seen=max(lasts),
        jobs=n_jobs,
        hosts=n_hosts,
    )


def _aware(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    parsed = dt.datetime.fromisoformat(str(value))  # SQLite returns MIN()/MAX() of datetimes as text
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
