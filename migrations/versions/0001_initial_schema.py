"""Initial schema: analyses, files, findings, rule versions, blobs, feedback, retriages, tokens.

Revision ID: 0001
Revises:
Create Date: 2025-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("stored_size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
    )
    op.create_table(
        "rule_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("text_sha256", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("failure_class", sa.String(length=100), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("library_version", sa.String(length=50), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rule_versions")),
        sa.UniqueConstraint(
            "rule_id", "version", "text_sha256", name=op.f("uq_rule_versions_rule_id_version_text_sha256")
        ),
    )
    op.create_index(op.f("ix_rule_versions_rule_id"), "rule_versions", ["rule_id"])
    op.create_table(
        "analyses",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.String(length=256), nullable=True),
        sa.Column("framework", sa.String(length=32), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("idempotency_scope", sa.String(length=32), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_digest", sa.String(length=64), nullable=True),
        sa.Column("runner", sa.String(length=128), nullable=True),
        sa.Column("log_digest", sa.String(length=64), nullable=True),
        sa.Column("log_bytes", sa.BigInteger(), nullable=True),
        sa.Column("duplicate_of_id", sa.String(length=26), nullable=True),
        sa.Column("config_name", sa.String(length=255), nullable=True),
        sa.Column("config_sha256", sa.String(length=64), nullable=True),
        sa.Column("library_version", sa.String(length=50), nullable=True),
        sa.Column("root_class", sa.String(length=100), nullable=True),
        sa.Column("root_kind", sa.String(length=32), nullable=True),
        sa.Column("root_rule_id", sa.String(length=100), nullable=True),
        sa.Column("fingerprint", sa.String(length=32), nullable=True),
        sa.Column("framework_detected", sa.String(length=32), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("retriaged_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["config_sha256"], ["blobs.sha256"], name=op.f("fk_analyses_config_sha256_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["duplicate_of_id"],
            ["analyses.id"],
            name=op.f("fk_analyses_duplicate_of_id_analyses"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_analyses_token_id_api_tokens"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analyses")),
        sa.UniqueConstraint(
            "idempotency_scope", "idempotency_key", name=op.f("uq_analyses_idempotency_scope_idempotency_key")
        ),
    )
    op.create_index(op.f("ix_analyses_created_at"), "analyses", ["created_at"])
    op.create_index("ix_analyses_fingerprint_created", "analyses", ["fingerprint", "created_at"])
    op.create_index(op.f("ix_analyses_framework_detected"), "analyses", ["framework_detected"])
    op.create_index(op.f("ix_analyses_host"), "analyses", ["host"])
    op.create_index(op.f("ix_analyses_job_id"), "analyses", ["job_id"])
    op.create_index(op.f("ix_analyses_log_digest"), "analyses", ["log_digest"])
    op.create_index(op.f("ix_analyses_root_class"), "analyses", ["root_class"])
    op.create_index(op.f("ix_analyses_root_kind"), "analyses", ["root_kind"])
    op.create_index(op.f("ix_analyses_status"), "analyses", ["status"])
    op.create_table(
        "analysis_files",
        sa.Column("analysis_id", sa.String(length=26), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("blob_sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_analysis_files_analysis_id_analyses"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["blob_sha256"], ["blobs.sha256"], name=op.f("fk_analysis_files_blob_sha256_blobs")
        ),
        sa.PrimaryKeyConstraint("analysis_id", "position", name=op.f("pk_analysis_files")),
    )
    op.create_index(op.f("ix_analysis_files_blob_sha256"), "analysis_files", ["blob_sha256"])
    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("analysis_id", sa.String(length=26), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("correct_class", sa.String(length=100), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_feedback_analysis_id_analyses"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_feedback_token_id_api_tokens"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feedback")),
    )
    op.create_index(op.f("ix_feedback_analysis_id"), "feedback", ["analysis_id"])
    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("analysis_id", sa.String(length=26), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("rule_version_id", sa.Integer(), nullable=True),
        sa.Column("rule_id", sa.String(length=100), nullable=False),
        sa.Column("rule_version", sa.Integer(), nullable=False),
        sa.Column("failure_class", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_findings_analysis_id_analyses"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["rule_version_id"], ["rule_versions.id"], name=op.f("fk_findings_rule_version_id_rule_versions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
    )
    op.create_index(op.f("ix_findings_analysis_id"), "findings", ["analysis_id"])
    op.create_index(op.f("ix_findings_failure_class"), "findings", ["failure_class"])
    op.create_index(op.f("ix_findings_fingerprint"), "findings", ["fingerprint"])
    op.create_index(op.f("ix_findings_rule_id"), "findings", ["rule_id"])
    op.create_table(
        "retriages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("analysis_id", sa.String(length=26), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_library_version", sa.String(length=50), nullable=True),
        sa.Column("to_library_version", sa.String(length=50), nullable=False),
        sa.Column("from_class", sa.String(length=100), nullable=True),
        sa.Column("to_class", sa.String(length=100), nullable=False),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["analysis_id"],
            ["analyses.id"],
            name=op.f("fk_retriages_analysis_id_analyses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retriages")),
    )
    op.create_index(op.f("ix_retriages_analysis_id"), "retriages", ["analysis_id"])
    op.create_table(
        "finding_hosts",
        sa.Column("finding_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["finding_id"],
            ["findings.id"],
            name=op.f("fk_finding_hosts_finding_id_findings"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("finding_id", "host", name=op.f("pk_finding_hosts")),
    )
    op.create_index(op.f("ix_finding_hosts_host"), "finding_hosts", ["host"])


def downgrade() -> None:
    op.drop_index(op.f("ix_finding_hosts_host"), table_name="finding_hosts")
    op.drop_table("finding_hosts")
    op.drop_index(op.f("ix_retriages_analysis_id"), table_name="retriages")
    op.drop_table("retriages")
    op.drop_index(op.f("ix_findings_rule_id"), table_name="findings")
    op.drop_index(op.f("ix_findings_fingerprint"), table_name="findings")
    op.drop_index(op.f("ix_findings_failure_class"), table_name="findings")
    op.drop_index(op.f("ix_findings_analysis_id"), table_name="findings")
    op.drop_table("findings")
    op.drop_index(op.f("ix_feedback_analysis_id"), table_name="feedback")
    op.drop_table("feedback")
    op.drop_index(op.f("ix_analysis_files_blob_sha256"), table_name="analysis_files")
    op.drop_table("analysis_files")
    op.drop_index(op.f("ix_analyses_status"), table_name="analyses")
    op.drop_index(op.f("ix_analyses_root_kind"), table_name="analyses")
    op.drop_index(op.f("ix_analyses_root_class"), table_name="analyses")
    op.drop_index(op.f("ix_analyses_log_digest"), table_name="analyses")
    op.drop_index(op.f("ix_analyses_job_id"), table_name="analyses")
    op.drop_index(op.f("ix_analyses_host"), table_name="analyses")
    op.drop_index(op.f("ix_analyses_framework_detected"), table_name="analyses")
    op.drop_index("ix_analyses_fingerprint_created", table_name="analyses")
    op.drop_index(op.f("ix_analyses_created_at"), table_name="analyses")
    op.drop_table("analyses")
    op.drop_index(op.f("ix_rule_versions_rule_id"), table_name="rule_versions")
    op.drop_table("rule_versions")
    op.drop_table("blobs")
    op.drop_table("api_tokens")
