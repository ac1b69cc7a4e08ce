"""Recurrence counters: per-fingerprint day, job and host tables, backfilled from the analyses.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "recurrence_days",
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("analyses", sa.Integer(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_analysis_id", sa.String(length=26), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint", "day", name=op.f("pk_recurrence_days")),
    )
    op.create_table(
        "recurrence_jobs",
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("job_key", sa.String(length=256), nullable=False),
        sa.Column("analyses", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint", "job_key", name=op.f("pk_recurrence_jobs")),
    )
    op.create_table(
        "recurrence_hosts",
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("analyses", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint", "host", name=op.f("pk_recurrence_hosts")),
    )
    # existing analyses count as if they had been counted when they completed (plain SQL: a
    # migration must not change meaning when the application's code changes later)
    pg = op.get_bind().dialect.name == "postgresql"
    day = "(created_at AT TIME ZONE 'UTC')::date" if pg else "date(created_at)"
    counted = "status = 'done' AND fingerprint IS NOT NULL AND duplicate_of_id IS NULL"
    op.execute(
        "INSERT INTO recurrence_days (fingerprint, day, analyses, first_at, last_at, first_analysis_id) "
        f"SELECT fingerprint, {day}, count(*), min(created_at), max(created_at), min(id) "
        f"FROM analyses WHERE {counted} GROUP BY fingerprint, {day}"
    )
    op.execute(
        "INSERT INTO recurrence_jobs (fingerprint, job_key, analyses) "
        "SELECT fingerprint, substr(coalesce(job_id, id), 1, 256), count(*) "
        f"FROM analyses WHERE {counted} GROUP BY fingerprint, substr(coalesce(job_id, id), 1, 256)"
    )
    op.execute(
        "INSERT INTO recurrence_hosts (fingerprint, host, analyses) "
        "SELECT a.fingerprint, h.host, count(DISTINCT a.id) FROM analyses a "
        "JOIN findings f ON f.analysis_id = a.id AND f.fingerprint = a.fingerprint "
        "JOIN finding_hosts h ON h.finding_id = f.id "
        f"WHERE a.{counted.replace(' AND ', ' AND a.')} GROUP BY a.fingerprint, h.host"
    )


def downgrade() -> None:
    op.drop_table("recurrence_hosts")
    op.drop_table("recurrence_jobs")
    op.drop_table("recurrence_days")
