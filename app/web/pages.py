"""What every web page shares: who is asking, the CSRF token, rendering, sign-in redirects.

Pages authenticate exactly like the API (`app.http.deps.authenticate`: a token, the browser's
signed session cookie, or open mode on loopback). A page that needs a sign-in the browser does
not have redirects to /login instead of answering 401.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import HTTPBasicCredentials
from fastapi.security.http import HTTPAuthorizationCredentials

from app import __version__
from app.errors import AuthError, ForbiddenError, LoginRequiredError
from app.http.context import AppContext
from app.http.deps import CtxDep, basic_scheme, bearer_scheme, principal_of, request_session
from app.http.session import BrowserSession
from app.service.access import Principal

STATIC_DIR = Path(__file__).resolve().parent / "static"


def login_redirect(exc: LoginRequiredError) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(exc.next_url, safe='/?=&')}", status_code=303)


def _next_of(request: Request) -> str:
    path = request.url.path
    return path + (f"?{request.url.query}" if request.url.query else "")


async def web_principal(
    request: Request,
    ctx: CtxDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    basic: Annotated[HTTPBasicCredentials | None, Depends(basic_scheme)],
) -> Principal:
    try:
        return await principal_of(request, ctx, bearer)
    except AuthError as exc:
        raise LoginRequiredError(exc.detail, next_url=_next_of(request)) from None


async def form_principal(
    request: Request,
    ctx: CtxDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    basic: Annotated[HTTPBasicCredentials | None, Depends(basic_scheme)],
) -> Principal:
    """`web_principal` for a route that receives a page's form: a browser without JavaScript
    sends the CSRF token as the form's `csrf_token` field, not as a header. Every route using
    it checks that field with `csrf_ok` before it acts (a test posts each form without it)."""
    try:
        return await principal_of(request, ctx, bearer, csrf_in_form=True)
    except AuthError as exc:
        raise LoginRequiredError(exc.detail, next_url=_next_of(request)) from None


WebPrincipal = Annotated[Principal, Depends(web_principal)]
FormPrincipal = Annotated[Principal, Depends(form_principal)]


def require_page(principal: Principal, scope: str, what: str) -> None:
    if not principal.allows(scope):
        raise ForbiddenError(
            f"signed in as {principal.name!r}, whose token has scopes "
            f"{' '.join(sorted(principal.scopes)) or 'none'}; {what} needs `{scope}`"
        )


def browser_session(request: Request, ctx: AppContext) -> BrowserSession:
    """The request's session, or a new anonymous one (sent with the response by `render`)."""
    session = request_session(request, ctx)
    if session is None:
        session = getattr(request.state, "new_session", None) or ctx.sessions.anonymous()
        request.state.new_session = session
    return session


def csrf_ok(request: Request, ctx: AppContext, token: str | None) -> bool:
    return ctx.sessions.csrf_ok(request_session(request, ctx), token)


@lru_cache(maxsize=64)
def _static_version(name: str) -> str:
    # cache-busting by content: a deploy never serves a stale script with a new page
    try:
        return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:10]
    except OSError:
        return __version__


def static_url(name: str) -> str:
    return f"/static/{name}?v={_static_version(name)}"


def render(
    request: Request,
    ctx: AppContext,
    template: str,
    *,
    principal: Principal | None,
    nav: str | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:
    session = browser_session(request, ctx)
    html = request.app.state.templates.get_template(template).render(
        request=request,
        principal=principal,
        nav=nav,
        csrf_token=ctx.sessions.csrf_token(session),
        static=static_url,
        version=__version__,
        library_version=ctx.library.version,
        api_docs=ctx.settings.api_docs,
        classes=ctx.library.classes,
        **context,
    )
    response = HTMLResponse(html, status_code=status, headers=headers)
    attach_session(response, ctx, session)
    return response


def attach_session(response: Response, ctx: AppContext, session: BrowserSession) -> None:
    if session.new:
        response.set_cookie(**ctx.sessions.cookie_args(session))
