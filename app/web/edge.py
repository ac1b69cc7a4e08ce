"""The web pages as an edge of the HTTP app: page routers, /static, templates, the HTML error page."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import jinja2
import markupsafe
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from app.errors import LogtriageError
from app.http.context import AppContext
from app.http.edge import Edge
from app.render.action import folded_note
from app.render.html import inline, markdown_block
from app.web.pages import STATIC_DIR
from app.web.routes import auth, docs, history, hosts, learn, report, rules, trends, upload, viewer

__all__ = ["PAGES", "TEMPLATES", "Page", "compile_templates", "edge", "make_templates", "nav_items"]

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Page:
    """One page module of `app/web/routes/`: what it serves and where the main nav links to it.
    The browser tests cover every page listed here (`tests/web/test_browser_pages.py`)."""

    name: str  # the module app/web/routes/<name>.py and the nav key templates mark current
    router: APIRouter
    nav: tuple[int, str, str] | None = None  # (position, link, label) in the main navigation


# order matters only where paths overlap
PAGES: tuple[Page, ...] = (
    Page("upload", upload.router, nav=(0, "/", "Triage a log")),
    Page("history", history.router, nav=(1, "/analyses", "History")),
    Page("report", report.router),
    Page("viewer", viewer.router),
    Page("rules", rules.router, nav=(3, "/rules", "Rules")),
    # after Rules in the nav (same position, its link sorts after /rules)
    Page("learn", learn.router, nav=(3, "/unknowns", "Unknowns")),
    Page("trends", trends.router, nav=(2, "/trends", "Trends")),
    Page("hosts", hosts.router, nav=(4, "/hosts", "Hosts")),
    Page("auth", auth.router),
    Page("docs", docs.router),
)


def nav_items() -> list[tuple[str, str, str]]:
    """(link, label, key) of the main navigation, in order."""
    placed = sorted((p.nav, p.name) for p in PAGES if p.nav is not None)
    return [(link, label, name) for (_, link, label), name in placed]


def edge() -> Edge:
    # the report page is also the REST API's report.html (documented with the API)
    routers = (*(p.router for p in PAGES), report.api_router)
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
    env.filters["folded_note"] = folded_note
    env.globals["nav_items"] = nav_items()
    return env


def compile_templates(env: jinja2.Environment) -> int:
    names = env.list_templates(filter_func=lambda n: n.endswith(".html"))
    for name in names:
        env.get_template(name)
    return len(names)


def inline_md(text: str) -> markupsafe.Markup:
    """Escape, then render `code`, **bold** and links (remediation texts are Markdown)."""
    return markupsafe.Markup(inline(text))
