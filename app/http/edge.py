"""How an edge (REST API, web pages, Slack) is mounted on the HTTP app: as data, one per edge.

The app factory (`app.http.main.build_app`) knows no edge by name: `app.asgi` hands it the
edges, each an `Edge` saying which routers it serves, what it adds to the app once (static
files, an HTML error page), and what it starts with the service and stops after it (the Slack
bot). So the edges are peers: none imports another, and adding one touches `app.asgi` only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI

    from app.http.context import AppContext

__all__ = ["Closer", "Edge"]

Closer = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Edge:
    name: str
    routers: Sequence[APIRouter] = ()
    # once, when the app is built (before it serves): mounts, exception pages, OpenAPI changes
    install: Callable[[FastAPI], None] | None = None
    # in the lifespan, once the context exists; what it returns is awaited at shutdown
    start: Callable[[FastAPI, AppContext], Awaitable[Closer | None]] | None = None
    # in the background warm-up, before the app reports itself warm (compile what the first
    # visitor would otherwise wait for)
    warm: Callable[[FastAPI, AppContext], Awaitable[None]] | None = None
