"""`/slack/events`: the Slack app's one request URL (events, interactivity, slash commands).

Slack authenticates by signature, not by our tokens: Bolt verifies it (and its 5-minute replay
window) before any listener runs; a bad one is a 401 problem like every other refusal here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request, Response

from app.errors import NotFoundError
from app.http.deps import CtxDep
from app.http.shared import base_url

if TYPE_CHECKING:
    from app.slack.bot import SlackBot

router = APIRouter(include_in_schema=False)

NOT_CONFIGURED = (
    "the Slack bot is not configured on this server: set LOGTRIAGE_SLACK_BOT_TOKEN and "
    "LOGTRIAGE_SLACK_SIGNING_SECRET (docs/slack.md)"
)


@router.post("/slack/events")
async def slack_events(request: Request, ctx: CtxDep) -> Response:
    bot: SlackBot | None = getattr(request.app.state, "slack_bot", None)  # set by the edge's start
    if bot is None or not ctx.settings.slack_http_enabled:
        raise NotFoundError(NOT_CONFIGURED)
    return await bot.handle(request, base=base_url(request, ctx))
