"""Telling people about analyses: the interface the service offers the edges, whoever delivers.

The REST API takes `notify=<channel>` on an upload and re-triage refreshes what was posted; the
Slack edge is what delivers today. The REST edge must not import the Slack edge (edges are
peers), so both meet here: the Slack bot registers itself as the context's `notifier` when it
starts, and the REST routes call these functions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.errors import ValidationFailedError
from app.service.context import Notifier, ServiceContext

__all__ = ["Notifier", "announce_change", "check_channel", "hosts_flagged", "notify_later"]


def check_channel(ctx: ServiceContext, *, channel: str) -> None:
    """A 422 before anything is stored when `notify=` cannot be honoured."""
    if ctx.notifier is None:
        raise ValidationFailedError(
            "notify: the Slack bot is not configured on this server (set LOGTRIAGE_SLACK_BOT_TOKEN; "
            "docs/slack.md)"
        )
    why = ctx.notifier.valid_channel(channel)
    if why is not None:
        raise ValidationFailedError(f"notify: {why}")


def notify_later(
    ctx: ServiceContext, *, analysis_id: str, channel: str, base: str, pending: asyncio.Task[Any] | None
) -> None:
    if ctx.notifier is not None:
        ctx.notifier.notify_later(analysis_id=analysis_id, channel=channel, base=base, pending=pending)


def announce_change(ctx: ServiceContext, *, analysis_id: str, base: str, note: str) -> None:
    if ctx.notifier is not None:
        ctx.notifier.analysis_changed(analysis_id=analysis_id, base=base, note=note)


def hosts_flagged(ctx: ServiceContext, *, analysis_id: str, hosts: list[dict[str, Any]]) -> None:
    """Hosts this analysis put over the exclusion threshold (the lemon-node ledger)."""
    if ctx.notifier is not None and hosts:
        ctx.notifier.hosts_flagged(analysis_id=analysis_id, hosts=hosts)
