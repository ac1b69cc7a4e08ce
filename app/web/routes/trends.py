"""/trends: what fails, how often, what recurs, which nodes to drain; each mark links to history."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.errors import LogtriageError, ValidationFailedError
from app.http.deps import CtxDep
from app.http.shared import parse_time
from app.service import ops
from app.web import charts
from app.web.pages import WebPrincipal, render, require_page

router = APIRouter(include_in_schema=False)
RANGES = (7, 30, 90)


@router.get("/trends")
async def trends_page(
    request: Request,
    ctx: CtxDep,
    principal: WebPrincipal,
    days: int = 30,
    since: Annotated[str, Query(max_length=64)] = "",
    until: Annotated[str, Query(max_length=64)] = "",
) -> Response:
    require_page(principal, "read", "the trends")
    error: LogtriageError | None = None
    data = None
    # the end of the window is the next whole minute: the figures are cached per window
    # (app.service.aggregates), and a window that moved by microseconds would never repeat
    now = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
    try:
        if not 1 <= days <= 3650:
            raise ValidationFailedError("days must be between 1 and 3650")
        end = parse_time(until or None, name="until") or now
        start = parse_time(since or None, name="since") or end - dt.timedelta(days=days)
        data = await asyncio.to_thread(ops.trends, ctx, since=start, until=end, top=10)
    except LogtriageError as exc:
        error = exc
    stacked = rate = None
    if data is not None:
        first = dt.date.fromisoformat(data["since"][:10])
        last = dt.date.fromisoformat(data["until"][:10])
        day_list = [(first + dt.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
        stacked = charts.stacked_days(data["by_day_class"], day_list, title="Failures per day, by class")
        rate = charts.rate_line(data["by_day"], day_list, title="Share of analyses with no known root cause")
    return render(
        request,
        ctx,
        "trends.html",
        principal=principal,
        nav="trends",
        status=422 if error else 200,
        error=error,
        data=data,
        stacked=stacked,
        rate=rate,
        days=days,
        ranges=RANGES,
        custom=bool(since or until),
    )
