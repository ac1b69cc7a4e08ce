"""The FastAPI application factory: ``create_app()`` (uvicorn: ``app.api.main:create_app --factory``).

Everything heavy (database engine, migrations, rule library, scan worker processes) is built in
the lifespan, never at import time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from app import __version__
from app.api import accesslog, errors, memory
from app.api.authcache import AuthCache
from app.api.context import AppContext
from app.api.hosts import HostCheck
from app.api.routes import analyses, health, rules, slack, stats
from app.api.serve import beat, drain_seconds, notify_warm, supervised
from app.blobstore import open_blob_store
from app.db import repo
from app.db.migrate import ensure_current
from app.db.session import Database, DbTimeouts
from app.engine.pipeline.library import load_library
from app.errors import NotFoundError
from app.render.html import inline, markdown_block
from app.service.analyses import AnalysisService
from app.service.pool import ScanPool
from app.service.worker import freeze_startup_heap
from app.settings import Settings, get_settings
from app.web import routes as web
from app.web.security import SecurityHeaders
from app.web.session import SessionCodec, load_secret

log = logging.getLogger("logtriage")
TEMPLATES = Path(__file__).resolve().parents[1] / "web" / "templates"
DRAIN_SECONDS = 20.0

DESCRIPTION = """
Diagnose failed RL/LLM training jobs from their logs. A job's failure hook posts its log to
`POST /api/v1/analyses`; the answer holds the root cause, the fix and a permalink.

**Auth:** `Authorization: Bearer <token>` (tokens from `logtriage tokens create`, scopes `ingest`,
`read`, `admin`). While no token exists the service is open to loopback clients only.

**Errors** are RFC 9457 `application/problem+json` documents.
"""


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


def service_timeouts(settings: Settings) -> DbTimeouts:
    """The bounded waits of a serving process (see LOGTRIAGE_DB_*_TIMEOUT)."""
    return DbTimeouts(
        connect=settings.db_connect_timeout,
        statement=settings.db_statement_timeout or None,
        pool=settings.db_pool_timeout,
    )


def _migrate(settings: Settings) -> bool:
    """Migrations may run long: their own engine, without the statement deadline."""
    mig = Database(settings.effective_database_url, timeouts=DbTimeouts(connect=settings.db_connect_timeout))
    try:
        return ensure_current(mig.engine, lock_dir=settings.data_dir)
    finally:
        mig.dispose()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.effective_database_url, timeouts=service_timeouts(settings))
    try:
        if settings.auto_migrate:
            migrated = await asyncio.to_thread(_migrate, settings)
            if migrated:
                log.info("database schema upgraded")
        store = open_blob_store(settings)
        await asyncio.to_thread(store.check_writable)
        library = await asyncio.to_thread(load_library, settings.rules_dir)
        pool = ScanPool(settings)
        service = AnalysisService(settings=settings, db=db, store=store, pool=pool)
        app.state.ctx = AppContext(
            settings=settings,
            db=db,
            store=store,
            library=library,
            pool=pool,
            service=service,
            templates=make_templates(),
            auth=AuthCache(settings.auth_cache_seconds),
            sessions=SessionCodec(
                await asyncio.to_thread(load_secret, settings),
                hours=settings.session_hours,
                secure=secure_cookies(settings),
            ),
        )

        def _tokens() -> bool:
            with db.read() as s:
                exist = repo.any_active_token(s)
            app.state.ctx.auth.remember_tokens_exist(exist)
            return exist

        if not settings.require_tokens and not await asyncio.to_thread(_tokens):
            log.warning(open_mode_message(settings))

        async def _warm() -> None:
            # compiled now, not by the first visitor (a first report view took ~105 ms), and
            # counted in the start-up heap that is frozen and that memory is measured against
            await asyncio.to_thread(compile_templates, app.state.ctx.templates)
            await pool.warmup()
            freeze_startup_heap()  # everything long-lived is built by now
            notify_warm()  # a supervisor recycling this worker measures its growth from here

        warm = asyncio.create_task(_warm())
        trim = asyncio.create_task(app.state.trimmer.run())
        # the supervisor's /healthz port tells a stuck loop from a busy one by this stamp
        beating = asyncio.create_task(_heartbeat()) if supervised() else None
        if settings.slack_bot_token is not None:
            await start_slack(app.state.ctx, settings)
        try:
            yield
        finally:
            trim.cancel()
            if beating is not None:
                beating.cancel()
            if app.state.ctx.slack is not None:
                await app.state.ctx.slack.close()
            await service.drain(drain_seconds(DRAIN_SECONDS))
            warm.cancel()
            await asyncio.to_thread(pool.shutdown)
    finally:
        db.dispose()


async def _heartbeat() -> None:
    from app.api.healthport import BEAT_S

    while True:
        beat()
        await asyncio.sleep(BEAT_S)


async def start_slack(ctx: AppContext, settings: Settings) -> None:
    """The bot (slack_bolt is imported only here, when it is configured). Socket Mode failing
    to connect is logged, not fatal: the web pages and the API keep serving."""
    from app.slack.bot import SlackBot

    bot = SlackBot(ctx=ctx, settings=settings)
    if not settings.public_url:
        log.warning(
            "LOGTRIAGE_PUBLIC_URL is unset: the report links the Slack bot posts point to %s",
            bot.default_base,
        )
    await asyncio.to_thread(bot.prune)
    ctx.slack = bot
    if settings.slack_socket_enabled:
        try:
            await bot.start_socket_mode()
        except Exception as exc:
            log.error("Slack Socket Mode could not connect: %s", exc)
    if not settings.slack_http_enabled and not settings.slack_socket_enabled:
        log.warning(
            "LOGTRIAGE_SLACK_BOT_TOKEN is set but neither LOGTRIAGE_SLACK_SIGNING_SECRET (/slack/events) "
            "nor LOGTRIAGE_SLACK_APP_TOKEN (Socket Mode): the bot receives nothing, hooks can still notify"
        )


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(
        title="logtriage",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url=None,  # app.web.routes.docs serves Swagger UI from /static (no CDN)
        redoc_url=None,
    )
    app.state.settings = settings or get_settings()
    app.state.trimmer = memory.Trimmer()
    accesslog.install()
    app.add_middleware(HostCheck)  # inside errors.install's InputCheck: a 431 comes before a 400
    errors.install(app)
    app.add_middleware(SecurityHeaders)  # the outer one: a refused Host's answer has them too
    app.include_router(analyses.router)
    app.include_router(rules.router)
    app.include_router(stats.router)
    app.include_router(health.router)
    app.include_router(slack.router)
    web.install(app)

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
