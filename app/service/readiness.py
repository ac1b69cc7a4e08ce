"""The checks behind `/readyz`, each a plain blocking call (the HTTP side runs each in a
thread of its own with a deadline: `app.http.health`)."""

from __future__ import annotations

import shutil

from app.db.migrate import head_revision
from app.service.context import ServiceContext

__all__ = ["blob_store_writable", "database_schema", "disk_free"]


def database_schema(ctx: ServiceContext) -> tuple[str | None, str]:
    """(the database's schema revision, the one this code expects): a round trip to the database."""
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import text

    with ctx.db.engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        current = MigrationContext.configure(conn).get_current_revision()
    return current, head_revision()


def blob_store_writable(ctx: ServiceContext) -> None:
    ctx.store.check_writable()


def disk_free(ctx: ServiceContext) -> int:
    """Bytes free on the data directory's disk."""
    return shutil.disk_usage(ctx.settings.data_dir).free
