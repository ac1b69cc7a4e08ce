"""/analyses/{id}: the report page (the permalink), and its feedback form."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.errors import AnalysisNotReadyError, ForbiddenError, ValidationFailedError
from app.http.context import AppContext
from app.http.deps import CtxDep, PrincipalDep
from app.http.openapi import problems
from app.http.shared import base_url
from app.render.action import DECISION_LABELS, headline
from app.service import learn, ops, present
from app.service.access import Principal
from app.web import report_view
from app.web.pages import FormPrincipal, WebPrincipal, csrf_ok, render, require_page
from app.web.timeline_view import timeline_view

router = APIRouter(include_in_schema=False)
# the report page is also the REST API's `report.html` (documented with the API's routes)
api_router = APIRouter(prefix="/api/v1", tags=["analyses"])


@router.get("/analyses/{analysis_id}")
async def report_page(
    analysis_id: str, request: Request, ctx: CtxDep, principal: WebPrincipal, feedback: str | None = None
) -> Response:
    return await render_report(request, ctx, principal, analysis_id=analysis_id, feedback=feedback)


@api_router.get(
    "/analyses/{analysis_id}/report.html",
    summary="The report as HTML (the permalink)",
    response_class=HTMLResponse,
    responses=problems(401, 403, 404, 409),
)
async def report_html(analysis_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep) -> Response:
    await asyncio.to_thread(ops.check_readable, ctx, analysis_id=analysis_id, principal=principal, done=True)
    return await render_report(request, ctx, principal, analysis_id=analysis_id)


async def render_report(
    request: Request,
    ctx: AppContext,
    principal: Principal,
    *,
    analysis_id: str,
    feedback: str | None = None,
) -> Response:
    """The report page (also served as the API's report.html)."""
    base = base_url(request, ctx)
    try:
        report = await asyncio.to_thread(
            ops.load_report, ctx, analysis_id=analysis_id, base=base, principal=principal
        )
    except AnalysisNotReadyError:
        res = await asyncio.to_thread(
            ops.load_resource, ctx, analysis_id=analysis_id, base=base, principal=principal
        )
        status = 200 if res["status"] == "pending" else 409
        headers = {"Refresh": "2"} if res["status"] == "pending" else None
        return render(
            request,
            ctx,
            "pending.html",
            principal=principal,
            nav="history",
            a=res,
            status=status,
            headers=headers,
        )
    a = report.resource
    root = a.get("root_cause")
    # other analyses: an ingest token (a job's hook) reads only what it posted, so only a reader
    # is shown them
    similar = (
        await asyncio.to_thread(learn.similar_failures, ctx, analysis_id=a["id"], principal=principal)
        if principal.allows("read")
        else []
    )
    group = (
        await asyncio.to_thread(learn.group_of, ctx, analysis_id=a["id"], principal=principal)
        if principal.allows("read")
        else None
    )
    views = {id(f): report_view.finding_view(a, f, ctx.library) for f in a.get("findings") or []}
    return render(
        request,
        ctx,
        "report.html",
        principal=principal,
        nav="history",
        a=a,
        root=root,
        root_view=report_view.finding_view(a, root, ctx.library) if root else None,
        root_view_for=lambda f: views[id(f)],
        symptoms=[f for f in a.get("findings") or [] if f["role"] == "symptom"],
        related=[f for f in a.get("findings") or [] if f["role"] == "related"],
        kind=report_view.kind_info(ctx.library, root["kind"] if root else "unknown"),
        rule_texts=report.rule_texts,
        others=report.fingerprint_history,
        similar=similar,
        group=group,
        markdown=report_view.report_markdown(a),
        feedback_state=feedback,
        can_feedback=principal.allows("read"),
        viewer_href=report_view.viewer_href,
        possible_evidence=lambda pc: report_view.possible_evidence(a, pc, ctx.library),
        api_url=present.analysis_url(base, a["id"]),
        tl=timeline_view(a),
        facts=report_view.fact_rows(a),
        action=a.get("action"),
        action_label=DECISION_LABELS.get((a.get("action") or {}).get("decision", ""), ""),
        action_headline=headline(a["action"]) if a.get("action") else "",
    )


@router.post("/analyses/{analysis_id}/feedback")
async def feedback_form(
    analysis_id: str,
    request: Request,
    ctx: CtxDep,
    principal: FormPrincipal,
    verdict: Annotated[str, Form(max_length=16)],
    csrf_token: Annotated[str, Form(max_length=256)] = "",
    correct_class: Annotated[str, Form(max_length=100)] = "",
    comment: Annotated[str, Form(max_length=4000)] = "",
) -> Response:
    require_page(principal, "read", "giving feedback")
    if not csrf_ok(request, ctx, csrf_token):
        raise ForbiddenError("the feedback form expired (missing or wrong CSRF token); reload the page")
    if verdict not in ("correct", "wrong"):
        raise ValidationFailedError("pick `correct` or `wrong`")

    def _store() -> None:
        ops.record_feedback(
            ctx,
            analysis_id=analysis_id,
            verdict=verdict,
            correct_class=(correct_class or None) if verdict == "wrong" else None,
            comment=comment.strip() or None,
            principal=principal,
        )

    await asyncio.to_thread(_store)
    return RedirectResponse(f"/analyses/{analysis_id.upper()}?feedback=thanks#feedback", status_code=303)
