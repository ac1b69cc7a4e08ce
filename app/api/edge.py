"""The REST API as an edge of the HTTP app: its routers."""

from __future__ import annotations

from app.api.routes import analyses, jobs, learn, rules, stats
from app.http.edge import Edge

__all__ = ["edge"]


def edge() -> Edge:
    return Edge(name="api", routers=(analyses.router, jobs.router, learn.router, rules.router, stats.router))
