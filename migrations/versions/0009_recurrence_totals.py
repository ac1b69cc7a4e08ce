"""Recurrence totals: each fingerprint's count of distinct jobs and hosts, backfilled from the
per-job and per-host counters (recurrence then reads one row instead of counting them).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "recurrence_totals",
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("hosts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint", name=op.f("pk_recurrence_totals")),
    )
    # plain SQL, as in 0002: what the counters hold now, whatever the application's code becomes
    op.execute(
        "INSERT INTO recurrence_totals (fingerprint, jobs, hosts) "
        "SELECT fingerprint, sum(jobs), sum(hosts) FROM ("
        "SELECT fingerprint, count(*) AS jobs, 0 AS hosts FROM recurrence_jobs GROUP BY fingerprint "
        "UNION ALL "
        "SELECT fingerprint, 0 AS jobs, count(*) AS hosts FROM recurrence_hosts GROUP BY fingerprint"
        ") t GROUP BY fingerprint"
    )


def downgrade() -> None:
    op.drop_table("recurrence_totals")
