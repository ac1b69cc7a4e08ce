"""/docs: Swagger UI from the vendored copy under /static (the service runs air-gapped), under
the site's own header like every other page."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.errors import AuthError, NotFoundError
from app.http.deps import CtxDep, principal_of
from app.service.access import Principal
from app.web.pages import render

router = APIRouter(include_in_schema=False)
SWAGGER = "vendor/swagger-ui-5.35.0"


@router.get("/docs")
async def docs(request: Request, ctx: CtxDep) -> HTMLResponse:
    if not ctx.settings.api_docs:
        raise NotFoundError("the API docs are switched off (LOGTRIAGE_API_DOCS=false); /openapi.json remains")
    # the API's description is public: who is asking only decides what the header shows
    principal: Principal | None
    try:
        principal = await principal_of(request, ctx, None)
    except AuthError:
        principal = None
    return render(request, ctx, "docs.html", principal=principal, nav="docs", swagger=SWAGGER)
