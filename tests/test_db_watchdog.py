"""The database deadline watchdog (app/db/deadline.py): it wakes only for a deadline earlier than
the one it sleeps until, so each case below checks that no deadline is missed that way."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from app.db.deadline import Watchdog

WAIT = 30  # seconds a fired action may take to show up on a loaded machine (waits end sooner)


def _event_action() -> tuple[threading.Event, Callable[[], None]]:
    ev = threading.Event()
    return ev, ev.set


def test_an_earlier_deadline_armed_after_a_later_one_fires() -> None:
    dog = Watchdog()
    late, late_set = _event_action()
    early, early_set = _event_action()
    late_token = dog.arm(3600, late_set)
    dog.arm(0.01, early_set)
    assert early.wait(WAIT)
    assert not late.is_set()
    assert dog.disarm(late_token)


def test_a_deadline_behind_many_disarmed_ones_fires_and_disarmed_ones_never_do() -> None:
    dog = Watchdog()
    fired: list[int] = []
    tokens = [dog.arm(0.001 * i, functools.partial(fired.append, i)) for i in range(1, 200)]
    disarmed = [t for t in tokens if dog.disarm(t)]
    last, last_set = _event_action()
    dog.arm(0.05, last_set)
    assert last.wait(WAIT)
    # what was disarmed in time never ran; the rest ran once each
    assert len(disarmed) + len(fired) == len(tokens)
    assert len(set(fired)) == len(fired)


def test_the_same_timeout_armed_in_sequence_fires_in_order() -> None:
    dog = Watchdog()
    order: list[int] = []
    done = threading.Event()

    def action(i: int) -> None:
        order.append(i)
        if i == 4:
            done.set()

    for i in range(5):
        dog.arm(0.02 + 0.001 * i, functools.partial(action, i))
    assert done.wait(WAIT)
    assert order == [0, 1, 2, 3, 4]


@pytest.mark.postgres
def test_a_connection_that_just_answered_is_not_pinged_and_an_idle_one_is(
    pg_schemas: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's pre-ping (app.db.deadline.install): skipped within FRESH_S of the connection's
    last answered statement, made when it has been idle longer."""
    import sqlalchemy as sa

    from app.db import deadline

    engine = sa.create_engine(pg_schemas.new(), pool_pre_ping=True, pool_size=1, max_overflow=0)
    pings: list[object] = []
    real = engine.dialect.do_ping

    def counting(dbapi_conn: Any) -> bool:
        pings.append(dbapi_conn)
        return bool(real(dbapi_conn))

    engine.dialect.do_ping = counting  # type: ignore[method-assign]
    deadline.install(engine, statement_s=None, ping_s=5.0)
    # "recently" as long as a loaded machine may take between two checkouts
    monkeypatch.setattr(deadline, "FRESH_S", 3600.0)
    try:
        with engine.connect() as c:  # a new connection: nothing to ping
            assert c.scalar(sa.text("SELECT 1")) == 1
        with engine.connect() as c:  # answered a moment ago
            assert c.scalar(sa.text("SELECT 2")) == 2
        assert pings == []
        monkeypatch.setattr(deadline, "FRESH_S", 0.0)  # every answer is now too old
        with engine.connect() as c:
            assert c.scalar(sa.text("SELECT 3")) == 3
        assert len(pings) == 1
    finally:
        engine.dispose()
