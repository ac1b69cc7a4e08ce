"""Rule versions as matched, kept with the analyses that used them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import (
    Finding,
    RuleVersion,
)


def rule_versions(session: Session, *, rule_id: str) -> list[RuleVersion]:
    return list(
        session.scalars(
            select(RuleVersion)
            .where(RuleVersion.rule_id == rule_id)
            .order_by(RuleVersion.version, RuleVersion.id)
        )
    )


def rule_version_text(session: Session, *, rule_version_id: int) -> RuleVersion | None:
    return session.get(RuleVersion, rule_version_id)


def finding_rule_versions(session: Session, *, analysis_id: str) -> dict[str, RuleVersion]:
    rows = session.execute(
        select(Finding.rule_id, RuleVersion)
        .join(RuleVersion, RuleVersion.id == Finding.rule_version_id)
        .where(Finding.analysis_id == analysis_id)
    ).all()
    return {rid: rv for rid, rv in rows}
