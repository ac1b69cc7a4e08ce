"""/api/v1/stats: what fails, how often, what recurs, which nodes to drain."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.http.deps import CtxDep, ReadDep
from app.http.openapi import problems
from app.http.shared import parse_time
from app.service import ops

router = APIRouter(prefix="/api/v1", tags=["stats"])


@router.get(
    "/stats",
    summary="Counts per class and per day, unknown rate, top recurring failures, suspect hosts",
    responses=problems(401, 403, 422),
)
def get_stats(
    ctx: CtxDep,
    _principal: ReadDep,
    days: Annotated[int, Query(ge=1, le=3650, description="window ending now (ignored with since)")] = 30,
    since: Annotated[str | None, Query(description="ISO 8601 or an age: 24h, 7d")] = None,
    until: Annotated[str | None, Query(description="ISO 8601 or an age")] = None,
    top: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict[str, Any]:
    now = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)  # see trends
    end = parse_time(until, name="until") or now
    start = parse_time(since, name="since") or end - dt.timedelta(days=days)
    return ops.trends(ctx, since=start, until=end, top=top)
