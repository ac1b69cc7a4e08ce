"""The database a serving process opens, and the migration it may run at start-up."""

from __future__ import annotations

from app.db.migrate import ensure_current
from app.db.session import Database, DbTimeouts
from app.settings import Settings

__all__ = ["migrate", "open_database", "service_timeouts"]


def open_database(settings: Settings) -> Database:
    """The serving process's database, every wait on it bounded (see LOGTRIAGE_DB_*_TIMEOUT)."""
    return Database(settings.effective_database_url, timeouts=service_timeouts(settings))


def service_timeouts(settings: Settings) -> DbTimeouts:
    """The bounded waits of a serving process (see LOGTRIAGE_DB_*_TIMEOUT)."""
    return DbTimeouts(
        connect=settings.db_connect_timeout,
        statement=settings.db_statement_timeout or None,
        pool=settings.db_pool_timeout,
    )


def migrate(settings: Settings) -> bool:
    """Migrations may run long: their own engine, without the statement deadline."""
    mig = Database(settings.effective_database_url, timeouts=DbTimeouts(connect=settings.db_connect_timeout))
    try:
        return ensure_current(mig.engine, lock_dir=settings.data_dir)
    finally:
        mig.dispose()
