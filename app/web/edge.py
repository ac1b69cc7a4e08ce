"""The web pages as an edge of the HTTP app: page routers, /static, templates, the HTML error page."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path

import jinja2
import markupsafe
from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from app.errors import LogtriageError
from app.http.context import AppContext
from app.http.edge import Edge
from app.render.html import inline, markdown_block
from app.web.pages import STATIC_DIR

__all__ = ["TEMPLATES", "compile_templates", "edge", "make_templates"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
# each module has a `router`; order matters only where paths overlap
PAGES = ("upload", "history", "report", "viewer", "rules", "trends", "auth", "docs")


def edge() -> Edge:
    from app.web.routes.report import api_router

    routers = (*(importlib.import_module(f"app.web.routes.{name}").router for name in PAGES), api_router)
    return Edge(name="web", routers=routers, install=_install, warm=_warm)


def _install(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.state.templates = make_templates()
    app.state.html_error_page = _error_page


def _error_page(request: Request, exc: LogtriageError, headers: dict[str, str] | None) -> Response:
    from app.web import errors  # loaded when a page fails

    return errors.page_for(request, exc, headers=headers)


async def _warm(app: FastAPI, ctx: AppContext) -> None:
    # compiled now, not by the first visitor (a first report view took ~105 ms)
    await asyncio.to_thread(compile_templates, app.state.templates)


def make_templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.ChainableUndefined,
    )
    env.filters["inline_md"] = inline_md
    env.filters["md"] = markdown_block
    return env


def compile_templates(env: jinja2.Environment) -> int:
    names = env.list_templates(filter_func=lambda n: n.endswith(".html"))
    for name in names:
        env.get_template(name)
    return len(names)


def inline_md(text: str) -> markupsafe.Markup:
    """Escape, then render `code`, **bold** and links (remediation texts are Markdown)."""
    return markupsafe.Markup(inline(text))
