"""Feedback on a root cause (web, API and Slack buttons)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.db.models import (
    Feedback,
    utcnow,
)


def add_feedback(
    session: Session,
    *,
    analysis_id: str,
    verdict: str,
    correct_class: str | None,
    comment: str | None,
    token_id: int | None,
) -> Feedback:
    row = Feedback(
        analysis_id=analysis_id,
        verdict=verdict,
        correct_class=correct_class,
        comment=comment,
        token_id=token_id,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row
