"""Errors on web pages: the same problem (status, title, detail) as the API's problem+json,
rendered as a page; a missing sign-in becomes a redirect to /login."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from app.errors import LoginRequiredError, LogtriageError
from app.web.pages import login_redirect, render


def page_for(request: Request, exc: LogtriageError, *, headers: dict[str, str] | None = None) -> Response:
    if isinstance(exc, LoginRequiredError):
        return login_redirect(exc)
    ctx = getattr(request.app.state, "ctx", None)
    if ctx is None:  # not started (or shutting down): no templates to render with
        return Response(f"{exc.title}: {exc.detail}\n", status_code=exc.http_status, media_type="text/plain")
    hdrs = {k: v for k, v in (headers or {}).items() if k.lower() != "www-authenticate"}
    return render(
        request,
        ctx,
        "error.html",
        principal=None,
        status=exc.http_status,
        headers=hdrs,
        error=exc,
    )
