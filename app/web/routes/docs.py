"""/docs: Swagger UI from the vendored copy under /static (the service runs air-gapped)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from app.errors import NotFoundError
from app.http.deps import CtxDep
from app.web.pages import static_url

router = APIRouter(include_in_schema=False)
SWAGGER = "vendor/swagger-ui-5.35.0"


@router.get("/docs")
async def docs(ctx: CtxDep) -> HTMLResponse:
    if not ctx.settings.api_docs:
        raise NotFoundError("the API docs are switched off (LOGTRIAGE_API_DOCS=false); /openapi.json remains")
    html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>logtriage API</title>
<link rel="stylesheet" href="{static_url(SWAGGER + "/swagger-ui.css")}">
<link rel="icon" href="{static_url("favicon.svg")}" type="image/svg+xml">
</head><body>
<div id="swagger-ui"></div>
<script src="{static_url(SWAGGER + "/swagger-ui-bundle.js")}"></script>
<script src="{static_url("docs.js")}"></script>
</body></html>"""
    return HTMLResponse(html)
