"""/api/v1/jobs and /api/v1/hosts: outcomes of reruns, and the hosts to leave out (issue 24)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from app.api.schemas import HostClearIn, OutcomeIn, OutcomeOut
from app.http.deps import AdminDep, CtxDep, IngestDep, ReadDep
from app.http.openapi import problems
from app.http.shared import base_url, parse_time
from app.service import outcomes

router = APIRouter(prefix="/api/v1", tags=["jobs"])


@router.post(
    "/jobs/{job_id}/outcomes",
    status_code=201,
    response_model=OutcomeOut,
    summary="How the next attempt after a failure ended (the history behind each action)",
    responses={
        200: {"description": "This attempt (or this failure's outcome) was recorded before"},
        **problems(400, 401, 403, 404, 409, 422),
    },
)
def post_outcome(
    job_id: str, body: OutcomeIn, request: Request, ctx: CtxDep, principal: IngestDep
) -> JSONResponse:
    base = base_url(request, ctx)
    rec = outcomes.record_outcome(
        ctx,
        job_id=job_id,
        status=body.status,
        action=body.action,
        attempt_id=body.attempt_id,
        analysis_id=body.analysis_id,
        started_at=parse_time(body.started_at, name="started_at"),
        excluded_hosts=body.excluded_hosts,
        detail=body.detail,
        principal=principal,
        base=base,
    )
    return JSONResponse(rec.outcome, status_code=201 if rec.created else 200)


@router.get(
    "/jobs/{job_id}/outcomes",
    response_model=list[OutcomeOut],
    summary="The outcomes recorded for a job, newest first",
    responses=problems(401, 403),
)
def get_outcomes(job_id: str, request: Request, ctx: CtxDep, _principal: ReadDep) -> list[dict[str, Any]]:
    return outcomes.job_outcomes(ctx, job_id=job_id, base=base_url(request, ctx))


@router.get(
    "/hosts/exclude",
    summary="Hosts to leave out: hardware failures in several jobs (SLURM, Kubernetes, Ray, plain forms)",
    responses={
        200: {
            "description": "JSON (hosts, window, forms), or with `format` one form as text",
            "content": {"application/json": {}, "text/plain": {"schema": {"type": "string"}}},
        },
        **problems(401, 403, 422),
    },
)
def get_exclude(
    ctx: CtxDep,
    _principal: ReadDep,
    days: Annotated[
        int | None, Query(ge=1, le=3650, description="window (default: the recurrence window)")
    ] = None,
    min_jobs: Annotated[int | None, Query(ge=1, le=10000, description="jobs a host must have failed")] = None,
    format: Annotated[Literal["json", "slurm", "kubernetes", "ray", "plain"], Query()] = "json",
) -> Response:
    ex = outcomes.exclude_list(ctx, days=days, min_jobs=min_jobs)
    forms = ex.forms()
    if format != "json":
        text = forms[format]
        return PlainTextResponse(text + "\n" if text else "")
    return JSONResponse({"hosts": ex.hosts, "days": ex.days, "min_jobs": ex.min_jobs, "forms": forms})


@router.post(
    "/hosts/{host}/clear",
    summary="Mark a host repaired: its earlier hardware failures stop counting",
    responses=problems(400, 401, 403, 422),
)
def clear_host(host: str, body: HostClearIn, ctx: CtxDep, principal: AdminDep) -> dict[str, Any]:
    return outcomes.clear_host(ctx, host=host, note=body.note, principal=principal)
