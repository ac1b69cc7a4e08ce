"""Slack bot: deliveries already taken (deduplication across retries, workers and restarts)
and the messages posted about analyses (updated in place; repeats threaded).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "slack_events",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_slack_events")),
    )
    op.create_index("ix_slack_events_received_at", "slack_events", ["received_at"], unique=False)
    op.create_table(
        "slack_messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("analysis_id", sa.String(length=26), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("ts", sa.String(length=40), nullable=False),
        sa.Column("thread_ts", sa.String(length=40), nullable=True),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_slack_messages_analysis_id_analyses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_slack_messages")),
    )
    op.create_index("ix_slack_messages_analysis_id", "slack_messages", ["analysis_id"], unique=False)
    op.create_index(
        "ix_slack_messages_channel_fp_created",
        "slack_messages",
        ["channel", "fingerprint", "created_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_slack_messages_channel_fp_created", table_name="slack_messages")
    op.drop_index("ix_slack_messages_analysis_id", table_name="slack_messages")
    op.drop_table("slack_messages")
    op.drop_index("ix_slack_events_received_at", table_name="slack_events")
    op.drop_table("slack_events")
