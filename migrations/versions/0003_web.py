"""Web app: searchable root-cause titles, a frame index per blob, rule-activity index.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000


def upgrade() -> None:
    op.add_column("analyses", sa.Column("root_title", sa.String(length=300), nullable=True))
    op.create_index("ix_analyses_root_rule_created", "analyses", ["root_rule_id", "created_at"], unique=False)
    op.add_column("blobs", sa.Column("line_index", sa.JSON(), nullable=True))
    # backfill the titles from the stored results, a batch at a time (JSON paths differ by backend)
    conn = op.get_bind()
    analyses = sa.table(
        "analyses",
        sa.column("id", sa.String),
        sa.column("result", sa.JSON),
        sa.column("root_title", sa.String),
    )
    last = ""
    while True:
        rows = conn.execute(
            sa.select(analyses.c.id, analyses.c.result)
            .where(analyses.c.id > last, analyses.c.result.is_not(None))
            .order_by(analyses.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        for aid, result in rows:
            data = json.loads(result) if isinstance(result, str) else result
            root = (data or {}).get("root_cause")
            if root and root.get("title"):
                conn.execute(
                    sa.update(analyses)
                    .where(analyses.c.id == aid)
                    .values(root_title=str(root["title"])[:300])
                )
        last = rows[-1][0]


def downgrade() -> None:
    op.drop_column("blobs", "line_index")
    op.drop_index("ix_analyses_root_rule_created", table_name="analyses")
    op.drop_column("analyses", "root_title")
