"""Alembic environment: the URL comes from the caller (app.db.migrate) or LOGTRIAGE_* settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from app.db.models import Base
from app.db.session import make_engine

config = context.config
target_metadata = Base.metadata
# Postgres: one migrator at a time across every server sharing the database.
ADVISORY_LOCK_ID = 0x6C6F6774  # "logt"


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from app.settings import get_settings

    return get_settings().effective_database_url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_ID})
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
