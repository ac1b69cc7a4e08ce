"""The operations every edge shares: submit a log, read an analysis, give feedback, list, trends.

The REST routes, the web pages and the Slack bot call these and only format the answer their
own way (JSON, HTML, Block Kit); none of them has a second way to upload or to query.
Callers pass what the request told them; authorisation is checked here, by `Principal`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.db import repo
from app.db.models import Analysis
from app.db.repo import AnalysisFilter as AnalysisFilter  # the edges' filter type, from here
from app.errors import AnalysisNotReadyError, NotFoundError, ValidationFailedError
from app.service import aggregates, present, spool
from app.service.access import Principal, check_can_read
from app.service.analyses import Completed, Started
from app.service.context import ServiceContext
from app.service.jobs import ScanJob
from app.service.spool import Staging

# how long a request whose upload had to queue waits for its turn before it is answered 202:
# a short queue still answers in one round trip, a burst's does not hold a connection
QUEUE_GRACE_S = 0.25
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


@dataclass(frozen=True)
class Submission:
    """A started analysis: finished (`completed`), still running, or an idempotent replay."""

    analysis_id: str
    completed: Completed | None
    replayed: bool = False
    # still running in this process: work to do once it is done awaits it (a Slack notification)
    pending: asyncio.Task[Completed] | None = None
    draft: repo.Draft | None = None  # a pending one's row as this request wrote it

    @property
    def done(self) -> bool:
        return self.completed is not None


def staged_upload(ctx: ServiceContext) -> AbstractContextManager[Staging]:
    """Where an edge spools one upload's files: `with ops.staged_upload(ctx) as staging:`, then
    `submit(..., staging=staging)`. Not handed over (an error, a refused form), it is removed."""
    return spool.staged_upload(data_dir=ctx.settings.data_dir)


async def submit(
    ctx: ServiceContext,
    *,
    job: ScanJob,
    staging: Staging,
    meta: repo.JobMeta,
    principal: Principal,
    idempotency_key: str | None,
    request_digest: str,
    wait: float | None,
    client: str | None = None,
) -> Submission:
    """Start an analysis of spooled uploads and wait up to `wait` seconds for it (None: until
    it is done). One that is still running then gets its row, so its id can be polled.

    An upload that has to queue for a scan worker (a burst) waits only `QUEUE_GRACE_S` for its
    turn (none at all when the measured pace puts its turn further off), then is answered
    pending: the caller polls instead of holding a connection. A full
    backlog refuses it (503, or 429 for a client over its share) with nothing stored.
    `client`: who the backlog's turns are shared between (default: the principal)."""
    started = await begin(
        ctx,
        job=job,
        staging=staging,
        meta=meta,
        principal=principal,
        idempotency_key=idempotency_key,
        request_digest=request_digest,
        client=client,
    )
    return await settle(ctx, started=started, wait=wait)


async def begin(
    ctx: ServiceContext,
    *,
    job: ScanJob,
    staging: Staging,
    meta: repo.JobMeta,
    principal: Principal,
    idempotency_key: str | None,
    request_digest: str,
    client: str | None = None,
) -> Started:
    """The first half of `submit`: admit and start the analysis (refused: 503/429, nothing
    stored). An upload whose body is still arriving starts here and `settle`s once it is in."""
    return await ctx.service.start(
        job=job,
        spool=staging.hand_over(),  # the analysis removes it from here on, whatever happens
        meta=meta,
        token_id=principal.token_id,
        idempotency_scope=principal.idempotency_scope,
        idempotency_key=idempotency_key or None,
        request_digest=request_digest,
        client=principal.idempotency_scope if principal.token_id is not None or not client else client,
    )


async def settle(ctx: ServiceContext, *, started: Started, wait: float | None) -> Submission:
    """The second half of `submit`: wait for a started analysis as `submit` says."""
    task = started.task
    if task is None:
        return Submission(started.analysis_id, None, replayed=True)
    if started.queued and started.ticket is not None and wait is not None:
        # a short queue still answers in one round trip: an upload next in line waits for its
        # turn (the grace at most), then for its analysis like any other. One further back
        # than the grace at the measured pace is answered pending at once: in a burst nothing
        # holds a connection for a turn that far off
        grace = min(wait, QUEUE_GRACE_S)
        if started.ticket.turn_s() > grace:
            wait = 0
        else:
            turn = asyncio.ensure_future(started.ticket.wait_turn())
            await asyncio.wait({turn, task}, timeout=grace)
            turn.cancel()
            if not started.ticket.running and not task.done():
                wait = 0  # still queued: answer now, the analysis runs in its turn
    if not task.done() and (wait is None or wait > 0):
        await asyncio.wait({task}, timeout=wait)
    # answered before it is done: the analysis needs a row to poll (a finished one has one)
    if not task.done() and await ctx.service.register(started.analysis_id):
        await asyncio.wait({task})
    if not task.done():
        return Submission(started.analysis_id, None, pending=task, draft=started.draft)
    exc = None if task.cancelled() else task.exception()
    if task.cancelled() or exc is not None:
        await ctx.service.discard(started.analysis_id)
        raise exc or AnalysisNotReadyError("the analysis was cancelled (server shutting down)")
    return Submission(started.analysis_id, task.result())


def resource_at_hand(*, submission: Submission, base: str) -> dict[str, Any] | None:
    """The API resource of a submission when this request holds all of it, else None (read it
    with `submission_resource`): a finished one from what was just written, a pending one from
    the row it inserted. No read, no thread: in a burst the default thread pool is busy with
    the database, and a 202 would queue behind it for a few dictionary lookups."""
    if submission.completed is not None:
        c = submission.completed
        return present.resource(row=c.row, base=base, files=c.files, feedback=[], standing=c.standing)
    if submission.draft is not None:
        row = repo.pending_row(submission.draft)
        return present.resource(row=row, base=base, files=[], feedback=[], standing=repo.Standing())
    return None


def submission_resource(ctx: ServiceContext, *, submission: Submission, base: str) -> dict[str, Any]:
    """The API resource of a submission: what the request holds (`resource_at_hand`), else read
    back (a replay, or a failed analysis run again)."""
    held = resource_at_hand(submission=submission, base=base)
    if held is not None:
        return held
    return load_resource(ctx, analysis_id=submission.analysis_id, base=base, principal=None)


def load_resource(
    ctx: ServiceContext, *, analysis_id: str, base: str, principal: Principal | None
) -> dict[str, Any]:
    """One stored analysis as its API resource (`principal` None: the caller already checked)."""
    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id, full=True)
        if principal is not None:
            check_can_read(principal, row)
        return present.load_resource(s, row=row, base=base, settings=ctx.settings)


def resource_for(ctx: ServiceContext, *, analysis_id: str, base: str, principal: Principal) -> dict[str, Any]:
    """One analysis as `principal` may see it (403/404 otherwise; token names hidden from ingest)."""
    res = load_resource(ctx, analysis_id=analysis_id, base=base, principal=principal)
    return present.for_principal(res, principal)


def done_resource_for(
    ctx: ServiceContext, *, analysis_id: str, base: str, principal: Principal
) -> dict[str, Any]:
    """`resource_for` of a finished analysis; 409 while it runs or when it failed."""
    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id, full=True)
        check_can_read(principal, row)
        require_done(row)
        res = present.load_resource(s, row=row, base=base, settings=ctx.settings)
    return present.for_principal(res, principal)


def check_readable(
    ctx: ServiceContext, *, analysis_id: str, principal: Principal, done: bool = False
) -> None:
    """403/404 unless `principal` may read the analysis; with `done`, 409 unless it is finished."""
    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id)
        check_can_read(principal, row)
        if done:
            require_done(row)


@dataclass(frozen=True)
class StoredLog:
    """One stored (redacted, compressed) log of an analysis, as the log endpoints serve it."""

    analysis_id: str
    name: str
    size: int
    blob_sha256: str


def stored_log(ctx: ServiceContext, *, analysis_id: str, principal: Principal, file: int) -> StoredLog:
    """Which blob holds file number `file` of the analysis (404 when there is none)."""
    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id, full=True)
        check_can_read(principal, row)
        if not row.files:
            raise NotFoundError(f"analysis {row.id} has no stored log ({row.status})")
        if file >= len(row.files):
            raise NotFoundError(f"analysis {row.id} has {len(row.files)} file(s); no file={file}")
        f = row.files[file]
        return StoredLog(row.id, f.name, f.size, f.blob_sha256)


def require_done(row: Analysis) -> None:
    if row.status != "done" or row.result is None:
        why = (
            "is still running; retry shortly"
            if row.status == "pending"
            else "failed: " + str((row.error or {}).get("detail", ""))
        )
        raise AnalysisNotReadyError(f"analysis {row.id} {why}")


@dataclass(frozen=True)
class Report:
    """Everything a report page shows: the resource plus the rule texts as they matched."""

    resource: dict[str, Any]
    rule_texts: dict[str, dict[str, Any]]
    fingerprint_history: list[dict[str, Any]]


def load_report(ctx: ServiceContext, *, analysis_id: str, base: str, principal: Principal) -> Report:
    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id, full=True)
        check_can_read(principal, row)
        require_done(row)
        res = present.for_principal(
            present.load_resource(s, row=row, base=base, settings=ctx.settings), principal
        )
        rule_texts = {
            rid: {"version": rv.version, "text": rv.text}
            for rid, rv in repo.finding_rule_versions(s, analysis_id=row.id).items()
        }
        others: list[dict[str, Any]] = []
        if row.fingerprint and principal.allows("read"):
            # "before": a later analysis of the same failure is not part of this one's past
            rows, _ = repo.list_analyses(
                s, filters=repo.AnalysisFilter(fingerprint=row.fingerprint, until=row.created_at), limit=10
            )
            others = present.summaries(s, [r for r in rows if r.id != row.id], base=base)
    return Report(res, rule_texts, others)


def record_feedback(
    ctx: ServiceContext,
    *,
    analysis_id: str,
    verdict: str,
    correct_class: str | None,
    comment: str | None,
    principal: Principal,
) -> dict[str, Any]:
    """Store a verdict on an analysis' root cause (web form, API, Slack button)."""
    if verdict not in ("correct", "wrong"):
        raise ValidationFailedError(f"verdict must be `correct` or `wrong`, not {verdict[:40]!r}")
    if comment is not None and (bad := _CONTROL_IN_TEXT.search(comment)) is not None:
        # PostgreSQL refuses NUL in text: a 422 here, not a 500 from the insert
        raise ValidationFailedError(
            f"comment: control character U+{ord(bad.group()):04X} at position {bad.start()}"
        )
    if correct_class is not None:
        if verdict == "correct":
            raise ValidationFailedError(
                "correct_class is for verdict `wrong` (the class it should have been)"
            )
        if correct_class not in ctx.library.classes:
            raise ValidationFailedError(
                f"correct_class {correct_class!r} is not a known failure class; "
                "GET /api/v1/library lists them"
            )
    with ctx.db.write() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id)
        check_can_read(principal, row)
        fb = repo.add_feedback(
            s,
            analysis_id=row.id,
            verdict=verdict,
            correct_class=correct_class,
            comment=comment,
            token_id=principal.token_id,
        )
        return present.feedback_dict(fb)


def history(
    ctx: ServiceContext, *, filters: repo.AnalysisFilter, limit: int, cursor: str | None, base: str
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the history, newest first, as summaries, and the cursor of the next page."""
    with ctx.db.read() as s:
        rows, next_cursor = repo.list_analyses(s, filters=filters, limit=limit, cursor=cursor)
        return present.summaries(s, rows, base=base), next_cursor


@dataclass(frozen=True)
class HistoryPage:
    rows: list[dict[str, Any]]
    older: str | None  # cursor of the next older page
    newer: str | None  # cursor to pass as `newer_than` for the page before, when there is one
    count: int
    capped: bool  # at least `count` match; the count stopped there
    feedback: dict[str, dict[str, int]]
    # the hosts the findings were seen on (the log's own, else the hook's), per analysis
    hosts: dict[str, list[str]] = field(default_factory=dict)


HISTORY_COUNT_CAP = 10_000


def history_page(
    ctx: ServiceContext,
    *,
    filters: repo.AnalysisFilter,
    limit: int,
    cursor: str | None,
    newer_than: str | None,
    base: str,
) -> HistoryPage:
    """A page of the history for a person: rows, both neighbours and how many match."""
    with ctx.db.read() as s:
        rows, older = repo.list_analyses(
            s, filters=filters, limit=limit, cursor=cursor, newer_than=newer_than
        )
        newer = None
        if rows and (cursor or newer_than) and repo.has_newer(s, filters=filters, analysis_id=rows[0].id):
            newer = repo.encode_cursor(rows[0].id)
        if newer_than and rows:
            # a page reached backwards has an older neighbour: the one it came from
            older = repo.encode_cursor(rows[-1].id)
        # paging through one search asks the same count again: cached until the data changes
        count = aggregates.CACHE.get(
            s,
            ("count", repr(filters), HISTORY_COUNT_CAP),
            lambda: repo.count_analyses(s, filters=filters, cap=HISTORY_COUNT_CAP),
        )
        feedback = repo.feedback_counts(s, analysis_ids=[r.id for r in rows])
        summaries = present.summaries(s, rows, base=base)
        hosts = repo.finding_hosts_of(s, analysis_ids=[r.id for r in rows])
    capped = count > HISTORY_COUNT_CAP
    return HistoryPage(summaries, older, newer, min(count, HISTORY_COUNT_CAP), capped, feedback, hosts)


def trends(ctx: ServiceContext, *, since: dt.datetime, until: dt.datetime, top: int = 10) -> dict[str, Any]:
    if since >= until:
        raise ValidationFailedError("since must be before until")
    with ctx.db.read() as s:
        return cached_stats(s, ctx=ctx, since=since, until=until, top=top)


def cached_stats(
    s: Session, *, ctx: ServiceContext, since: dt.datetime, until: dt.datetime, top: int
) -> dict[str, Any]:
    """`repo.stats`, recomputed only when the stored data changed (app.service.aggregates)."""

    def compute() -> dict[str, Any]:
        return repo.stats(
            s,
            since=since,
            until=until,
            recurrence_days=ctx.settings.recurrence_days,
            suspect_min_jobs=ctx.settings.suspect_min_jobs,
            top=top,
        )

    key = ("stats", since, until, top, ctx.settings.recurrence_days, ctx.settings.suspect_min_jobs)
    return aggregates.CACHE.get(s, key, compute)


def root_title(ctx: ServiceContext, *, analysis_id: str) -> str | None:
    """An analysis' root-cause title (None: no named cause), for a prompt about it."""
    with ctx.db.read() as s:
        return repo.get_analysis(s, analysis_id=analysis_id).root_title
