"""/login and /logout: an API token exchanged for a signed, HttpOnly session cookie."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from app.errors import AuthError, ForbiddenError
from app.http.deps import CtxDep, read_token, request_session
from app.service import tokens
from app.web.pages import attach_session, browser_session, csrf_ok, render

router = APIRouter(include_in_schema=False)


def _safe_next(value: str | None) -> str:
    # only a path of this site: never an open redirect to another host
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


@router.get("/login")
async def login_page(request: Request, ctx: CtxDep, next: str | None = None) -> Response:
    return render(request, ctx, "login.html", principal=None, next=_safe_next(next), error=None)


@router.post("/login")
async def login(
    request: Request,
    ctx: CtxDep,
    token: Annotated[str, Form(max_length=512)],
    csrf_token: Annotated[str, Form(max_length=256)] = "",
    next: Annotated[str, Form(max_length=2048)] = "/",
) -> Response:
    target = _safe_next(next)
    if not csrf_ok(request, ctx, csrf_token):
        browser_session(request, ctx)
        err: AuthError | ForbiddenError = ForbiddenError("the sign-in form expired; try again")
        return render(request, ctx, "login.html", principal=None, next=target, error=err, status=403)
    token_hash = tokens.hash_token(token.strip())
    known = await asyncio.to_thread(read_token, ctx, token_hash)
    if known is None or known.expired(tokens.now()):
        err = AuthError("that token is unknown, revoked or expired")
        return render(request, ctx, "login.html", principal=None, next=target, error=err, status=401)
    expires = known.expires_at.timestamp() if known.expires_at else None
    session = ctx.sessions.signed_in(token_hash=token_hash, token_name=known.name, token_expires=expires)
    response = RedirectResponse(target, status_code=303)
    attach_session(response, ctx, session)
    return response


@router.post("/logout")
async def logout(
    request: Request, ctx: CtxDep, csrf_token: Annotated[str, Form(max_length=256)] = ""
) -> Response:
    if request_session(request, ctx) is not None and not csrf_ok(request, ctx, csrf_token):
        raise ForbiddenError("the sign-out form expired; reload the page and try again")
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie("lt_session", path="/")
    return response
