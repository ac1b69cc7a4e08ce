"""Where an upload is analysed: the pool and bulk lanes (`ScanPool`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from app.errors import (
    ServiceUnavailableError,
)
from app.service.jobs import JobError, ScanJob, ScanOutcome, SiteRules
from app.service.worker import (
    init_worker,
    ping,
    scan_upload,
    worker_settings_payload,
)
from app.settings import Settings

log = logging.getLogger("logtriage.service")

T = TypeVar("T")
R = TypeVar("R")


# --- server side --------------------------------------------------------------------------------


# CFS shares a contended core by weight: nice 0 weighs 1024, nice 15 36, nice 19 15
BULK_NICE = 19  # below the pool: a multi-GB log takes only what the hooks' analyses leave


def _lower_priority(payload: dict[str, Any]) -> None:
    """Bulk-lane initializer: a low CPU priority, inherited by the redact/scan processes it forks."""
    os.nice(BULK_NICE)
    init_worker(payload)


# far below the web processes: in a burst the answers (202s, polls, probes) come first and the
# analyses take the cores the web processes leave; 5 left them a quarter of each core (burst
# POST p99 2.4-2.6 s), 10-19 all ~1.1-1.8 s (bench/README.md "Scan workers' priority")
POOL_NICE = 15


def _pool_priority(payload: dict[str, Any]) -> None:
    """Pool-lane initializer: the analyses yield the cores to the server process's event loop
    (answers, health probes) when both want them; on an idle machine nothing changes."""
    with contextlib.suppress(OSError):
        os.nice(POOL_NICE)
    init_worker(payload)


class ScanPool:
    """Where an upload is analysed: scan worker processes, never the server's event loop.

    - pool: scan worker processes (spawned: no state is shared with the server's threads) at a
      slightly lower CPU priority than the server. Even a hook's 200 KB log goes there: an
      analysis held the event loop 2 ms for such a log, but up to a third of a second for 1 MB
      of metric lines, and a burst of them held every answer and health probe behind it.
    - bulk: uploads of `settings.bulk_bytes` or more go to one extra worker at low CPU priority;
      a multi-GB log can take both cores for tens of seconds, and it then uses the cores the
      small analyses leave idle, so they keep their latency.

    How many analyses wait for these processes, and in which order, is `Admission`'s business.
    """

    def __init__(self, settings: Settings, *, workers: int | None = None) -> None:
        self.settings = settings
        self.workers = workers or settings.analysis_workers
        self._pool: ProcessPoolExecutor | None = None
        self._bulk: ProcessPoolExecutor | None = None
        self.ready = asyncio.Event()
        self.library_version: str | None = None
        self.failure: str | None = None
        # where the site rule pack of the moment comes from (app.service.sitepack), set by the app
        self.site: Any = None

    def _ensure(self, bulk: bool) -> ProcessPoolExecutor:
        pool = self._bulk if bulk else self._pool
        if pool is None:
            pool = ProcessPoolExecutor(
                max_workers=1 if bulk else self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_lower_priority if bulk else _pool_priority,
                initargs=(worker_settings_payload(self.settings),),
            )
            if bulk:
                self._bulk = pool
            else:
                self._pool = pool
        return pool

    def is_bulk(self, job: ScanJob) -> bool:
        limit = self.settings.bulk_bytes
        if limit > 0 and any(f.growing and f.expected is None for f in job.files):
            return True  # still arriving, of a length nobody said: it may well be big
        return limit > 0 and sum(f.size for f in job.files) >= limit

    async def site_rules(self) -> SiteRules | None:
        """The site rule pack every job carries now (None: none, or no source)."""
        return await self.site.get() if self.site is not None else None

    async def scan(self, job: ScanJob) -> ScanOutcome | JobError:
        """Analyse an upload in its lane, with the site rule pack of the moment."""
        site = await self.site_rules()
        if site is not None:
            job = dataclasses.replace(job, site=site)
        return await self.call(scan_upload, job, bulk=self.is_bulk(job))

    async def call(self, fn: Callable[[T], R], arg: T, *, bulk: bool = False) -> R:
        pool = self._ensure(bulk)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, fn, arg)
        except BrokenProcessPool as exc:
            if self._pool is pool:
                self._pool = None
            if self._bulk is pool:
                self._bulk = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise ServiceUnavailableError(
                f"a scan worker process died ({exc}); retry the request (see the server log if it persists)"
            ) from None

    async def warmup(self) -> None:
        try:
            versions = await asyncio.gather(*(self.call(ping, None) for _ in range(self.workers)))
            self.library_version = versions[0]
            self.failure = None
            self.ready.set()
        except Exception as exc:  # readiness stays false; /readyz says why
            self.failure = getattr(exc, "detail", None) or f"{type(exc).__name__}: {exc}"
            log.error("scan workers failed to start: %s", self.failure)

    def shutdown(self) -> None:
        for pool in (self._pool, self._bulk):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._pool = self._bulk = None
