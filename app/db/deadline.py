"""Client-side deadlines on PostgreSQL calls: a database that accepts connections and never
answers (a stopped server, a frozen network path, a hung proxy) must not hold a thread, a pooled
connection and a request for as long as it lasts.

PostgreSQL's own ``statement_timeout`` needs a server that answers; a stopped one does not, and
TCP keepalives are answered by the kernel of a stopped server. So each network wait of the
driver (a statement with its result, a commit, a rollback, the pool's pre-ping) is armed on one
watchdog thread; if it is still waiting at its deadline, the watchdog shuts the connection's
socket down. The driver's wait then ends at once with a disconnect error (``OperationalError``),
the pool throws the connection away, and the caller answers 503. Connecting is bounded by the
driver's ``connect_timeout``.

The watchdog never touches a connection after its wait was disarmed (both under one lock), and
reads the socket from the live connection when it fires, so a closed connection's file
descriptor, reused by something else, is never shut down.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("logtriage.db")
INFO_KEY = "logtriage_deadline"


class Watchdog:
    """Deadlines on one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, Callable[[], None]] = {}
        self._seq = itertools.count(1)
        self._thread: threading.Thread | None = None
        self.fired = 0

    def arm(self, seconds: float, action: Callable[[], None]) -> int:
        with self._cond:
            token = next(self._seq)
            self._armed[token] = action
            due = time.monotonic() + seconds
            # the thread sleeps until the earliest deadline: only one earlier than that (or the
            # first) needs to wake it. Every statement arms one, all with the same timeout, so a
            # wake-up per statement cost the server process a thread switch per statement
            wake = not self._heap or due < self._heap[0][0]
            heapq.heappush(self._heap, (due, token))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="db-deadline", daemon=True)
                self._thread.start()
            if wake:
                self._cond.notify()
            return token

    def disarm(self, token: int) -> bool:
        """False when the deadline had already passed (the action ran)."""
        with self._cond:
            return self._armed.pop(token, None) is not None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)  # disarmed
                if not self._heap:
                    self._cond.wait()
                    continue
                due, token = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                action = self._armed.pop(token)
                self.fired += 1
                try:
                    action()  # under the lock: a disarm cannot return while it runs
                except Exception:  # pragma: no cover - a watchdog must survive anything
                    log.exception("database deadline action failed")


WATCHDOG = Watchdog()


def break_connection(dbapi_conn: Any) -> None:
    """Shut the socket of a (psycopg) connection down: its pending wait ends with an error."""
    raw = getattr(dbapi_conn, "dbapi_connection", dbapi_conn)  # a pool proxy, or the driver's
    if raw is None or getattr(raw, "closed", True):
        return
    try:
        fd = raw.fileno()
    except Exception:
        return
    with socket.socket(fileno=os.dup(fd)) as sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    log.warning("the database did not answer in time: connection closed")


def guarded(seconds: float, dbapi_conn: Any, call: Callable[[], Any]) -> Any:
    """`call()`, its connection broken if it has not returned within `seconds`."""
    token = WATCHDOG.arm(seconds, lambda: break_connection(dbapi_conn))
    try:
        return call()
    finally:
        WATCHDOG.disarm(token)


# a connection whose last statement was answered this recently is not pinged at checkout
FRESH_S = 1.0


def _driver_conn(dbapi_conn: Any) -> Any:
    return getattr(dbapi_conn, "dbapi_connection", dbapi_conn)


def install(engine: Any, *, statement_s: float | None, ping_s: float) -> None:
    """Arm every statement (`statement_s`, None: no deadline), commit and rollback
    (`statement_s`) and the pool's pre-ping (`ping_s`) of `engine` (a PostgreSQL engine).

    The pre-ping is skipped for a connection that answered a statement within `FRESH_S`: in a
    burst every transaction checks a connection out, and its ping was one round trip in four of
    a hook's reservation. What the ping is for (a server that restarted, a proxy that dropped
    an idle connection) shows on an idle connection; one that dies within the second fails its
    statement instead, the pool drops it, and the request gets a 503 it may retry."""
    import weakref

    from sqlalchemy import event

    dialect = engine.dialect
    ping, commit, rollback = dialect.do_ping, dialect.do_commit, dialect.do_rollback
    answered: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def do_ping(dbapi_conn: Any) -> bool:
        raw = _driver_conn(dbapi_conn)
        with contextlib.suppress(TypeError):  # not weak-referenceable: always pinged
            if time.monotonic() - answered.get(raw, -FRESH_S) < FRESH_S:
                return True
        return bool(guarded(ping_s, dbapi_conn, lambda: ping(dbapi_conn)))

    dialect.do_ping = do_ping

    @event.listens_for(engine, "after_cursor_execute")
    def _answered(conn: Any, _cursor: Any, _stmt: Any, _params: Any, _context: Any, _many: Any) -> None:
        with contextlib.suppress(TypeError):
            answered[conn.connection.dbapi_connection] = time.monotonic()

    if statement_s is None:
        return

    def do_commit(dbapi_conn: Any) -> None:
        guarded(statement_s, dbapi_conn, lambda: commit(dbapi_conn))

    def do_rollback(dbapi_conn: Any) -> None:
        guarded(statement_s, dbapi_conn, lambda: rollback(dbapi_conn))

    dialect.do_commit = do_commit
    dialect.do_rollback = do_rollback

    def _disarm(info: dict[str, Any]) -> None:
        token = info.pop(INFO_KEY, None)
        if token is not None:
            WATCHDOG.disarm(token)

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, _cursor: Any, _stmt: Any, _params: Any, _context: Any, _many: Any) -> None:
        _disarm(conn.info)
        raw = conn.connection.dbapi_connection
        conn.info[INFO_KEY] = WATCHDOG.arm(statement_s, lambda: break_connection(raw))

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, _cursor: Any, _stmt: Any, _params: Any, _context: Any, _many: Any) -> None:
        _disarm(conn.info)

    @event.listens_for(engine, "handle_error")
    def _error(ctx: Any) -> None:
        if ctx.connection is not None and not ctx.connection.closed:
            with contextlib.suppress(Exception):  # an invalidated connection has no info
                _disarm(ctx.connection.info)

    @event.listens_for(engine.pool, "checkin")
    def _checkin(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            _disarm(record.info)
