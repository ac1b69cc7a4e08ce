"""Outcomes: how the next attempt of a failed job ended, linked to the analysed failure it
followed (issue 24: the measured history behind an analysis' action); host clearances: an
operator's "this node was repaired", after which its earlier hardware failures stop counting;
the outcomes' tallies per class, rule and fingerprint (the history is read from them); the
hosts of the ranks timed-out jobs waited for (the ledger counts them across jobs).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outcomes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=256), nullable=False),
        sa.Column("attempt_id", sa.String(length=256), nullable=True),
        sa.Column("analysis_id", sa.String(length=26), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("action", sa.String(length=20), nullable=True),
        sa.Column("advised", sa.String(length=20), nullable=True),
        sa.Column("failure_class", sa.String(length=100), nullable=True),
        sa.Column("rule_id", sa.String(length=100), nullable=True),
        sa.Column("fingerprint", sa.String(length=32), nullable=True),
        sa.Column("excluded_hosts", sa.JSON(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_outcomes_analysis_id_analyses"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_outcomes_token_id_api_tokens"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outcomes")),
        sa.UniqueConstraint("job_id", "attempt_id", name=op.f("uq_outcomes_job_id_attempt_id")),
    )
    op.create_index("ix_outcomes_analysis_id", "outcomes", ["analysis_id"], unique=True)
    op.create_index("ix_outcomes_class_rule", "outcomes", ["failure_class", "rule_id"], unique=False)
    op.create_index("ix_outcomes_created_at", "outcomes", ["created_at"], unique=False)
    op.create_index("ix_outcomes_fingerprint", "outcomes", ["fingerprint"], unique=False)
    op.create_index("ix_outcomes_job_id", "outcomes", ["job_id"], unique=False)
    op.create_table(
        "outcome_tallies",
        sa.Column("scope", sa.String(length=12), nullable=False),
        sa.Column("key", sa.String(length=210), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("retries_ok", sa.Integer(), nullable=False),
        sa.Column("fixes", sa.Integer(), nullable=False),
        sa.Column("fixes_ok", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key", name=op.f("pk_outcome_tallies")),
    )
    op.create_table(
        "odd_rank_hosts",
        sa.Column("analysis_id", sa.String(length=26), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_odd_rank_hosts_analysis_id_analyses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("analysis_id", "host", name=op.f("pk_odd_rank_hosts")),
    )
    op.create_index("ix_odd_rank_hosts_host", "odd_rank_hosts", ["host"], unique=False)
    op.create_table(
        "host_clearances",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_host_clearances_token_id_api_tokens"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_host_clearances")),
    )


def downgrade() -> None:
    op.drop_table("host_clearances")
    op.drop_index("ix_odd_rank_hosts_host", table_name="odd_rank_hosts")
    op.drop_table("odd_rank_hosts")
    op.drop_table("outcome_tallies")
    for name in (
        "ix_outcomes_job_id",
        "ix_outcomes_fingerprint",
        "ix_outcomes_created_at",
        "ix_outcomes_class_rule",
        "ix_outcomes_analysis_id",
    ):
        op.drop_index(name, table_name="outcomes")
    op.drop_table("outcomes")
