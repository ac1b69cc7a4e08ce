"""/healthz (the process answers) and /readyz (database, schema, blob store, scan workers).

/healthz touches nothing. /readyz answers within `READY_DEADLINE_S` whatever hangs: each
dependency is checked in its own thread, at most one check of each at a time, and a check that
has not answered by the deadline is reported as not answering (503) while it goes on; the next
/readyz waits for that same check instead of starting another, so a hung dependency holds one
thread, never a request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.errors import LogtriageError
from app.http.deps import CtxDep
from app.http.errors import PROBLEM_JSON, problem_body
from app.service import readiness

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    checks: dict[str, Any] = {}


MIN_FREE_BYTES = 64 << 20  # less than this free on the data directory's disk: not ready
READY_DEADLINE_S = 0.8  # /readyz answers within this (plus its own few ms)


class Probe:
    """Runs `check` in a thread of its own, one run at a time."""

    def __init__(self, name: str, check: Callable[[], Any]) -> None:
        self.name = name
        self.check = check
        self._lock = threading.Lock()
        self._run: concurrent.futures.Future[Any] | None = None
        self._started = 0.0

    def _start(self) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._run is None or self._run.done():
                fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

                def work() -> None:
                    try:
                        fut.set_result(self.check())
                    except BaseException as exc:
                        fut.set_exception(exc)

                self._run, self._started = fut, time.monotonic()
                threading.Thread(target=work, name=f"readyz-{self.name}", daemon=True).start()
            return self._run

    async def result(self, timeout: float) -> Any:
        """The check's result; raises its exception, or TimeoutError (with how long it has run)."""
        waiting = asyncio.wrap_future(self._start())
        # a check that ends after its /readyz answered is not waited for: its error is not news
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), timeout)
        except TimeoutError:
            waited = time.monotonic() - self._started
            raise TimeoutError(f"not answering (checked for {waited:.1f} s)") from None


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> dict[str, Any]:
    # async and touching nothing: no thread, no database, whatever is hung
    return {"status": "ok", "checks": {}}


def _probes(request: Request, ctx: Any) -> dict[str, Probe]:
    """The probes of this app's context (built on the first /readyz)."""
    held: tuple[Any, dict[str, Probe]] | None = getattr(request.app.state, "ready_probes", None)
    if held is not None and held[0] is ctx:
        return held[1]
    probes = {
        "database": Probe("database", lambda: readiness.database_schema(ctx)),
        "disk": Probe("disk", lambda: readiness.disk_free(ctx)),
        "blob_store": Probe("blob_store", lambda: readiness.blob_store_writable(ctx)),
    }
    request.app.state.ready_probes = (ctx, probes)
    return probes


@router.get(
    "/readyz", response_model=Health, summary="Readiness", responses={503: {"description": "Not ready"}}
)
async def readyz(request: Request, ctx: CtxDep) -> JSONResponse:
    checks: dict[str, Any] = {}
    problems: list[str] = []
    probes = _probes(request, ctx)
    db, disk, store = await asyncio.gather(
        *(p.result(READY_DEADLINE_S) for p in probes.values()), return_exceptions=True
    )
    if isinstance(db, BaseException):
        checks["database"] = f"{db}" if isinstance(db, TimeoutError) else f"error: {type(db).__name__}"
        problems.append("database not answering" if isinstance(db, TimeoutError) else "database unreachable")
    else:
        current, head = db
        checks["database"] = "ok"
        checks["schema"] = current
        if current != head:
            problems.append(f"database schema at {current}, code expects {head}: run `logtriage db upgrade`")
    if isinstance(disk, TimeoutError):
        checks["disk_free_mib"] = f"{disk}"
        problems.append("the data directory's disk is not answering")
    elif isinstance(disk, OSError):
        checks["disk_free_mib"] = f"error: {disk.strerror}"
    elif isinstance(disk, int):
        checks["disk_free_mib"] = disk >> 20
        if disk < MIN_FREE_BYTES:
            # uploads would fail with 507: take this server out of the balancer until space is freed
            problems.append(f"the data directory's disk is full ({disk >> 20} MiB free)")
    if isinstance(store, TimeoutError):
        checks["blob_store"] = f"{store}"
        problems.append("blob store not answering")
    elif isinstance(store, OSError):
        checks["blob_store"] = f"error: {store.strerror}"
        problems.append("data directory not writable")
    elif isinstance(store, LogtriageError):
        checks["blob_store"] = f"error: {store.detail}"
        problems.append("blob store unreachable")
    elif isinstance(store, BaseException):
        checks["blob_store"] = f"error: {type(store).__name__}"
        problems.append("blob store unreachable")
    else:
        checks["blob_store"] = "ok"
    checks["scan_workers"] = "ok" if ctx.pool.ready.is_set() else "failed" if ctx.pool.failure else "starting"
    if ctx.pool.failure:
        problems.append(f"scan workers failed to start: {ctx.pool.failure}")
    elif not ctx.pool.ready.is_set():
        problems.append("scan workers are still starting (compiling the rule library)")
    checks["library_version"] = ctx.library.version
    if problems:
        body = problem_body(
            status=503,
            slug="service-unavailable",
            title="Service unavailable",
            detail="; ".join(problems),
            instance=request.url.path,
            extra={"checks": checks},
        )
        return JSONResponse(body, status_code=503, media_type=PROBLEM_JSON)
    return JSONResponse({"status": "ready", "checks": checks})
