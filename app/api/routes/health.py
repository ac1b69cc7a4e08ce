"""/healthz (the process answers) and /readyz (database, schema, blob store, scan workers)."""

from __future__ import annotations

import shutil
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import CtxDep
from app.api.errors import PROBLEM_JSON, problem_body
from app.api.schemas import Health
from app.db.migrate import current_revision, head_revision
from app.errors import LogtriageError

router = APIRouter(tags=["health"])
MIN_FREE_BYTES = 64 << 20  # less than this free on the data directory's disk: not ready


@router.get("/healthz", response_model=Health, summary="Liveness")
def healthz() -> dict[str, Any]:
    return {"status": "ok", "checks": {}}


@router.get(
    "/readyz", response_model=Health, summary="Readiness", responses={503: {"description": "Not ready"}}
)
def readyz(request: Request, ctx: CtxDep) -> JSONResponse:
    checks: dict[str, Any] = {}
    problems: list[str] = []
    try:
        with ctx.db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
        current, head = current_revision(ctx.db.engine), head_revision()
        checks["schema"] = current
        if current != head:
            problems.append(f"database schema at {current}, code expects {head}: run `logtriage db upgrade`")
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
        problems.append("database unreachable")
    try:
        free = shutil.disk_usage(ctx.settings.data_dir).free
        checks["disk_free_mib"] = free >> 20
        if free < MIN_FREE_BYTES:
            # uploads would fail with 507: take this server out of the balancer until space is freed
            problems.append(f"the data directory's disk is full ({free >> 20} MiB free)")
    except OSError as exc:
        checks["disk_free_mib"] = f"error: {exc.strerror}"
    try:
        ctx.store.check_writable()
        checks["blob_store"] = "ok"
    except OSError as exc:
        checks["blob_store"] = f"error: {exc.strerror}"
        problems.append("data directory not writable")
    except LogtriageError as exc:
        checks["blob_store"] = f"error: {exc.detail}"
        problems.append("blob store unreachable")
    checks["scan_workers"] = "ok" if ctx.pool.ready.is_set() else "failed" if ctx.pool.failure else "starting"
    if ctx.pool.failure:
        problems.append(f"scan workers failed to start: {ctx.pool.failure}")
    elif not ctx.pool.ready.is_set():
        problems.append("scan workers are still starting (compiling the rule library)")
    checks["library_version"] = ctx.library.version
    if problems:
        body = problem_body(
            status=503,
            slug="service-unavailable",
            title="Service unavailable",
            detail="; ".join(problems),
            instance=request.url.path,
            extra={"checks": checks},
        )
        return JSONResponse(body, status_code=503, media_type=PROBLEM_JSON)
    return JSONResponse({"status": "ready", "checks": checks})
