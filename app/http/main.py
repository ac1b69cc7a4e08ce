"""The HTTP app's foundation: ``build_app(settings, edges)`` and the lifespan every edge shares.

What is built here, once per process: the service context (database, blob store, rule library,
scan workers, analysis service), the HTTP layer around every route (host check, input checks,
problem+json errors, security headers, access log, sign-in sessions, token cache) and `/healthz`,
`/readyz`, `/problems`. The edges (REST API, web pages, Slack) come in as `app.http.edge.Edge`
values from `app.asgi`, which is what uvicorn loads (``app.asgi:create_app --factory``).

Everything heavy (database engine, migrations, rule library, scan worker processes) is built in
the lifespan, never at import time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from app import __version__
from app.blobstore import open_blob_store
from app.engine.pipeline.library import load_library
from app.errors import NotFoundError
from app.http import accesslog, errors, health, memory, openapi
from app.http.authcache import AuthCache
from app.http.context import AppContext
from app.http.edge import Closer, Edge
from app.http.hosts import HostCheck
from app.http.inputcheck import InputCheck
from app.http.security import SecurityHeaders
from app.http.serve import beat, drain_seconds, notify_warm, supervised
from app.http.session import SessionCodec, load_secret
from app.service import notify as notify_
from app.service import present, runtime, tokens
from app.service.analyses import AnalysisService
from app.service.pool import ScanPool
from app.service.worker import freeze_startup_heap
from app.settings import Settings, get_settings

log = logging.getLogger("logtriage")
DRAIN_SECONDS = 20.0

DESCRIPTION = """
Diagnose failed RL/LLM training jobs from their logs. A job's failure hook posts its log to
`POST /api/v1/analyses`; the answer holds the root cause, the fix and a permalink.

**Auth:** `Authorization: Bearer <token>` (tokens from `logtriage tokens create`, scopes `ingest`,
`read`, `admin`). While no token exists the service is open to loopback clients only.

**Errors** are RFC 9457 `application/problem+json` documents.
"""


def secure_cookies(settings: Settings) -> bool:
    if settings.secure_cookies is not None:
        return settings.secure_cookies
    return bool(settings.public_url and settings.public_url.startswith("https://"))


def open_mode_message(settings: Settings) -> str:
    return (
        "logtriage: no API token exists: the service runs OPEN (no authentication) for loopback "
        f"clients only ({settings.host}). Create a token to serve other machines: "
        "`logtriage tokens create --name hooks --scope ingest`"
    )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    edges: Sequence[Edge] = app.state.edges
    settings: Settings = app.state.settings
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = runtime.open_database(settings)
    try:
        if settings.auto_migrate:
            migrated = await asyncio.to_thread(runtime.migrate, settings)
            if migrated:
                log.info("database schema upgraded")
        store = open_blob_store(settings)
        await asyncio.to_thread(store.check_writable)
        library = await asyncio.to_thread(load_library, settings.rules_dir)
        pool = ScanPool(settings)
        from app.service.sitepack import SitePackSource

        pool.site = SitePackSource(settings, db, library)
        service = AnalysisService(settings=settings, db=db, store=store, pool=pool)
        app.state.ctx = ctx = AppContext(
            settings=settings,
            db=db,
            store=store,
            library=library,
            pool=pool,
            service=service,
            auth=AuthCache(settings.auth_cache_seconds),
            sessions=SessionCodec(
                await asyncio.to_thread(load_secret, settings),
                hours=settings.session_hours,
                secure=secure_cookies(settings),
            ),
        )

        # the ledger's notice goes wherever the service tells people (the Slack bot, if any)
        service.on_hosts_flagged = lambda aid, hosts: notify_.hosts_flagged(
            ctx, analysis_id=aid, hosts=[present.suspect_dict(h) for h in hosts]
        )

        def _tokens() -> bool:
            exist = tokens.any_active(app.state.ctx)
            app.state.ctx.auth.remember_tokens_exist(exist)
            return exist

        if not settings.require_tokens and not await asyncio.to_thread(_tokens):
            log.warning(open_mode_message(settings))

        async def _warm() -> None:
            # what the first visitor would otherwise wait for, built now and counted in the
            # start-up heap that is frozen and that memory is measured against
            for edge in edges:
                if edge.warm is not None:
                    await edge.warm(app, app.state.ctx)
            await pool.warmup()
            freeze_startup_heap()  # everything long-lived is built by now
            notify_warm()  # a supervisor recycling this worker measures its growth from here

        warm = asyncio.create_task(_warm())
        trim = asyncio.create_task(app.state.trimmer.run())
        # the supervisor's /healthz port tells a stuck loop from a busy one by this stamp
        beating = asyncio.create_task(_heartbeat()) if supervised() else None
        closers: list[Closer] = []
        try:
            for edge in edges:
                if edge.start is not None and (close := await edge.start(app, app.state.ctx)) is not None:
                    closers.append(close)
            yield
        finally:
            trim.cancel()
            if beating is not None:
                beating.cancel()
            for close in reversed(closers):
                await close()
            await service.drain(drain_seconds(DRAIN_SECONDS))
            warm.cancel()
            await asyncio.to_thread(pool.shutdown)
    finally:
        db.dispose()


async def _heartbeat() -> None:
    from app.http.healthport import BEAT_S

    while True:
        beat()
        await asyncio.sleep(BEAT_S)


def build_app(settings: Settings | None = None, *, edges: Sequence[Edge] = ()) -> FastAPI:
    """The app with `edges` mounted as peers (in order: where paths overlap, the first wins)."""
    app = FastAPI(
        title="logtriage",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url=None,  # the web edge serves Swagger UI from /static (no CDN)
        redoc_url=None,
    )
    app.state.settings = settings or get_settings()
    app.state.edges = tuple(edges)
    app.state.trimmer = memory.Trimmer()
    accesslog.install()
    app.add_middleware(HostCheck)  # inside errors.install's InputCheck: a 431 comes before a 400
    errors.install(app)
    app.add_middleware(InputCheck)  # control characters and header sizes, every route
    openapi.document_problems(app)
    app.add_middleware(SecurityHeaders)  # the outer one: a refused Host's answer has them too
    app.include_router(health.router)
    for edge in edges:
        for router in edge.routers:
            app.include_router(router)
        if edge.install is not None:
            edge.install(app)

    @app.get("/problems/{slug}", include_in_schema=False)
    def problem_doc(slug: str) -> JSONResponse:
        for p in errors.problem_catalogue():
            if p["type"] == errors.problem_type(slug):
                return JSONResponse(p)
        raise NotFoundError(f"no problem type {slug!r}")

    @app.get("/problems", include_in_schema=False)
    def problem_list() -> list[dict[str, Any]]:
        return errors.problem_catalogue()

    return app
