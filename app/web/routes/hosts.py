"""/hosts: the lemon-node ledger (issue 24): hosts behind hardware failures in several jobs, in
the forms schedulers take, and a way for an operator to clear a host after a repair."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from app.errors import ForbiddenError
from app.http.deps import CtxDep
from app.service import outcomes
from app.web.pages import FormPrincipal, WebPrincipal, csrf_ok, render, require_page

router = APIRouter(include_in_schema=False)


@router.get("/hosts")
async def hosts_page(request: Request, ctx: CtxDep, principal: WebPrincipal, cleared: str = "") -> Response:
    require_page(principal, "read", "the hosts to leave out")
    ex = await asyncio.to_thread(outcomes.exclude_list, ctx)
    return render(
        request,
        ctx,
        "hosts.html",
        principal=principal,
        nav="hosts",
        ex=ex,
        forms=ex.forms(),
        cleared=cleared[:255],
        can_clear=principal is not None and principal.allows("admin"),
    )


@router.post("/hosts/clear")
async def clear_host_form(
    request: Request,
    ctx: CtxDep,
    principal: FormPrincipal,
    host: Annotated[str, Form(max_length=255)],
    csrf_token: Annotated[str, Form(max_length=256)] = "",
    note: Annotated[str, Form(max_length=4000)] = "",
) -> Response:
    require_page(principal, "admin", "clearing a host")
    if not csrf_ok(request, ctx, csrf_token):
        raise ForbiddenError("the form expired (missing or wrong CSRF token); reload the page")
    await asyncio.to_thread(
        outcomes.clear_host, ctx, host=host, note=note.strip() or None, principal=principal
    )
    return RedirectResponse(f"/hosts?cleared={host}", status_code=303)
