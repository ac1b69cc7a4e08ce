"""Helpers shared by the storage modules."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.models import (
    Analysis,
    table_of,
)


@functools.cache
def _insert_ignore_stmt(dialect: str, model: Any) -> Any:
    table = table_of(model)
    return (
        postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
    ).on_conflict_do_nothing()


def insert_ignore(session: Session, model: Any, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        # built once, run as executemany on the connection, not through the ORM's bulk insert
        # (ARCHITECTURE.md, "A hook's statements compile once")
        session.connection().execute(_insert_ignore_stmt(dialect, model), rows)
    else:  # pragma: no cover - other backends: one at a time with a savepoint
        for row in rows:
            try:
                with session.begin_nested():
                    session.add(model(**row))
            except IntegrityError:
                pass


def finding_hosts(row: Analysis, finding: dict[str, Any]) -> list[str]:
    """Where a finding happened: the hosts its lines name, else the host the hook reported."""
    named = [h[:255] for h in (finding.get("hosts") or [])]
    return list(dict.fromkeys(named or ([row.host[:255]] if row.host else [])))


def iso_utc(value: Any) -> str:
    return aware_utc(value).isoformat().replace("+00:00", "Z")


def aware_utc(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    # SQLite returns MIN()/MAX() of a datetime column as text
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
