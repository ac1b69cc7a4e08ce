"""Engine and session factories. Nothing is created at import time.

SQLite (the default) gets WAL, a busy timeout and foreign keys; write transactions on SQLite start
with ``BEGIN IMMEDIATE`` so two writers queue on the busy timeout instead of failing with
"database is locked" when a read transaction tries to upgrade to a write.

PostgreSQL gets bounded waits (``DbTimeouts``): a connect timeout, a pool-checkout timeout, the
server's ``statement_timeout`` and, for a server that accepts connections but never answers, a
client-side deadline on every statement, commit, rollback and pre-ping (app/db/deadline.py). A
database that cannot be reached in time fails fast for ``RECONNECT_PAUSE_S``: requests then get
their 503 at once instead of each waiting out its own connect timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_MS = 30_000
STATEMENT_GRACE_S = 2.0  # the client-side deadline waits this much past the server's own timeout
RECONNECT_PAUSE_S = 1.0  # after a failed connect, new connects fail at once for this long


@dataclass(frozen=True)
class DbTimeouts:
    """Seconds. `statement` None: no statement deadline (migrations, gc, bulk re-triage)."""

    connect: float = 3.0
    statement: float | None = None
    pool: float = 3.0


def make_engine(url: str, *, echo: bool = False, timeouts: DbTimeouts | None = None) -> Engine:
    u = make_url(url)
    t = timeouts or DbTimeouts()
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            u, echo=echo, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_MS / 1000}
        )
        _sqlite_setup(engine)
        return engine
    connect_args: dict[str, Any] = {}
    if u.get_driver_name() in ("psycopg", "psycopg2", "psycopg2cffi"):
        # libpq's rule: whole seconds, at least 2
        connect_args["connect_timeout"] = max(2, round(t.connect))
        if t.statement:
            options = " ".join(
                o
                for o in (str(u.query.get("options", "")), f"-c statement_timeout={int(t.statement * 1000)}")
                if o
            )
            connect_args["options"] = options
    engine = create_engine(
        u,
        echo=echo,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=10,
        pool_timeout=t.pool,
        connect_args=connect_args,
    )
    if u.get_backend_name() == "postgresql":
        from app.db import deadline

        statement_s = t.statement + STATEMENT_GRACE_S if t.statement else None
        deadline.install(engine, statement_s=statement_s, ping_s=max(t.connect, 1.0))
        _pause_after_failed_connect(engine)
    return engine


class _ConnectPause:
    until = 0.0
    failed_at: float | None = None
    succeeded_at = 0.0
    why = ""


def _pause_after_failed_connect(engine: Engine) -> None:
    """A database that did not answer a connect is not asked again for RECONNECT_PAUSE_S: the
    requests in between fail at once (503) instead of each holding a thread for the connect
    timeout."""
    pause = _ConnectPause()

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, _rec: Any, cargs: Any, cparams: Any) -> Any:
        if time.monotonic() < pause.until:
            raise dialect.loaded_dbapi.OperationalError(
                f"connecting to the database failed just now ({pause.why}); not retrying yet"
            )
        started = time.monotonic()
        try:
            conn = dialect.connect(*cargs, **cparams)
        except Exception as exc:
            if started >= pause.succeeded_at:  # not a straggler from before the database came back
                pause.why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
                pause.failed_at = time.monotonic()
                pause.until = pause.failed_at + RECONNECT_PAUSE_S
            raise
        pause.succeeded_at, pause.until, pause.failed_at = time.monotonic(), 0.0, None
        return conn

    engine.info_connect_pause = pause  # type: ignore[attr-defined]


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

    def __init__(self, url: str, *, timeouts: DbTimeouts | None = None) -> None:
        self.url = url
        self.timeouts = timeouts or DbTimeouts()
        self.engine = make_engine(url, timeouts=self.timeouts)
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

    def connect_failed_within(self, seconds: float) -> bool:
        """Whether connecting to the database failed less than `seconds` ago (PostgreSQL)."""
        pause: _ConnectPause | None = getattr(self.engine, "info_connect_pause", None)
        return bool(pause and pause.failed_at is not None and time.monotonic() - pause.failed_at < seconds)

    def dispose(self) -> None:
        self.engine.dispose()
