"""The web pages: server-rendered, no build step, every asset served from /static."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.web.pages import STATIC_DIR

# each module has a `router`; order matters only where paths overlap
PAGES = ("upload", "history", "report", "viewer", "rules", "trends", "auth", "docs")


def install(app: FastAPI) -> None:
    import importlib

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for name in PAGES:
        app.include_router(importlib.import_module(f"app.web.routes.{name}").router)
