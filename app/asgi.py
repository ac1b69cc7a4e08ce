"""The composition root: the HTTP app with its three edges mounted as peers.

uvicorn loads ``app.asgi:create_app --factory`` (`logtriage serve` does). The foundation every
edge stands on is `app.http`; each edge (`app.api`, `app.web`, `app.slack`) says what it mounts
in its `edge()`. This is the one module that knows all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from app.settings import Settings

__all__ = ["create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    from app.api.edge import edge as api
    from app.http.main import build_app
    from app.slack.edge import edge as slack
    from app.web.edge import edge as web

    return build_app(settings, edges=(api(), web(), slack()))
