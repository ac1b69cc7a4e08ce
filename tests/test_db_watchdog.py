"""The database deadline watchdog (app/db/deadline.py): it wakes only for a deadline earlier than
the one it sleeps until, so each case below checks that no deadline is missed that way."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

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
