"""Web pages at scale: a covering index over the history/trends window, rule activity by
analysis, and the cache's data version read from indexes instead of a table scan.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A SQLite row keeps the result JSON (KBs, overflow pages) before the columns the history and
# trends pages read; an index holding those columns lets both pages skip the table entirely.
WINDOW = ["created_at", "id", "status", "root_class", "root_kind", "job_id", "root_title"]


def upgrade() -> None:
    op.create_index("ix_analyses_window", "analyses", WINDOW, unique=False)
    op.create_index("ix_analyses_finished_at", "analyses", ["finished_at"], unique=False)
    op.create_index("ix_analyses_retriaged_at", "analyses", ["retriaged_at"], unique=False)
    op.create_index("ix_findings_analysis_rule", "findings", ["analysis_id", "rule_id"], unique=False)
    op.create_index("ix_findings_kind", "findings", ["kind"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_findings_kind", table_name="findings")
    op.drop_index("ix_findings_analysis_rule", table_name="findings")
    op.drop_index("ix_analyses_retriaged_at", table_name="analyses")
    op.drop_index("ix_analyses_finished_at", table_name="analyses")
    op.drop_index("ix_analyses_window", table_name="analyses")
