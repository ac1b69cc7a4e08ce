"""/api/v1/analyses: upload, read, list, reports, the stored log, feedback, re-triage."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Annotated, Any, BinaryIO, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from app.api.schemas import (
    AnalysisPage,
    AnalysisResource,
    FeedbackIn,
    FeedbackOut,
    LogSearchOut,
    RetriageOut,
)
from app.blobstore import iter_range
from app.engine.models import Analysis as AnalysisModel
from app.errors import (
    NotFoundError,
    RangeNotSatisfiableError,
    UsageError,
    ValidationFailedError,
)
from app.http.deps import AdminDep, CtxDep, IngestDep, PrincipalDep, ReadDep, SessionDep
from app.http.openapi import problems
from app.http.shared import base_url, content_disposition, parse_time
from app.http.upload import Intake, Upload, intake_of, receive
from app.render.markdown import render_markdown
from app.service import logview, ops, present
from app.service import notify as notify_
from app.service.analyses import Started
from app.service.jobs import InputFile
from app.service.metadata import Source, parse_labels

router = APIRouter(prefix="/api/v1", tags=["analyses"])

MAX_PREFER_WAIT = 600.0
_UPLOAD_SCHEMA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "One log as the raw body (plain, or gzip/zstd with `Content-Encoding` or by magic "
        "bytes), or multipart with several `log` files, an optional `config` and metadata fields.",
        "content": {
            "text/plain": {"schema": {"type": "string", "format": "binary"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["log"],
                    "properties": {
                        "log": {"type": "array", "items": {"type": "string", "format": "binary"}},
                        "config": {"type": "string", "format": "binary", "description": "job YAML or script"},
                        "job_id": {"type": "string"},
                        "framework": {"type": "string"},
                        "exit_code": {"type": "integer"},
                        "host": {"type": "string"},
                        "label": {"type": "array", "items": {"type": "string"}, "description": "key=value"},
                        "labels": {"type": "string", "description": "a JSON object of labels"},
                        "source": {"type": "string", "enum": ["web", "api", "slack", "cli"]},
                    },
                }
            },
        },
    }
}


def _prefer(header: str | None, default_wait: float) -> tuple[float, str | None]:
    if not header:
        return default_wait, None
    wait = default_wait
    applied = None
    for token in header.split(","):
        item = token.strip().lower()
        if item == "respond-async":
            return 0.0, "respond-async"
        if item.startswith("wait="):
            try:
                wait = max(0.0, min(float(item[5:]), MAX_PREFER_WAIT))
                applied = f"wait={item[5:]}"
            except ValueError:
                pass
    return wait, applied


def _response(res: dict[str, Any], *, base: str, replayed: bool, applied: str | None) -> JSONResponse:
    headers = {"Location": present.analysis_url(base, res["id"])}
    status = {"done": 201, "pending": 202}.get(res["status"], 200)
    if status == 202:
        headers["Retry-After"] = "2"
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    if applied:
        headers["Preference-Applied"] = applied
    return JSONResponse(res, status_code=status, headers=headers)


@router.post(
    "/analyses",
    status_code=201,
    response_model=AnalysisResource,
    summary="Analyse a log (hooks call this)",
    responses={
        202: {"description": "Accepted: still running; poll `Location`.", "model": AnalysisResource},
        **problems(400, 401, 403, 408, 409, 413, 415, 422, 429, 503, 507),
    },
    openapi_extra=_UPLOAD_SCHEMA,
)
async def create_analysis(
    request: Request,
    ctx: CtxDep,
    principal: IngestDep,
    job_id: Annotated[str | None, Query(max_length=256)] = None,
    framework: Annotated[str | None, Query(description="overrides detection")] = None,
    exit_code: Annotated[int | None, Query(description="the job's exit status")] = None,
    host: Annotated[str | None, Query(max_length=255)] = None,
    label: Annotated[list[str] | None, Query(description="key=value; repeat for more")] = None,
    source: Annotated[Source, Query()] = "api",
    filename: Annotated[str | None, Query(max_length=200, description="name of a raw-body log")] = None,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
    prefer: Annotated[
        str | None, Header(description="`respond-async` (answer 202 at once) or `wait=N` seconds")
    ] = None,
    notify: Annotated[
        str | None,
        Query(
            max_length=40,
            description="Slack channel ID to post the diagnosis to once it is done (the bot must be in "
            "it); a repeat of a failure posted there recently goes into that post's thread",
        ),
    ] = None,
) -> Response:
    """Stream the upload to disk, then analyse it off the event loop.

    `201` with the analysis when it finishes within `LOGTRIAGE_SYNC_WAIT` seconds, else `202`
    with `Location` to poll. The same `Idempotency-Key` (per token) returns the first analysis.
    """
    settings = ctx.settings
    if notify is not None:
        # before the upload is read: a refused request stores nothing
        notify_.check_channel(ctx, channel=notify)
    query = {"job_id": job_id, "framework": framework, "exit_code": exit_code, "host": host}
    client = request.client.host if request.client else None
    early: Started | None = None
    wait, applied = _prefer(prefer, settings.sync_wait)
    with ops.staged_upload(ctx) as staging:

        async def start(intake: Intake, key: str | None) -> Started:
            return await ops.begin(
                ctx,
                job=intake.job,
                staging=staging,
                meta=intake.meta,
                principal=principal,
                idempotency_key=key,
                request_digest=intake.digest,
                client=client,
            )

        async def analyse_while_it_arrives(f: InputFile) -> None:
            # a big raw body without an Idempotency-Key (nothing to compare it with first): the
            # scan worker reads the spool behind the upload instead of after it
            nonlocal early
            first = Upload(files=[f], parts=[("log", f.name, "")])
            early = await start(intake_of(first, query=query, labels=label or [], source=source), None)

        try:
            upload = await receive(
                request,
                spool=staging.path,
                limit=settings.max_upload_bytes,
                raw_name=filename,
                digest=idempotency_key is not None,
                on_spool=analyse_while_it_arrives if idempotency_key is None else None,
            )
            intake = intake_of(upload, query=query, labels=label or [], source=source)
        except BaseException:
            if early is not None and early.task is not None:
                early.task.cancel()  # its scan worker stops at the abort; its turn goes to the next
                staging.remove()
            raise
        try:
            started = early or await start(intake, idempotency_key)
            submission = await ops.settle(ctx, started=started, wait=wait)
        finally:
            if early is not None and early.task is not None and early.task.done():
                # an analysis that ended before the body did (it refused it) may have removed the
                # spool before the request wrote its end marker there
                staging.remove()
    base = base_url(request, ctx)
    if notify is not None and not submission.replayed:
        # posted after the answer: the hook's latency does not include Slack's
        notify_.notify_later(
            ctx, analysis_id=submission.analysis_id, channel=notify, base=base, pending=submission.pending
        )
    res = ops.resource_at_hand(submission=submission, base=base)
    if res is None:
        res = await asyncio.to_thread(ops.submission_resource, ctx, submission=submission, base=base)
    res = present.for_principal(res, principal)
    return _response(res, base=base, replayed=submission.replayed, applied=applied)


@router.get(
    "/analyses/{analysis_id}",
    response_model=AnalysisResource,
    summary="One analysis (JSON contract + id, metadata, links)",
    responses=problems(401, 403, 404),
)
def get_analysis(analysis_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep) -> JSONResponse:
    res = ops.resource_for(ctx, analysis_id=analysis_id, base=base_url(request, ctx), principal=principal)
    headers = {"Retry-After": "2"} if res["status"] == "pending" else {}
    return JSONResponse(res, headers=headers)


@router.get(
    "/analyses/{analysis_id}/report.md",
    summary="The report as Markdown",
    response_class=Response,
    responses={200: {"content": {"text/markdown": {}}}, **problems(401, 403, 404, 409)},
)
def report_md(analysis_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep) -> Response:
    base = base_url(request, ctx)
    res = ops.done_resource_for(ctx, analysis_id=analysis_id, base=base, principal=principal)
    text = render_markdown(AnalysisModel.model_validate(res)) + present.service_markdown(res)
    return Response(text, media_type="text/markdown; charset=utf-8")


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """One `bytes=` range -> (start, end exclusive); None = whole file. Multi-ranges: whole file."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                raise RangeNotSatisfiableError(f"empty suffix range {header!r}")
            return max(0, size - n), size
        start = int(first)
        end = int(last) + 1 if last else size
    except ValueError:
        return None
    if start >= size or end <= start:
        raise RangeNotSatisfiableError(f"range {header!r} is outside the log ({size} bytes)")
    return start, min(end, size)


def _stream(fh: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    with fh:
        yield from iter_range(fh, start, length)


@router.get(
    "/analyses/{analysis_id}/log",
    summary="The stored, redacted log (supports Range)",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/plain": {}}},
        206: {"description": "Partial content"},
        **problems(401, 403, 404, 416),
    },
)
def get_log(
    analysis_id: str,
    ctx: CtxDep,
    session: SessionDep,
    principal: PrincipalDep,
    file: Annotated[int, Query(ge=0, description="index of the file (see `files`)")] = 0,
    range_: Annotated[str | None, Header(alias="Range")] = None,
) -> Response:
    f = ops.stored_log(ctx, analysis_id=analysis_id, principal=principal, file=file)
    size = f.size
    headers = {
        "Accept-Ranges": "bytes",
        "ETag": f'"{f.blob_sha256}"',
        "Content-Disposition": content_disposition(f.name),
    }
    try:
        rng = _parse_range(range_, size)
    except RangeNotSatisfiableError:
        raise
    if rng is None:
        start, end, status = 0, size, 200
    else:
        start, end = rng
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    headers["Content-Length"] = str(end - start)
    try:  # opened before the response starts, so a missing blob or a store outage is a problem+json
        fh = ctx.store.open(f.blob_sha256)
    except FileNotFoundError:
        raise NotFoundError(
            f"analysis {f.analysis_id}: the stored log {f.blob_sha256[:12]}… is missing from the blob store"
        ) from None
    return StreamingResponse(
        _stream(fh, start, end - start),
        status_code=status,
        media_type="text/plain; charset=utf-8",
        headers=headers,
    )


@router.get(
    "/analyses/{analysis_id}/log/search",
    summary="The next (or previous) line of a stored log that a search matches",
    description="Reads the stored log from line `from` on (or back from it) for about a second at "
    "most: when that is not enough, `line` is null and `reached` says where to go on from. "
    "Without `q`, the lines that read as errors (tracebacks, exception names, ERROR/FATAL, glog E "
    "lines, crashes). A pattern the `regex` module refuses, or one that matches every line, is 422.",
    response_model=LogSearchOut,
    responses=problems(401, 403, 404, 422),
)
def search_log(
    analysis_id: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    q: Annotated[str | None, Query(max_length=1000, description="the text (or pattern) to find")] = None,
    regex: Annotated[bool, Query(description="`q` is a regular expression (the `regex` module)")] = False,
    case: Annotated[bool, Query(description="case-sensitive")] = False,
    file: Annotated[int, Query(ge=0, le=999_999, description="index of the file (see `files`)")] = 0,
    start: Annotated[int, Query(alias="from", ge=0, description="the line to search after (before)")] = 0,
    direction: Annotated[Literal["next", "prev"], Query(alias="dir")] = "next",
) -> LogSearchOut:
    query = logview.Query(q, regex=regex, case=case) if q else None
    found = logview.search(
        ctx,
        analysis_id=analysis_id,
        position=file,
        principal=principal,
        query=query,
        from_line=start,
        forward=direction == "next",
    )
    page = None
    if found.line is not None:
        page = (
            f"{base_url(request, ctx)}/analyses/{analysis_id.upper()}/files/{file}"
            f"?line={found.line}#L{found.line}"
        )
    return LogSearchOut(line=found.line, reached=found.reached, done=found.done, page=page)


@router.get(
    "/analyses",
    response_model=AnalysisPage,
    summary="List analyses (filters, cursor pagination, newest first)",
    responses=problems(401, 403, 422),
)
def list_analyses(
    request: Request,
    ctx: CtxDep,
    session: SessionDep,
    _principal: ReadDep,
    failure_class: Annotated[
        str | None, Query(alias="class", description="root-cause class, or `unknown`")
    ] = None,
    kind: Annotated[str | None, Query(description="hardware, infra, config, code, numerics, unknown")] = None,
    framework: str | None = None,
    job_id: str | None = None,
    host: Annotated[str | None, Query(description="reported host or a host named in a finding")] = None,
    status: Annotated[str | None, Query(pattern="^(pending|done|failed)$")] = None,
    source: Source | None = None,
    rule_id: str | None = None,
    fingerprint: str | None = None,
    label: Annotated[list[str] | None, Query(description="key=value; all must match")] = None,
    since: Annotated[str | None, Query(description="ISO 8601 or an age: 24h, 7d")] = None,
    until: Annotated[str | None, Query(description="ISO 8601 or an age")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> JSONResponse:
    filters = ops.AnalysisFilter(
        failure_class=failure_class,
        kind=kind,
        framework=framework,
        job_id=job_id,
        host=host,
        status=status,
        source=source,
        rule_id=rule_id,
        fingerprint=fingerprint,
        since=parse_time(since, name="since"),
        until=parse_time(until, name="until"),
        labels=parse_labels(label or []),
    )
    base = base_url(request, ctx)
    try:
        items, next_cursor = ops.history(ctx, filters=filters, limit=limit, cursor=cursor, base=base)
    except UsageError as exc:  # a cursor that is not one of ours
        raise ValidationFailedError(exc.detail) from None
    next_url = None
    if next_cursor:
        page = request.url.include_query_params(cursor=next_cursor)
        next_url = f"{base}{page.path}?{page.query}"  # never from the Host unless trusted
    body = {
        "items": items,
        "next_cursor": next_cursor,
        "links": {"next": next_url},
    }
    headers = {"Link": f'<{next_url}>; rel="next"'} if next_url else {}
    return JSONResponse(body, headers=headers)


@router.post(
    "/analyses/{analysis_id}/feedback",
    status_code=201,
    response_model=FeedbackOut,
    summary="Tell us whether the root cause was right",
    responses=problems(400, 401, 403, 404, 422),
)
def post_feedback(
    analysis_id: str, body: FeedbackIn, request: Request, ctx: CtxDep, principal: ReadDep
) -> JSONResponse:
    out = ops.record_feedback(
        ctx,
        analysis_id=analysis_id,
        verdict=body.verdict,
        correct_class=body.correct_class,
        comment=body.comment,
        principal=principal,
    )
    url = present.analysis_url(base_url(request, ctx), out["analysis_id"])
    return JSONResponse(out, status_code=201, headers={"Location": url})


def change_summary(changes: dict[str, Any]) -> str:
    before, after = changes["before"], changes["after"]
    if changes["root_cause_changed"]:
        return f"moved from {before['failure_class']} to {after['failure_class']}"
    extra = []
    if changes["added_rules"]:
        extra.append("new findings: " + ", ".join(changes["added_rules"]))
    if changes["removed_rules"]:
        extra.append("findings gone: " + ", ".join(changes["removed_rules"]))
    text = f"root cause unchanged ({after['failure_class']})"
    return text + ("; " + "; ".join(extra) if extra else "")


@router.post(
    "/analyses/{analysis_id}/retriage",
    response_model=RetriageOut,
    summary="Re-run with the current rule library and show what changed",
    responses=problems(401, 403, 404, 409, 503),
)
async def retriage(analysis_id: str, request: Request, ctx: CtxDep, _principal: AdminDep) -> JSONResponse:
    aid, changes = await ctx.service.retriage(analysis_id)
    base = base_url(request, ctx)
    res = await asyncio.to_thread(ops.load_resource, ctx, analysis_id=aid, base=base, principal=None)
    if changes:
        # what was posted about it says what the analysis says now (updated in place)
        notify_.announce_change(ctx, analysis_id=aid, base=base, note="updated after a re-triage")
    return JSONResponse({"summary": change_summary(changes), "changes": changes, "analysis": res})
