"""/api/v1/clusters, /api/v1/groups and /api/v1/analyses/{id}/similar: the unknowns inbox,
failure groups' triage state, and similar past failures (issue 23)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from app.api.schemas import DraftIn, GroupIn, PublishIn
from app.http.deps import CtxDep, PrincipalDep, ReadDep
from app.http.openapi import problems
from app.service import drafts, learn

router = APIRouter(prefix="/api/v1", tags=["learn"])


@router.get(
    "/clusters",
    summary="Failure groups: with unknown=true the analyses no rule named (or marked wrong), "
    "grouped by the error line their logs end with",
    responses=problems(401, 403, 422),
)
def get_clusters(
    ctx: CtxDep,
    principal: ReadDep,
    unknown: Annotated[bool, Query(description="only failures with no named cause (the inbox)")] = True,
    status: Annotated[
        str | None, Query(description="open (default), resolved, ignored or all", max_length=20)
    ] = "open",
    days: Annotated[int | None, Query(ge=1, le=3650, description="created within the last N days")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    items = learn.list_clusters(
        ctx,
        principal=principal,
        unknown=unknown,
        days=days,
        status=None if status == "all" else status,
        limit=limit,
    )
    return {"items": [c.as_dict() for c in items]}


@router.patch(
    "/groups/{group_id}",
    summary="Triage a failure group (t:<template key> from the inbox, f:<fingerprint>): status, "
    "assignee, note, tracker link",
    responses=problems(400, 401, 403, 404, 422),
)
def patch_group(group_id: str, body: GroupIn, ctx: CtxDep, principal: ReadDep) -> dict[str, Any]:
    return learn.update_group(
        ctx,
        group_id=group_id,
        principal=principal,
        status=body.status,
        assignee=body.assignee,
        note=body.note,
        tracker_url=body.tracker_url,
        clear=tuple(body.clear),
    )


@router.get(
    "/analyses/{analysis_id}/similar",
    summary="Earlier failures whose logs end with lines of the same templates, with their "
    "feedback and their group's note",
    responses=problems(401, 403, 404, 422),
)
def get_similar(
    analysis_id: str,
    ctx: CtxDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=50)] = 5,
) -> dict[str, Any]:
    items = learn.similar_failures(ctx, analysis_id=analysis_id, principal=principal, limit=limit)
    return {"items": [s.as_dict() for s in items]}


@router.post(
    "/rules/drafts",
    status_code=201,
    summary="Draft a rule from a cluster of the unknowns inbox, or from lines of an analysis' log; "
    "back-tested on the stored analyses",
    responses=problems(400, 401, 403, 404, 422),
)
def post_draft(body: DraftIn, ctx: CtxDep, principal: PrincipalDep) -> JSONResponse:
    out = drafts.create_draft(
        ctx,
        principal=principal,
        cluster_id=body.cluster_id,
        analysis_id=body.analysis_id,
        file=body.file,
        lines=body.lines,
        analysis_ids=body.analysis_ids,
    )
    return JSONResponse(out, status_code=201)


@router.get(
    "/rules/drafts/{draft_id}",
    summary="A rule draft, its lint problems and its back-test",
    responses=problems(401, 403, 404),
)
def get_draft(draft_id: str, ctx: CtxDep, principal: PrincipalDep) -> dict[str, Any]:
    return drafts.get_draft(ctx, draft_id=draft_id, principal=principal)


@router.post(
    "/rules/drafts/{draft_id}/publish",
    status_code=201,
    summary="Publish a draft into the site rule pack (scope rules:write): new analyses use it at once",
    responses=problems(400, 401, 403, 404, 409, 422),
)
def publish_draft(draft_id: str, body: PublishIn, ctx: CtxDep, principal: PrincipalDep) -> JSONResponse:
    out = drafts.publish_draft(
        ctx, draft_id=draft_id, principal=principal, overrides=body.model_dump(exclude_none=True)
    )
    return JSONResponse(out, status_code=201)


@router.get(
    "/rules/site",
    summary="The site rule pack: every published version (author, time, diff): the audit trail",
    responses=problems(401, 403),
)
def get_site_rules(ctx: CtxDep, _principal: ReadDep) -> dict[str, Any]:
    return {"items": drafts.site_rules(ctx)}


@router.get(
    "/feedback/summary",
    summary="What verdicts say: the labelled history's accuracy per month, each rule's precision "
    "(flagged when low), and analyses marked wrong the same way (rules to draft)",
    responses=problems(401, 403),
)
def get_feedback_summary(ctx: CtxDep, principal: ReadDep) -> dict[str, Any]:
    return learn.feedback_summary(ctx, principal=principal)
