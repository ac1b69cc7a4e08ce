"""/analyses: the history, filtered and searched, a page at a time; every filter in the URL."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.engine.pipeline.framework_names import FRAMEWORK_NAMES
from app.errors import LogtriageError, UsageError, ValidationFailedError
from app.http.deps import CtxDep
from app.http.shared import base_url, parse_time
from app.service import ops
from app.web.pages import WebPrincipal, render, require_page

router = APIRouter(include_in_schema=False)
PAGE_SIZES = (25, 50, 100)


@dataclass(frozen=True)
class Filters:
    """The form's values as the URL has them (strings), so the form shows what was asked."""

    failure_class: str = ""
    kind: str = ""
    framework: str = ""
    host: str = ""
    job: str = ""
    since: str = ""
    until: str = ""
    q: str = ""
    unknown: bool = False
    feedback: str = ""  # "", yes, no
    fingerprint: str = ""
    rule: str = ""
    limit: int = 50

    def query(self, **over: object) -> str:
        """This view's URL query, with some values changed (for pager and reset links)."""
        from urllib.parse import urlencode

        values = {
            "class": self.failure_class,
            "kind": self.kind,
            "framework": self.framework,
            "host": self.host,
            "job": self.job,
            "since": self.since,
            "until": self.until,
            "q": self.q,
            "unknown": "1" if self.unknown else "",
            "feedback": self.feedback,
            "fingerprint": self.fingerprint,
            "rule": self.rule,
            "limit": "" if self.limit == 50 else str(self.limit),
        }
        values.update({k: "" if v is None else str(v) for k, v in over.items()})
        return urlencode({k: v for k, v in values.items() if v})

    @property
    def active(self) -> bool:
        return bool(self.query(limit=None))


def _to_filter(f: Filters, token_id: int | None, kinds: Sequence[str]) -> ops.AnalysisFilter:
    if f.kind and f.kind not in kinds:
        raise ValidationFailedError(f"kind must be one of {', '.join(kinds)}")
    if f.feedback not in ("", "yes", "no"):
        raise ValidationFailedError("feedback must be yes or no")
    since = parse_time(f.since or None, name="since")
    until = parse_time(f.until or None, name="until")
    if since and until and since >= until:
        raise ValidationFailedError("since must be before until")
    return ops.AnalysisFilter(
        failure_class="unknown" if f.unknown else (f.failure_class or None),
        kind=f.kind or None,
        framework=f.framework or None,
        host=f.host.strip() or None,
        job_id=f.job.strip() or None,
        since=since,
        until=until,
        query=f.q.strip() or None,
        has_feedback={"yes": True, "no": False}.get(f.feedback),
        fingerprint=f.fingerprint or None,
        rule_id=f.rule or None,
        token_id=token_id,
    )


@router.get("/analyses")
async def history(
    request: Request,
    ctx: CtxDep,
    principal: WebPrincipal,
    class_: Annotated[str, Query(alias="class", max_length=100)] = "",
    kind: Annotated[str, Query(max_length=32)] = "",
    framework: Annotated[str, Query(max_length=32)] = "",
    host: Annotated[str, Query(max_length=255)] = "",
    job: Annotated[str, Query(max_length=256)] = "",
    since: Annotated[str, Query(max_length=64)] = "",
    until: Annotated[str, Query(max_length=64)] = "",
    q: Annotated[str, Query(max_length=200)] = "",
    unknown: Annotated[str, Query(max_length=5)] = "",
    feedback: Annotated[str, Query(max_length=5)] = "",
    fingerprint: Annotated[str, Query(max_length=64)] = "",
    rule: Annotated[str, Query(max_length=100)] = "",
    limit: int = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    newer: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    if not principal.allows("read"):
        require_page(principal, "ingest", "the history")  # an ingest token sees its own uploads
    f = Filters(
        failure_class=class_,
        kind=kind,
        framework=framework,
        host=host,
        job=job,
        since=since,
        until=until,
        q=q,
        unknown=unknown in ("1", "on", "true", "yes"),
        feedback=feedback,
        fingerprint=fingerprint,
        rule=rule,
        limit=limit if limit in PAGE_SIZES else 50,
    )
    error: LogtriageError | None = None
    page = None
    try:
        flt = _to_filter(f, None if principal.allows("read") else principal.token_id, list(ctx.library.kinds))
        page = await asyncio.to_thread(
            ops.history_page,
            ctx,
            filters=flt,
            limit=f.limit,
            cursor=cursor,
            newer_than=newer,
            base=base_url(request, ctx),
        )
    except (ValidationFailedError, UsageError) as exc:
        error = exc
    return render(
        request,
        ctx,
        "history.html",
        principal=principal,
        nav="history",
        status=422 if error else 200,
        f=f,
        page=page,
        error=error,
        kinds=list(ctx.library.kinds.values()),
        frameworks=FRAMEWORK_NAMES,
        page_sizes=PAGE_SIZES,
        own_only=not principal.allows("read"),
    )
