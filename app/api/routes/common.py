"""Helpers shared by the routes."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from fastapi import Request

from app.api.context import AppContext
from app.api.deps import Principal
from app.api.schemas import Problem
from app.db.models import Analysis
from app.errors import ForbiddenError, ValidationFailedError

_REL = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def base_url(request: Request, ctx: AppContext) -> str:
    if ctx.settings.public_url:
        return ctx.settings.public_url.rstrip("/")
    return str(request.base_url).rstrip("/")


def parse_time(value: str | None, *, name: str, now: dt.datetime | None = None) -> dt.datetime | None:
    """ISO 8601 date or datetime (UTC if no offset), or a relative age such as 24h, 7d, 2w."""
    if value is None or value == "":
        return None
    now = now or dt.datetime.now(dt.UTC)
    m = _REL.match(value.strip())
    if m:
        return now - dt.timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValidationFailedError(
            f"{name}: {value!r} is neither an ISO 8601 date/time nor an age like 24h or 7d"
        ) from None
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def check_can_read(principal: Principal, row: Analysis) -> None:
    """`read` sees everything; an `ingest` token sees the analyses it posted (hooks poll them)."""
    if principal.allows("read"):
        return
    if principal.token_id is not None and row.token_id == principal.token_id:
        return
    raise ForbiddenError(f"token {principal.name!r} lacks the `read` scope for analyses it did not post")


PROBLEM_CONTENT = {"application/problem+json": {"schema": Problem.model_json_schema()}}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    texts = {
        400: "Unreadable input",
        401: "No or invalid token",
        403: "Token lacks the scope",
        404: "Not found",
        409: "Conflict (analysis not ready, request in progress)",
        413: "Upload or log too large",
        415: "Unsupported media type or encoding",
        416: "Range not satisfiable",
        422: "Validation failed",
        503: "Service unavailable",
    }
    return {c: {"description": texts.get(c, "Error"), "content": PROBLEM_CONTENT} for c in codes}
