"""The web worker gives freed memory back to the system (app.http.memory); the figures are in
bench/loss_bench.py's report."""

from __future__ import annotations

import asyncio
import sys

import pytest

from app.http import memory
from tests.conftest import run_async


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_the_trimmer_calls_malloc_trim_on_its_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    t = memory.Trimmer()
    assert t.trim_now() and t.trims == 1
    monkeypatch.setattr(memory, "TRIM_EVERY_S", 0.01)

    async def until_trimmed() -> None:
        task = asyncio.create_task(t.run())
        try:
            while t.trims < 3:  # a condition, not a sleep: it has run twice more on its own
                await asyncio.sleep(0.01)
        finally:
            task.cancel()

    run_async(asyncio.wait_for(until_trimmed(), timeout=60))
    assert t.trims >= 3
