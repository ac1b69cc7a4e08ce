"""The fast lane (`pytest -m "not slow"`) stays fast: what starts a real server or a browser must
be marked `slow`.

A test that starts the app under uvicorn (`LiveServer`), a `logtriage serve` process or Chromium
without the mark fails at that moment, whatever its fixtures are called: the check sits where
the thing starts (servicekit, the browser fixtures, an audit hook on subprocess.Popen), not in a
list of fixture names that a new module could get around. tests/conftest.py tells this module
which test is running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import pytest

_current: pytest.Item | None = None


def set_current(item: pytest.Item | None) -> None:
    global _current
    _current = item


def require_slow(what: str, item: Any = None) -> None:
    """Fail the running test (or `item`) when it is not marked slow; outside a test, nothing."""
    item = item if item is not None else _current
    if item is None or item.get_closest_marker("slow") is not None:
        return
    pytest.fail(
        f"{item.nodeid} starts {what} but is not marked slow: add @pytest.mark.slow (or the "
        "module's pytestmark) so the fast lane, pytest -m 'not slow', leaves it out",
        pytrace=False,
    )


def is_serve_command(args: str | bytes | Sequence[Any]) -> bool:
    """`python -m app.cli serve ...` or `logtriage serve ...` (one that exits at once on bad
    arguments counts too: the command decides, not how long it ran)."""
    if isinstance(args, str | bytes | os.PathLike):
        return False  # a shell line; the project's tests start the server with an argument list
    words = [os.fsdecode(a) if isinstance(a, bytes | os.PathLike) else str(a) for a in args]
    for i, word in enumerate(words):
        if word == "app.cli" or os.path.basename(word) == "logtriage":
            command = next((w for w in words[i + 1 :] if not w.startswith("-")), None)
            return command == "serve"
    return False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen" and _current is not None and is_serve_command(args[1]):
        require_slow("a `logtriage serve` process")


def install_audit_hook() -> None:
    # audit hooks cannot be removed; this one does nothing outside a running test
    sys.addaudithook(_audit)
