"""/analyses/{id}/files/{n}: the stored (redacted) log, a page at a time, with line permalinks
(#L120, #L120-L140), the lines where findings are marked and links between them; search, next
and previous error, wrap, timestamps and folding.

A page is ~500 lines around ``?line=`` or from ``?offset=`` (a byte offset, aligned to the next
line start), read from the frame of the compressed blob that holds it (`app.service.logview`);
pages link to each other by offset. The go-to-line form (``?goto=``) redirects to
``?line=N#LN`` so the browser lands on the line without JavaScript. Access is the report's: a
`read` token sees every log, an `ingest` token the logs it posted. The log is served as escaped
text only.

Search is a plain GET form, so it works without JavaScript: ``?q=`` (``re=1`` a regular
expression, ``case=1`` case-sensitive) marks the matches on the page and counts the lines that
match; with ``dir=next|prev`` and ``from=LINE`` the server looks for the next (previous) line
that matches and redirects to ``?line=HIT#LHIT``, keeping the query. ``err=next|prev`` does the
same for lines that read as errors. A search that finds nothing within its time budget says how
far it got and links to going on from there. ``wrap=1|0``, ``ts=0`` and ``fold=0`` are the
display choices (the script keeps them in the browser instead).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from app.blobstore.search import Found, Matcher
from app.errors import NotFoundError, ValidationFailedError
from app.http.deps import CtxDep
from app.http.shared import base_url
from app.service import logview, present
from app.web.pages import WebPrincipal, render

router = APIRouter(include_in_schema=False)


def _position(value: str) -> int:
    if not value.isdigit() or len(value) > 6:
        raise NotFoundError(f"no log file {value[:20]!r}: files are numbered 0, 1, 2, …")
    return int(value)


def _flag(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "on", "true", "yes")


def _direction(value: str | None, what: str) -> bool | None:
    """next: True, prev: False, absent: None."""
    if value is None or not value.strip():
        return None
    v = value.strip().lower()
    if v not in ("next", "prev"):
        raise ValidationFailedError(f"{what} is next or prev, not {value[:20]!r}")
    return v == "next"


@router.get("/analyses/{analysis_id}/files/{position}")
async def viewer_page(
    analysis_id: str,
    position: str,
    request: Request,
    ctx: CtxDep,
    principal: WebPrincipal,
    line: str | None = None,
    offset: str | None = None,
    goto: str | None = None,
    q: str | None = None,
    regex: Annotated[str | None, Query(alias="re")] = None,
    case: str | None = None,
    direction: Annotated[str | None, Query(alias="dir")] = None,
    err: str | None = None,
    start: Annotated[str | None, Query(alias="from")] = None,
    wrap: str | None = None,
    ts: str | None = None,
    fold: str | None = None,
    top: str | None = None,
) -> Response:
    pos = _position(position)
    here = f"/analyses/{analysis_id.upper()}/files/{pos}"
    # what every link of the page keeps: the query and the display choices made in the URL
    sticky: dict[str, str] = {}
    query: logview.Query | None = None
    problem: str | None = None
    matcher: Matcher | None = None
    if q is not None and q.strip():
        query = logview.Query(q, regex=_flag(regex), case=_flag(case))
        sticky.update({"q": q} | ({"re": "1"} if query.regex else {}) | ({"case": "1"} if query.case else {}))
        try:
            matcher = logview.compile_query(query)
        except ValidationFailedError as exc:  # the page says why, with the form to fix it
            problem, query = str(exc), None
    if wrap in ("0", "1"):
        sticky["wrap"] = wrap
    if ts == "0":
        sticky["ts"] = "0"
    if fold == "0":
        sticky["fold"] = "0"

    def url(**changes: Any) -> str:
        params = {**sticky, **{k: str(v) for k, v in changes.items() if v is not None}}
        for k in [k for k, v in changes.items() if v is None]:
            params.pop(k, None)
        return f"{here}?{urlencode(params)}" if params else here

    target = logview.parse_number(goto, "line", least=1)
    if target is not None:  # the go-to-line form: land on the line, highlighted, without JS
        return RedirectResponse(f"{url(line=target)}#L{target}", status_code=303)
    at_line = logview.parse_number(line, "line", least=1)
    at_offset = logview.parse_number(offset, "offset", least=0) if at_line is None else None
    searched: dict[str, Any] | None = None
    forward = _direction(direction, "dir")
    error_forward = _direction(err, "err")
    if forward is not None or error_forward is not None:
        from_line = logview.parse_number(start, "from", least=0) or 0
        if top == "1" and forward is False:
            # the search form of a page without a target line sends the line above the page
            # (for Find next, the page's first line is searched too); Find previous starts at
            # the page's first line, so the line above it is searched as well
            from_line += 1
        errors = error_forward is not None
        going = error_forward if errors else forward
        assert going is not None
        what = logview.error_matcher() if errors else matcher
        if what is None:  # an empty (or refused) search: the page stays where it was
            at_line, at_offset = (max(1, from_line) if from_line else None), None
        else:
            found: Found = await asyncio.to_thread(
                logview.find,
                ctx,
                analysis_id=analysis_id,
                position=pos,
                principal=principal,
                matcher=what,
                from_line=from_line,
                forward=going,
            )
            if found.line is not None:
                return RedirectResponse(f"{url(line=found.line)}#L{found.line}", status_code=303)
            key = "err" if errors else "dir"
            # no line read within the budget: going on would ask the same again
            stuck = not found.done and (found.reached <= from_line if going else found.reached >= from_line)
            searched = {
                "stuck": stuck,
                "errors": errors,
                "forward": going,
                "from": from_line,
                "reached": found.reached,
                "done": found.done,
                "more": None
                if found.done or stuck
                else url(**{"from": found.reached, key: direction or err}),
            }
            at_line, at_offset = (max(1, from_line) if from_line else None), None
    view = await asyncio.to_thread(
        logview.load_view,
        ctx,
        analysis_id=analysis_id,
        position=pos,
        principal=principal,
        line=at_line,
        offset=at_offset,
        query=query,
        fold=fold != "0",
    )
    w = view.window
    here = f"/analyses/{view.analysis_id}/files/{pos}"
    # where "next" and "previous" look from: the line the page is about, else its first line
    after = w.target if w.target is not None else max(0, w.first_line - 1)
    before = w.target if w.target is not None else w.first_line
    at = {"line": w.target} if w.target is not None else ({"offset": w.start} if w.start else {})
    return render(
        request,
        ctx,
        "viewer.html",
        principal=principal,
        nav="history",
        status=422 if problem else 200,
        v=view,
        w=w,
        here=here,
        url=url,
        sticky=sticky,
        at=at,
        after=after,
        before=before,
        query=query,
        q=q or "",
        regex=_flag(regex),
        case=_flag(case),
        problem=problem,
        searched=searched,
        wrap={"1": "on", "0": "off"}.get(wrap or "", "auto"),
        show_ts=ts != "0",
        folding=fold != "0",
        report=f"/analyses/{view.analysis_id}",
        can_draft=principal.allows("read") and principal.allows("ingest"),
        download=f"{present.analysis_url(base_url(request, ctx), view.analysis_id)}/log?file={pos}",
    )


@router.get("/analyses/{analysis_id}/by-time")
async def merged_page(
    analysis_id: str,
    request: Request,
    ctx: CtxDep,
    principal: WebPrincipal,
    files: Annotated[list[str] | None, Query()] = None,
    at: str | None = None,
    start: Annotated[str | None, Query(alias="from")] = None,
    before: str | None = None,
    layout: str | None = None,
    wrap: str | None = None,
    ts: str | None = None,
) -> Response:
    """Several files of the analysis in one, in time order (`app.service.logmerge`): ``files``
    which (0,2,3; every file by default), ``at`` a time to open at, ``from`` / ``before`` the
    cursors the page's links carry; ``layout=columns`` puts each file in its own column."""
    from app.service import logmerge

    # files=0,2 from a link, or files=0&files=2 from the page's checkboxes
    positions = logmerge.parse_positions(",".join(files) if files else None)
    when = logmerge.parse_at(at)
    cursor = logmerge.parse_cursor(start)
    back = logmerge.parse_cursor(before)
    if layout not in (None, "", "lines", "columns"):
        raise ValidationFailedError(f"layout is lines or columns, not {layout[:20]!r}")
    view = await asyncio.to_thread(
        logmerge.load_merged,
        ctx,
        analysis_id=analysis_id,
        principal=principal,
        positions=positions,
        at=when,
        cursor=cursor,
        before=back,
    )
    here = f"/analyses/{view.analysis_id}/by-time"
    sticky: dict[str, str] = {}
    if positions:
        sticky["files"] = ",".join(str(p) for p in positions)
    if layout == "columns":
        sticky["layout"] = "columns"
    if wrap in ("0", "1"):
        sticky["wrap"] = wrap
    if ts == "0":
        sticky["ts"] = "0"

    def url(**changes: Any) -> str:
        params = {**sticky, **{k: str(v) for k, v in changes.items() if v is not None}}
        for k in [k for k, v in changes.items() if v is None]:
            params.pop(k, None)
        return f"{here}?{urlencode(params)}" if params else here

    columns = layout == "columns" and 1 < len(view.merged) <= 4
    return render(
        request,
        ctx,
        "viewer_merged.html",
        principal=principal,
        nav="history",
        v=view,
        here=here,
        url=url,
        sticky=sticky,
        cursor=logmerge.format_cursor,
        from_start=logmerge.format_cursor(dict.fromkeys(view.merged, 1)),
        columns=columns,
        layout="columns" if layout == "columns" else "lines",
        wrap={"1": "on", "0": "off"}.get(wrap or "", "auto"),
        show_ts=ts != "0",
        report=f"/analyses/{view.analysis_id}",
        at_text=at or "",
        clock=_clock,
    )


def _clock(t: float | None) -> str:
    """A merged page's time as people read it (UTC, as the timeline reads clocks)."""
    import datetime as dt

    if t is None:
        return "before the first clock"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
