"""Blob rows and the garbage collector's queries."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, delete, exists, select
from sqlalchemy.orm import Session

from app.db.models import (
    Analysis,
    AnalysisFile,
    Blob,
)


def known_blobs(session: Session) -> set[str]:
    return set(session.scalars(select(Blob.sha256)))


def unreferenced_blobs(session: Session) -> list[str]:
    stmt = select(Blob.sha256).where(
        ~exists().where(AnalysisFile.blob_sha256 == Blob.sha256),
        ~exists().where(and_(Analysis.config_sha256 == Blob.sha256)),
    )
    return list(session.scalars(stmt))


def delete_blob_rows(session: Session, *, shas: Sequence[str]) -> None:
    if shas:
        session.execute(delete(Blob).where(Blob.sha256.in_(list(shas))))
