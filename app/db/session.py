"""Engine and session factories. Nothing is created at import time.

SQLite (the default) gets WAL, a busy timeout and foreign keys; write transactions on SQLite start
with ``BEGIN IMMEDIATE`` so two writers queue on the busy timeout instead of failing with
"database is locked" when a read transaction tries to upgrade to a write.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_MS = 30_000


def make_engine(url: str, *, echo: bool = False) -> Engine:
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            u, echo=echo, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_MS / 1000}
        )
        _sqlite_setup(engine)
        return engine
    return create_engine(u, echo=echo, pool_pre_ping=True, pool_size=10, max_overflow=10)


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see _begin)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


class Database:
    """One engine and its two session factories (reads; writes that start as writers)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        write_bind = (
            self.engine.execution_options(sqlite_begin="IMMEDIATE") if self.is_sqlite else self.engine
        )
        self.reader = sessionmaker(self.engine, expire_on_commit=False)
        self.writer = sessionmaker(write_bind, expire_on_commit=False)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self.reader() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction that commits on success and rolls back on any exception."""
        with self.writer() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
