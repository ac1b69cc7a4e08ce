"""The version of the fingerprint algorithm each analysis was stored with (app.engine.fingerprint).

Rows stored before hold version 1 (the only algorithm there was); recurrence matches a stored row
by the version it records, so a new algorithm does not split stored failures from their repeats.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # the server default fills every existing row in the same statement: no separate backfill
    # pass over a large table, and no window in which a row has no version
    op.add_column(
        "analyses",
        sa.Column("fingerprint_version", sa.SmallInteger(), server_default="1", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("analyses", "fingerprint_version")
