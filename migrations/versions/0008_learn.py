"""Teaching the service (issue 23): each analysis' signal lines and their templates (the
unknowns inbox groups by them, back-tests read them), failure groups' triage state, rule
drafts with their back-tests, and the site rule pack (a row per published version: the audit).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "analysis_signals",
        sa.Column("analysis_id", sa.String(length=26), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=16), nullable=False),
        sa.Column("template", sa.Text(), nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_analysis_signals_analysis_id_analyses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("analysis_id", "position", name=op.f("pk_analysis_signals")),
    )
    op.create_index("ix_analysis_signals_key", "analysis_signals", ["key", "analysis_id"], unique=False)
    op.create_table(
        "failure_groups",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("assignee", sa.String(length=200), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("tracker_url", sa.String(length=2000), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_failure_groups_token_id_api_tokens"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_failure_groups")),
    )
    op.create_table(
        "rule_drafts",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.JSON(), nullable=False),
        sa.Column("rule", sa.JSON(), nullable=False),
        sa.Column("backtest", sa.JSON(), nullable=False),
        sa.Column("published_version", sa.Integer(), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_rule_drafts_token_id_api_tokens"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rule_drafts")),
    )
    op.create_table(
        "site_rules",
        sa.Column("rule_id", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("rule", sa.JSON(), nullable=False),
        sa.Column("draft_id", sa.String(length=26), nullable=True),
        sa.Column("diff", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_site_rules_token_id_api_tokens"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("rule_id", "version", name=op.f("pk_site_rules")),
    )
    op.create_index("ix_site_rules_published_at", "site_rules", ["published_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_site_rules_published_at", table_name="site_rules")
    op.drop_table("site_rules")
    op.drop_table("rule_drafts")
    op.drop_table("failure_groups")
    op.drop_index("ix_analysis_signals_key", table_name="analysis_signals")
    op.drop_table("analysis_signals")
