"""/analyses/{id}/files/{n}: the stored (redacted) log, a page at a time, with line permalinks
(#L120, #L120-L140), the lines where findings are marked and links between them.

A page is ~500 lines around ``?line=`` or from ``?offset=`` (a byte offset, aligned to the next
line start), read from the frame of the compressed blob that holds it (`app.service.logview`);
pages link to each other by offset. The go-to-line form (``?goto=``) redirects to
``?line=N#LN`` so the browser lands on the line without JavaScript. Access is the report's: a
`read` token sees every log, an `ingest` token the logs it posted. The log is served as escaped
text only.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from app.errors import NotFoundError
from app.http.deps import CtxDep
from app.http.shared import base_url
from app.service import logview, present
from app.web.pages import WebPrincipal, render

router = APIRouter(include_in_schema=False)


def _position(value: str) -> int:
    if not value.isdigit() or len(value) > 6:
        raise NotFoundError(f"no log file {value[:20]!r}: files are numbered 0, 1, 2, …")
    return int(value)


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
) -> Response:
    pos = _position(position)
    target = logview.parse_number(goto, "line", least=1)
    if target is not None:  # the go-to-line form: land on the line, highlighted, without JS
        return RedirectResponse(
            f"/analyses/{analysis_id.upper()}/files/{pos}?line={target}#L{target}", status_code=303
        )
    at_line = logview.parse_number(line, "line", least=1)
    at_offset = logview.parse_number(offset, "offset", least=0) if at_line is None else None
    view = await asyncio.to_thread(
        logview.load_view,
        ctx,
        analysis_id=analysis_id,
        position=pos,
        principal=principal,
        line=at_line,
        offset=at_offset,
    )
    here = f"/analyses/{view.analysis_id}/files/{pos}"
    return render(
        request,
        ctx,
        "viewer.html",
        principal=principal,
        nav="history",
        v=view,
        w=view.window,
        here=here,
        report=f"/analyses/{view.analysis_id}",
        download=f"{present.analysis_url(base_url(request, ctx), view.analysis_id)}/log?file={pos}",
    )
