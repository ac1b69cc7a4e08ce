"""The Slack bot as an edge of the HTTP app: `/slack/events`, and the bot's life with the service.

slack_bolt is imported only when the bot is configured. Socket Mode failing to connect is
logged, not fatal: the web pages and the API keep serving.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI

from app.http.context import AppContext
from app.http.edge import Closer, Edge
from app.slack import route

__all__ = ["edge"]

log = logging.getLogger("logtriage")


def edge() -> Edge:
    return Edge(name="slack", routers=(route.router,), start=_start)


async def _start(app: FastAPI, ctx: AppContext) -> Closer | None:
    settings = ctx.settings
    if settings.slack_bot_token is None:
        return None
    from app.slack.bot import SlackBot

    bot = SlackBot(ctx=ctx, settings=settings)
    if not settings.public_url:
        log.warning(
            "LOGTRIAGE_PUBLIC_URL is unset: the report links the Slack bot posts point to %s",
            bot.default_base,
        )
    await asyncio.to_thread(bot.prune)
    app.state.slack_bot = bot
    ctx.notifier = bot  # hooks' `notify=` and re-triage updates go through the bot
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

    async def close() -> None:
        ctx.notifier = None
        app.state.slack_bot = None
        await bot.close()

    return close
