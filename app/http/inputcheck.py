"""Request-wide input checks that hold for every route (API, web pages, Slack) before any runs.

- **Control characters** in the query string (NUL, C0, DEL, once percent-decoded) are a 422:
  no filter, metadata field or search takes them, and PostgreSQL refuses NUL in text (a NUL in
  any string filter used to be a 500 there). In the path they are a 404 (nothing is named so).
- **Header size**: more than `MAX_HEADER_BYTES` of headers or `MAX_HEADERS` fields is a 431.
  `BoundedHttpToolsProtocol` (app/http/protocol.py) refuses them while parsing, before they are
  held in memory; this check answers the same for a server started without it.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import HeaderFieldsTooLargeError, LogtriageError, NotFoundError, ValidationFailedError

MAX_HEADER_BYTES = 64 << 10  # names, values and the request line together
MAX_HEADERS = 128

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BYTES = re.compile(rb"[\x00-\x1f\x7f]")


def header_problem(scope: Scope) -> LogtriageError | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
    if len(headers) > MAX_HEADERS:
        return HeaderFieldsTooLargeError(f"{len(headers)} header fields; at most {MAX_HEADERS} are accepted")
    size = sum(len(k) + len(v) + 4 for k, v in headers) + len(scope.get("query_string") or b"")
    if size > MAX_HEADER_BYTES:
        return HeaderFieldsTooLargeError(
            f"request headers of {size} bytes; at most {MAX_HEADER_BYTES >> 10} KiB are accepted"
        )
    return None


def control_problem(scope: Scope) -> LogtriageError | None:
    path: str = scope.get("path") or ""
    if _CONTROL.search(path):
        return NotFoundError("no such resource: the path holds a control character")
    qs: bytes = scope.get("query_string") or b""
    if b"%" not in qs:  # the HTTP parser lets no raw control byte through
        return None
    if not _CONTROL_BYTES.search(unquote_to_bytes(qs)):
        return None
    for key, value in parse_qsl(qs.decode("latin-1"), keep_blank_values=True, errors="replace"):
        for what, text in (("name", key), ("value", value)):
            m = _CONTROL.search(text)
            if m is not None:
                return ValidationFailedError(
                    f"query parameter {key[:64]!r}: control character U+{ord(m.group()):04X} in its "
                    f"{what} at position {m.start()}; filters and metadata take none"
                )
    return ValidationFailedError("the query string holds a control character")


class InputCheck:
    """ASGI middleware: the checks above, answered as the app answers errors (problem+json, or
    the HTML error page for a browser)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = header_problem(scope) or control_problem(scope)
            if problem is not None:
                from app.http.errors import negotiated

                response: Any = negotiated(Request(scope), problem)
                if problem.http_status == 431:
                    response.headers["Connection"] = "close"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
