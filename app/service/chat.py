"""What the chat bot remembers between requests: the events it has handled (Slack retries
deliveries) and the messages it posted about each analysis (to update them, and to thread a
repeat of a failure under its first post)."""

from __future__ import annotations

import datetime as dt

from app.db import repo
from app.service.context import ServiceContext

__all__ = ["claim_events", "message_posted", "messages_of", "prune_events", "thread_head"]


def claim_events(ctx: ServiceContext, *, keys: tuple[str, ...]) -> bool:
    """True when every key is new (then all are taken); False on a repeat of any (none taken)."""
    with ctx.db.write() as s:
        for key in keys:
            if not repo.claim_slack_event(s, key=key):
                s.rollback()
                return False
        return True


def prune_events(ctx: ServiceContext, *, before: dt.datetime) -> int:
    with ctx.db.write() as s:
        return repo.prune_slack_events(s, before=before)


def message_posted(
    ctx: ServiceContext,
    *,
    analysis_id: str,
    channel: str,
    ts: str,
    thread_ts: str | None,
    purpose: str,
    fingerprint: str | None,
) -> None:
    with ctx.db.write() as s:
        repo.add_slack_message(
            s,
            analysis_id=analysis_id,
            channel=channel,
            ts=ts,
            thread_ts=thread_ts,
            purpose=purpose,
            fingerprint=fingerprint,
        )


def messages_of(ctx: ServiceContext, *, analysis_id: str) -> list[tuple[str, str]]:
    """(channel, ts) of every message posted about the analysis."""
    with ctx.db.read() as s:
        return [(m.channel, m.ts) for m in repo.slack_messages_of(s, analysis_id=analysis_id)]


def thread_head(
    ctx: ServiceContext, *, channel: str, fingerprint: str, since: dt.datetime
) -> tuple[str, str] | None:
    """The first post of this failure (fingerprint) in the channel since `since`, if any."""
    with ctx.db.read() as s:
        row = repo.slack_thread_head(s, channel=channel, fingerprint=fingerprint, since=since)
        return (row.channel, row.ts) if row else None
