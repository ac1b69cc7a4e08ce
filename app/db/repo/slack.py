"""What the Slack bot remembers: deliveries already taken, and the messages it posted."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.db.models import SlackEvent, SlackMessage, utcnow


def claim_slack_event(session: Session, *, key: str) -> bool:
    """True for the first claim of `key`; False when a retry, another worker or an earlier run
    of this one already took it. One statement, so concurrent claims cannot both win."""
    values = {"key": key[:200], "received_at": utcnow()}
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(SlackEvent).values(**values).on_conflict_do_nothing().returning(SlackEvent.key)
    # a row back means this insert made it (an ORM insert's rowcount is -1 on psycopg)
    return session.execute(stmt).first() is not None


def prune_slack_events(session: Session, *, before: dt.datetime) -> int:
    """Forget deliveries older than Slack's retry horizon (it retries for minutes, not days)."""
    result = session.execute(delete(SlackEvent).where(SlackEvent.received_at < before))
    return int(result.rowcount)  # type: ignore[attr-defined]


def add_slack_message(
    session: Session,
    *,
    analysis_id: str,
    channel: str,
    ts: str,
    thread_ts: str | None,
    purpose: str,
    fingerprint: str | None,
) -> SlackMessage:
    row = SlackMessage(
        analysis_id=analysis_id,
        channel=channel,
        ts=ts,
        thread_ts=thread_ts,
        purpose=purpose,
        fingerprint=fingerprint,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def slack_thread_head(
    session: Session, *, channel: str, fingerprint: str, since: dt.datetime
) -> SlackMessage | None:
    """The newest top-level notification of `fingerprint` in `channel` since `since`."""
    return session.scalar(
        select(SlackMessage)
        .where(
            SlackMessage.channel == channel,
            SlackMessage.fingerprint == fingerprint,
            SlackMessage.purpose == "notify",
            SlackMessage.created_at >= since,
        )
        .order_by(SlackMessage.created_at.desc(), SlackMessage.id.desc())
        .limit(1)
    )


def slack_messages_of(session: Session, *, analysis_id: str) -> list[SlackMessage]:
    """The diagnosis messages posted about an analysis (not the one-line repeats)."""
    return list(
        session.scalars(
            select(SlackMessage)
            .where(SlackMessage.analysis_id == analysis_id, SlackMessage.purpose != "repeat")
            .order_by(SlackMessage.id)
        )
    )
