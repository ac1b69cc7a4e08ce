"""Every error as RFC 9457 ``application/problem+json``, from the one error tree (app/errors.py).

FastAPI's own request validation errors become 422 ``validation-failed`` problems (with the
offending fields under ``errors``), unknown routes 404 ``not-found``, and anything unexpected a
500 ``internal-error`` whose detail never carries a traceback.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import (
    AuthError,
    InputError,
    InsufficientStorageError,
    InternalError,
    LogtriageError,
    ServiceUnavailableError,
    all_errors,
    disk_full,
    is_disk_full,
)

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("logtriage.api")
RETRY_AFTER_S = 5  # what a client waits before asking again during an outage


def problem_type(slug: str) -> str:
    return f"/problems/{slug}"


def problem_body(
    *,
    status: int,
    slug: str,
    title: str,
    detail: str,
    instance: str | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": problem_type(slug), "title": title, "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    if extra:
        body.update(extra)
    return body


def problem_response(
    request: Request,
    *,
    status: int,
    slug: str,
    title: str,
    detail: str,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = problem_body(
        status=status, slug=slug, title=title, detail=detail, instance=request.url.path, extra=extra
    )
    hdrs = dict(headers or {})
    if status == 401:
        hdrs.setdefault("WWW-Authenticate", 'Bearer realm="logtriage", Basic realm="logtriage"')
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=hdrs)


def from_error(request: Request, exc: LogtriageError, headers: dict[str, str] | None = None) -> JSONResponse:
    return problem_response(
        request, status=exc.http_status, slug=exc.slug, title=exc.title, detail=exc.detail, headers=headers
    )


def _slug(status: int) -> tuple[str, str]:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return phrase.lower().replace(" ", "-"), phrase


def _clean_loc(loc: tuple[Any, ...] | list[Any]) -> list[Any]:
    return [p for p in loc if p not in ("body",)] or list(loc)


def wants_html(request: Request) -> bool:
    """A browser navigating to a page (not the API, not a script's fetch) gets an HTML error."""
    path = request.url.path
    if path.startswith(("/api/", "/openapi.json", "/problems", "/static/", "/slack/")):
        return False
    return "text/html" in request.headers.get("accept", "")


HtmlErrorPage = Callable[[Request, LogtriageError, dict[str, str] | None], Response]


def negotiated(request: Request, exc: LogtriageError, headers: dict[str, str] | None = None) -> Response:
    # the web edge installs its error page (`app.state.html_error_page`); without it, problem+json
    page: HtmlErrorPage | None = getattr(request.app.state, "html_error_page", None)
    if page is not None and wants_html(request):
        return page(request, exc, headers)
    return from_error(request, exc, headers=headers)


def install(app: FastAPI) -> None:
    async def on_logtriage(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, LogtriageError)
        if exc.http_status >= 500:
            log.error("%s: %s", type(exc).__name__, exc.detail)
        if exc.http_status == 408:  # the body never came: the connection is done with too
            return negotiated(request, exc, headers={"Connection": "close"})
        if exc.retry_after is not None:
            return negotiated(request, exc, headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))})
        if isinstance(exc, ServiceUnavailableError):
            return negotiated(request, exc, headers={"Retry-After": str(RETRY_AFTER_S)})
        if isinstance(exc, InsufficientStorageError):
            return negotiated(request, exc, headers={"Retry-After": str(RETRY_AFTER_S * 12)})
        return negotiated(request, exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"loc": _clean_loc(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        detail = (
            "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
            or "invalid request"
        )
        return problem_response(
            request,
            status=422,
            slug="validation-failed",
            title="Validation failed",
            detail=detail,
            extra={"errors": errors},
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        if status == 404:
            slug, title = "not-found", "Not found"
            detail = (
                exc.detail
                if isinstance(exc.detail, str) and exc.detail != "Not Found"
                else f"no such resource: {request.method} {request.url.path} (the API is under /api/v1; "
                "see /docs)"
            )
        elif status == 405:
            slug, title = "method-not-allowed", "Method not allowed"
            detail = f"{request.method} is not allowed on {request.url.path}"
        elif status == 400:  # FastAPI's: a body it cannot decode (not UTF-8, say)
            slug, title = InputError.slug, InputError.title
            detail = exc.detail if isinstance(exc.detail, str) else title
        else:
            slug, title = _slug(status)
            detail = exc.detail if isinstance(exc.detail, str) else title
        headers = dict(exc.headers or {})
        if status == 401:
            return negotiated(request, AuthError(detail), headers=headers)
        if wants_html(request):
            err = LogtriageError(detail)
            err.http_status, err.slug, err.title = status, slug, title
            return negotiated(request, err, headers=headers)
        return problem_response(
            request, status=status, slug=slug, title=title, detail=detail, headers=headers
        )

    async def on_database(request: Request, exc: Exception) -> Response:
        # an outage, not a bug: the pool reconnects (pre-ping) once the database is back; a
        # database that stopped answering got here through a deadline (app/db/deadline.py)
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        if is_disk_full(exc):
            return await on_storage(request, exc)
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, first)
        err = ServiceUnavailableError("the database cannot be reached; retry in a few seconds")
        return negotiated(request, err, headers={"Retry-After": str(RETRY_AFTER_S)})

    async def on_storage(request: Request, exc: Exception) -> Response:
        if not is_disk_full(exc):
            return await on_unexpected(request, exc)
        log.error("disk full on %s %s: %s", request.method, request.url.path, exc)
        err = disk_full(exc)
        return negotiated(request, err, headers={"Retry-After": str(RETRY_AFTER_S * 12)})

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        err = InternalError(f"unexpected {type(exc).__name__}; the server log has the details")
        return negotiated(request, err)

    app.add_exception_handler(LogtriageError, on_logtriage)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
    from sqlalchemy.exc import InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    app.add_exception_handler(OperationalError, on_database)
    app.add_exception_handler(InterfaceError, on_database)
    app.add_exception_handler(PoolTimeoutError, on_database)  # no pooled connection came free in time
    app.add_exception_handler(OSError, on_storage)


def problem_catalogue() -> list[dict[str, Any]]:
    out = []
    for klass in all_errors():
        out.append(
            {
                "type": problem_type(klass.slug),
                "title": klass.title,
                "status": klass.http_status,
                "description": " ".join((klass.__doc__ or "").split()),
            }
        )
    return out
