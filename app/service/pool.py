"""Where an upload is analysed: the inline, pool and bulk lanes (`ScanPool`)."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from app.engine.ingest import (
    GZIP_MAGIC,
    ZSTD_MAGIC,
    expand_in_memory,
)
from app.engine.library import Library
from app.errors import (
    ServiceUnavailableError,
)
from app.service.jobs import InputFile, JobError, ScanJob, ScanOutcome
from app.service.worker import (
    WorkerState,
    init_worker,
    local_state,
    ping,
    scan_upload,
    worker_settings_payload,
)
from app.settings import Settings

log = logging.getLogger("logtriage.service")

T = TypeVar("T")
R = TypeVar("R")


# --- server side --------------------------------------------------------------------------------


BULK_NICE = 10  # CFS gives a nice-10 process about a tenth of a core when the core is contended


def _lower_priority(payload: dict[str, Any]) -> None:
    """Bulk-lane initializer: a low CPU priority, inherited by the redact/scan processes it forks."""
    os.nice(BULK_NICE)
    init_worker(payload)


class ScanPool:
    """Where an upload is analysed: three lanes, chosen by its size.

    - inline: a hook's small log (held in memory, at most `settings.inline_bytes` once
      expanded) is analysed in this process, on the event loop. Handing 200 KB to a process and
      back cost more CPU than analysing it (~2 ms): pickling, the pool's threads, a context
      switch each way. The loop is held ~10 ms by 1 MiB of ordinary log, up to ~0.2 s by 1 MiB
      made entirely of error lines.
    - pool: scan worker processes (spawned: no state is shared with the server's threads), for
      bigger uploads (or ones that expand past the limit), which must not hold the event loop.
    - bulk: uploads of `settings.bulk_bytes` or more go to one extra worker at low CPU priority;
      a multi-GB log can take both cores for tens of seconds, and it then uses the cores the
      small analyses leave idle, so they keep their latency.
    """

    def __init__(
        self, settings: Settings, *, workers: int | None = None, library: Library | None = None
    ) -> None:
        self.settings = settings
        self.workers = workers or settings.analysis_workers
        self._library = library  # the server's, loaded already: the inline lane compiles it
        self._pool: ProcessPoolExecutor | None = None
        self._bulk: ProcessPoolExecutor | None = None
        self._local: WorkerState | None = None
        self.ready = asyncio.Event()
        self.library_version: str | None = None
        self.failure: str | None = None

    def _ensure(self, bulk: bool) -> ProcessPoolExecutor:
        pool = self._bulk if bulk else self._pool
        if pool is None:
            pool = ProcessPoolExecutor(
                max_workers=1 if bulk else self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_lower_priority if bulk else init_worker,
                initargs=(worker_settings_payload(self.settings),),
            )
            if bulk:
                self._bulk = pool
            else:
                self._pool = pool
        return pool

    def is_bulk(self, job: ScanJob) -> bool:
        limit = self.settings.bulk_bytes
        return limit > 0 and sum(f.size for f in job.files) >= limit

    def inline_job(self, job: ScanJob) -> ScanJob | None:
        """The job as plain logs in memory if it is small enough to analyse on the event loop
        (`inline_bytes` in all, once decompressed), else None.

        A hook's log usually arrives gzipped (`logtriage submit` does): one held in memory is
        expanded here, with the ingest code the workers use, but never past the limit, since
        what it expands to is not bounded by its size. Corrupt data is left to a worker, which
        reports it as it always does."""
        if self._local is None or (job.config is not None and job.config.data is None):
            return None
        left = self.settings.inline_bytes - (job.config.size if job.config else 0)
        files: list[InputFile] = []
        for f in job.files:
            if f.data is None or left < 0:
                return None
            plain = expand_in_memory(f.data, limit=left)
            if plain is None or (plain is not f.data and plain.startswith((GZIP_MAGIC, ZSTD_MAGIC))):
                return None  # compressed twice: a scan worker reads it once, and refuses it
            left -= len(plain)
            files.append(f if plain is f.data else InputFile(f.name, f.path, data=plain))
        return ScanJob(tuple(files), job.config, job.framework, job.exit_code)

    async def scan(self, job: ScanJob) -> ScanOutcome | JobError:
        """Analyse an upload in its lane."""
        inline = self.inline_job(job)
        if inline is not None:
            return scan_upload(inline, self._local)
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
            if self.settings.inline_bytes > 0 and self._local is None:
                # the workers compiled the library first: this process reads it from their cache
                self._local = await asyncio.to_thread(local_state, self.settings, library=self._library)
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
