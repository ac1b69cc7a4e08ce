"""/unknowns and /rules/drafts/*: teaching the service in the browser (issue 23). The unknowns
inbox (failure groups no rule names, with their triage state), a rule drafted from a cluster or
from lines picked in the log viewer, its back-test, and publishing it into the site rule pack;
then a list of the analyses it matches to re-triage.

Every page and form works without JavaScript. Log lines reach the templates as plain strings
and are escaped there like any other text (never marked safe): a drafted pattern made from a
hostile line shows as that line's characters.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from app.errors import ForbiddenError, NotFoundError, ValidationFailedError
from app.http.deps import CtxDep
from app.http.shared import base_url
from app.service import drafts, learn
from app.service import notify as notify_
from app.service.access import Principal
from app.web.pages import FormPrincipal, WebPrincipal, csrf_ok, render, require_page

router = APIRouter(include_in_schema=False)

STATUS_FILTERS = ("open", "resolved", "ignored", "all")
SITE_KINDS = ("hardware", "infra", "config", "code", "numerics", "unknown")
MAX_PICKED = 50  # line numbers one draft is made from (the service's own limit)


def _csrf(request: Request, ctx: Any, token: str) -> None:
    if not csrf_ok(request, ctx, token):
        raise ForbiddenError("the form expired (missing or wrong CSRF token); reload the page")


def _can_draft(principal: Principal) -> bool:
    return principal.allows("read") and principal.allows("ingest")


def _require_draft(principal: Principal) -> None:
    if not _can_draft(principal):
        raise ForbiddenError(
            f"signed in as {principal.name!r}, whose token has scopes "
            f"{' '.join(sorted(principal.scopes)) or 'none'}; drafting a rule needs `read` and `ingest`"
        )


# --- the unknowns inbox ----------------------------------------------------------------------------


@router.get("/unknowns")
async def unknowns_page(
    request: Request,
    ctx: CtxDep,
    principal: WebPrincipal,
    status: str = "open",
    saved: str = "",
) -> Response:
    return await _groups(request, ctx, principal, status=status, saved=saved, known=False)


@router.get("/groups")
async def groups_page(
    request: Request,
    ctx: CtxDep,
    principal: WebPrincipal,
    status: str = "open",
    saved: str = "",
) -> Response:
    """Named failures as groups (a fingerprint each), triaged like the unknowns inbox's."""
    return await _groups(request, ctx, principal, status=status, saved=saved, known=True)


async def _groups(
    request: Request, ctx: Any, principal: Principal, *, status: str, saved: str, known: bool
) -> Response:
    """The unknowns inbox, or (``known``) the named failures' groups: one page, two lists."""
    require_page(principal, "read", "the failure groups" if known else "the unknowns inbox")
    if status not in STATUS_FILTERS:
        raise ValidationFailedError(f"status is one of {', '.join(STATUS_FILTERS)}, not {status[:20]!r}")
    wanted = None if status == "all" else status
    clusters = await asyncio.to_thread(
        learn.list_clusters, ctx, principal=principal, unknown=not known, status=wanted
    )
    return render(
        request,
        ctx,
        "unknowns.html",
        principal=principal,
        nav="history" if known else "learn",
        clusters=clusters,
        shown=status,
        statuses=learn.GROUP_STATUSES,
        filters=STATUS_FILTERS,
        saved=saved[:40],
        can_draft=not known and _can_draft(principal),
        known=known,
        here="/groups" if known else "/unknowns",
    )


@router.post("/unknowns/groups")
async def group_form(
    request: Request,
    ctx: CtxDep,
    principal: FormPrincipal,
    group_id: Annotated[str, Form(max_length=40)],
    csrf_token: Annotated[str, Form(max_length=256)] = "",
    status: Annotated[str, Form(max_length=20)] = "",
    assignee: Annotated[str, Form(max_length=200)] = "",
    note: Annotated[str, Form(max_length=4000)] = "",
    tracker_url: Annotated[str, Form(max_length=2000)] = "",
    back: Annotated[str, Form(max_length=40)] = "open",
) -> Response:
    """One cluster's triage state; an emptied field is cleared (a form cannot send 'absent')."""
    require_page(principal, "read", "triaging a failure group")
    _csrf(request, ctx, csrf_token)
    fields = {"assignee": assignee.strip(), "note": note.strip(), "tracker_url": tracker_url.strip()}
    await asyncio.to_thread(
        learn.update_group,
        ctx,
        group_id=group_id,
        principal=principal,
        status=status or None,
        clear=tuple(k for k, v in fields.items() if not v),
        **{k: v for k, v in fields.items() if v},
    )
    m = re.fullmatch(r"a:([0-9A-Za-z]{26})", back)
    if m:  # from a report's group card: back to that report
        return RedirectResponse(f"/analyses/{m.group(1).upper()}#group", status_code=303)
    known = back.startswith("g:")
    back = back.removeprefix("g:")
    back = back if back in STATUS_FILTERS else "open"
    anchor = "c-" + re.sub(r"[^0-9a-z]", "-", group_id.lower())
    page = "/groups" if known else "/unknowns"
    return RedirectResponse(f"{page}?status={back}&saved={quote(group_id)}#{anchor}", status_code=303)


# --- drafts ------------------------------------------------------------------------------------------


def parse_lines(text: str) -> list[int]:
    """Line numbers as people write them: ``120-140``, ``L120-L140``, ``12, 15 20``."""
    out: list[int] = []
    for part in re.split(r"[\s,]+", text.strip()):
        if not part:
            continue
        m = re.fullmatch(r"L?(\d{1,9})(?:-L?(\d{1,9}))?", part, re.I)
        if m is None:
            raise ValidationFailedError(f"lines are numbers or ranges (120, 120-140), not {part[:20]!r}")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            a, b = b, a
        if b - a >= MAX_PICKED:
            raise ValidationFailedError(f"a rule is drafted from at most {MAX_PICKED} lines")
        out.extend(range(a, b + 1))
        if len(out) > MAX_PICKED:
            raise ValidationFailedError(f"a rule is drafted from at most {MAX_PICKED} lines")
    if not out:
        raise ValidationFailedError("name the line numbers to draft from (120, or 120-140)")
    return out


@router.post("/rules/drafts")
async def draft_form(
    request: Request,
    ctx: CtxDep,
    principal: FormPrincipal,
    csrf_token: Annotated[str, Form(max_length=256)] = "",
    cluster_id: Annotated[str, Form(max_length=40)] = "",
    analysis_id: Annotated[str, Form(max_length=26)] = "",
    file: Annotated[str, Form(max_length=6)] = "0",
    lines: Annotated[str, Form(max_length=400)] = "",
) -> Response:
    """A draft from a cluster of the inbox, or from lines of a log in the viewer."""
    _require_draft(principal)
    _csrf(request, ctx, csrf_token)
    if not file.isdigit():
        raise ValidationFailedError(f"file is a number (0 the first), not {file[:20]!r}")
    picked = parse_lines(lines) if analysis_id else None
    out = await asyncio.to_thread(
        drafts.create_draft,
        ctx,
        principal=principal,
        cluster_id=cluster_id or None,
        analysis_id=analysis_id or None,
        file=int(file),
        lines=picked,
    )
    return RedirectResponse(f"/rules/drafts/{out['id']}", status_code=303)


def _class_choices(ctx: Any, site: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(id, summary) of every class a rule may name: the library's and the site's."""
    seen = {cid: c.summary for cid, c in ctx.library.classes.items() if cid != "unknown"}
    for entry in site:
        sc = entry.get("site_class") or {}
        if sc.get("id") and sc["id"] not in seen:
            seen[sc["id"]] = str(sc.get("summary") or "")
    return sorted(seen.items())


async def _draft_page(
    request: Request,
    ctx: Any,
    principal: Principal,
    draft_id: str,
    *,
    problem: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    d = await asyncio.to_thread(drafts.get_draft, ctx, draft_id=draft_id, principal=principal)
    site = await asyncio.to_thread(drafts.site_rules, ctx)
    rule = d["rule"]
    suggested = d.get("class_suggested") or ""
    values = {
        "id": rule.get("id", ""),
        "class_choice": suggested if suggested else "",
        "site_id": "",
        "site_kind": "infra",
        "site_summary": "",
        "title": rule.get("title", ""),
        "explanation": rule.get("explanation", ""),
        "remediation": rule.get("remediation", ""),
        "pattern": "",
        **(form or {}),
    }
    return render(
        request,
        ctx,
        "draft.html",
        principal=principal,
        nav="learn",
        status=422 if problem else 200,
        d=d,
        bt=d["backtest"],
        pattern=(rule.get("match") or {}).get("any", [d.get("pattern", "")])[0],
        choices=_class_choices(ctx, site),
        kinds=SITE_KINDS,
        values=values,
        problem=problem,
        can_publish=principal.allows("rules:write"),
    )


@router.get("/rules/drafts/{draft_id}")
async def draft_page(draft_id: str, request: Request, ctx: CtxDep, principal: WebPrincipal) -> Response:
    _require_draft(principal)
    return await _draft_page(request, ctx, principal, draft_id)


@router.post("/rules/drafts/{draft_id}/publish")
async def publish_form(
    draft_id: str,
    request: Request,
    ctx: CtxDep,
    principal: FormPrincipal,
    csrf_token: Annotated[str, Form(max_length=256)] = "",
    rule_id: Annotated[str, Form(max_length=100)] = "",
    failure_class: Annotated[str, Form(max_length=100)] = "",
    site_id: Annotated[str, Form(max_length=100)] = "",
    site_kind: Annotated[str, Form(max_length=20)] = "",
    site_summary: Annotated[str, Form(max_length=300)] = "",
    title: Annotated[str, Form(max_length=120)] = "",
    explanation: Annotated[str, Form(max_length=4000)] = "",
    remediation: Annotated[str, Form(max_length=8000)] = "",
    pattern: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    """Publish with the form's choices; a bad choice is answered with the draft page again,
    the form as it was sent and what to fix (422), not a bare error page."""
    require_page(principal, "rules:write", "publishing a rule")
    _csrf(request, ctx, csrf_token)
    sent = {
        "id": rule_id.strip(),
        "class_choice": failure_class.strip(),
        "site_id": site_id.strip(),
        "site_kind": site_kind.strip() or "infra",
        "site_summary": site_summary.strip(),
        "title": title.strip(),
        "explanation": explanation.strip(),
        "remediation": remediation.strip(),
        "pattern": pattern.strip(),
    }
    try:
        overrides = _overrides(sent)
        await asyncio.to_thread(
            drafts.publish_draft, ctx, draft_id=draft_id, principal=principal, overrides=overrides
        )
    except ValidationFailedError as exc:
        return await _draft_page(request, ctx, principal, draft_id, problem=str(exc), form=sent)
    return RedirectResponse(f"/rules/drafts/{draft_id.upper()}/published", status_code=303)


def _overrides(sent: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if sent["id"]:
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,99}", sent["id"]):
            raise ValidationFailedError("the rule id is lower-case letters, digits, dots, - and _")
        out["id"] = sent["id"]
    for key in ("title", "explanation", "remediation", "pattern"):
        if sent[key]:
            out[key] = sent[key]
    choice = sent["class_choice"]
    if choice == "new" or (not choice and sent["site_id"]):
        sid = sent["site_id"]
        if not sid.startswith("site."):
            sid = "site." + sid
        if not re.fullmatch(r"site\.[a-z0-9_]{1,90}", sid):
            raise ValidationFailedError("a new site class id is site.<name>: lower-case letters, digits, _")
        if sent["site_kind"] not in SITE_KINDS:
            raise ValidationFailedError(f"the kind is one of {', '.join(SITE_KINDS)}")
        if len(sent["site_summary"]) < 5:
            raise ValidationFailedError("say in a few words what the new class is (its summary)")
        out["site_class"] = {"id": sid, "kind": sent["site_kind"], "summary": sent["site_summary"]}
    elif choice:
        out["failure_class"] = choice
    return out


@router.get("/rules/drafts/{draft_id}/published")
async def published_page(
    draft_id: str, request: Request, ctx: CtxDep, principal: WebPrincipal, retriaged: str = ""
) -> Response:
    _require_draft(principal)
    d = await asyncio.to_thread(drafts.get_draft, ctx, draft_id=draft_id, principal=principal)
    if d.get("published_version") is None:
        raise NotFoundError(f"draft {d['id']} is not published yet")
    site = await asyncio.to_thread(drafts.site_rules, ctx)
    version = next((v for v in site if v["draft_id"] == d["id"]), None)
    if version is None:
        raise NotFoundError(f"no published rule of draft {d['id']}")
    return render(
        request,
        ctx,
        "draft_published.html",
        principal=principal,
        nav="learn",
        d=d,
        v=version,
        matched=d["backtest"]["analysis_ids"][:200],
        unknown=set(d["backtest"]["unknown"]),
        can_retriage=principal.allows("admin"),
        retriaged=retriaged[:26],
        base=base_url(request, ctx),
    )


@router.post("/analyses/{analysis_id}/retriage")
async def retriage_form(
    analysis_id: str,
    request: Request,
    ctx: CtxDep,
    principal: FormPrincipal,
    csrf_token: Annotated[str, Form(max_length=256)] = "",
    back: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """The existing re-triage (admin), from the published page's list; back to where it was."""
    require_page(principal, "admin", "re-triaging an analysis")
    _csrf(request, ctx, csrf_token)
    aid, changes = await ctx.service.retriage(analysis_id)
    if changes:
        # what was posted about it (Slack) says what the analysis says now, as the API's re-triage does
        notify_.announce_change(
            ctx, analysis_id=aid, base=base_url(request, ctx), note="updated after a re-triage"
        )
    # only a path of this site: never a redirect elsewhere
    if not re.fullmatch(r"/rules/drafts/[0-9A-Za-z]{26}/published", back):
        return RedirectResponse(f"/analyses/{aid}", status_code=303)
    return RedirectResponse(f"{back}?retriaged={aid}#a-{aid}", status_code=303)
