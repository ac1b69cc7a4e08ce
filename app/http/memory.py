"""Give freed memory back to the system after a burst.

A burst of uploads leaves a web worker ~25 MiB bigger for good: the C allocator keeps the
pages that request bodies, results and rendered pages freed, in case they are needed again
(measured with `bench/loss_bench.py`: 108 MiB idle, 131-134 after 200 x 1 MB hooks, the same
30 s later). glibc's `malloc_trim(0)` returns them; it costs about a millisecond, so a worker
calls it every `TRIM_EVERY_S` seconds (an idle worker has nothing to return and it costs
less). Elsewhere (musl, macOS) there is nothing to call and the task does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable

TRIM_EVERY_S = 10.0


def _malloc_trim() -> Callable[[], object] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


class Trimmer:
    def __init__(self) -> None:
        self.trims = 0
        self._trim = _malloc_trim()

    def trim_now(self) -> bool:
        if self._trim is None:
            return False
        gc.collect()  # cycles from the burst first (the start-up heap is frozen: not walked)
        self._trim()
        self.trims += 1
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TRIM_EVERY_S)
            await asyncio.to_thread(self.trim_now)  # it takes the allocator's lock: not on the loop
