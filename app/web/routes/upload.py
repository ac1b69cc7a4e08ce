"""/ : the upload page. The page's script posts to the REST endpoint (the same streaming path as
a hook, with a progress bar); without JavaScript the form posts to /upload, handled here by the
same intake and the same `ops.submit`."""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from app.engine.pipeline.library import FRAMEWORKS
from app.errors import ForbiddenError, LogtriageError
from app.http.deps import CtxDep
from app.http.shared import base_url
from app.http.upload import CSRF_REFUSED, Upload, check_declared_length, intake_of, receive
from app.service import ops
from app.service.jobs import InputFile
from app.service.spool import Staging
from app.web.pages import FormPrincipal, WebPrincipal, csrf_ok, render, require_page

router = APIRouter(include_in_schema=False)
PASTE_LIMIT = 8 << 20  # a pasted excerpt, sent url-encoded; files come as multipart


def _page(
    request: Request, ctx: CtxDep, principal: WebPrincipal, *, error: LogtriageError | None = None
) -> Response:
    recent: list[dict[str, object]] = []
    if principal.allows("read"):
        recent, _ = ops.history(
            ctx, filters=ops.AnalysisFilter(), limit=5, cursor=None, base=base_url(request, ctx)
        )
    return render(
        request,
        ctx,
        "upload.html",
        principal=principal,
        nav="upload",
        status=error.http_status if error else 200,
        frameworks=FRAMEWORKS,
        max_upload_bytes=ctx.settings.max_upload_bytes,
        can_upload=principal.allows("ingest"),
        recent=recent,
        error=error,
    )


@router.get("/")
async def upload_page(request: Request, ctx: CtxDep, principal: WebPrincipal) -> Response:
    return _page(request, ctx, principal)


@router.post("/upload")
async def upload_form(request: Request, ctx: CtxDep, principal: FormPrincipal) -> Response:
    """The form, sent without JavaScript: analyse, then show the report (303)."""
    require_page(principal, "ingest", "uploading a log")
    with ops.staged_upload(ctx) as staging:  # not handed to an analysis (a refused form): removed
        if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            # a form without file inputs filled (a paste only) may come urlencoded
            return await _pasted_form(request, ctx, principal, staging)
        try:
            # the form's csrf_token is checked as the body streams by, before any file is kept
            upload = await receive(
                request,
                spool=staging.path,
                limit=ctx.settings.max_upload_bytes,
                raw_name=None,
                form=True,
                csrf=lambda token: csrf_ok(request, ctx, token),
            )
            if not csrf_ok(request, ctx, (upload.fields.get("csrf_token") or [""])[-1]):
                raise ForbiddenError(CSRF_REFUSED)
            if not upload.files:
                raise LogtriageError("choose a log file, a folder, or paste a traceback first")
        except LogtriageError as exc:
            return _page(request, ctx, principal, error=exc)
        return await _analyse(request, ctx, principal, upload, staging)


async def _pasted_form(request: Request, ctx: CtxDep, principal: WebPrincipal, staging: Staging) -> Response:
    try:
        check_declared_length(request, PASTE_LIMIT)
        form = await request.form(max_fields=32, max_part_size=PASTE_LIMIT)
        if not csrf_ok(request, ctx, str(form.get("csrf_token") or "")):
            raise ForbiddenError(CSRF_REFUSED)
        text = str(form.get("text") or "")
        if not text.strip():
            raise LogtriageError("choose a log file, a folder, or paste a traceback first")
        data = text.encode("utf-8")
        fields = {k: [str(v)] for k, v in form.items() if k in ("job_id", "framework") and str(v)}
        upload = Upload(
            files=[InputFile("pasted.log", str(staging.path / "in-0"), data=data)],
            fields=fields,
            parts=[("log", "pasted.log", hashlib.sha256(data).hexdigest())],
            total_bytes=len(data),
        )
    except LogtriageError as exc:
        return _page(request, ctx, principal, error=exc)
    return await _analyse(request, ctx, principal, upload, staging)


async def _analyse(
    request: Request, ctx: CtxDep, principal: WebPrincipal, upload: Upload, staging: Staging
) -> Response:
    try:
        intake = intake_of(upload, query={}, labels=[], source="web")
    except LogtriageError as exc:
        return _page(request, ctx, principal, error=exc)
    try:
        submission = await ops.submit(
            ctx,
            job=intake.job,
            staging=staging,
            meta=intake.meta,
            principal=principal,
            idempotency_key=None,
            request_digest=intake.digest,
            wait=ctx.settings.sync_wait,
            client=request.client.host if request.client else None,
        )
    except LogtriageError as exc:  # the log itself was refused (binary, empty, too large)
        return _page(request, ctx, principal, error=exc)
    return RedirectResponse(f"/analyses/{submission.analysis_id}", status_code=303)
