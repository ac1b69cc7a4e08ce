"""Several server processes on one port, balanced by the kernel (SO_REUSEPORT), recycled when
they grow.

uvicorn's own `--workers` shares one listening socket between processes; asyncio accepts
connections in batches, so under load the first process to wake takes most of them and the
others idle (measured: one of two workers served ~all requests of a 50-connection load). Here
each worker *slot* has its own socket with SO_REUSEPORT and the kernel spreads new connections by
hash.

Invariants:
- the supervisor binds and holds every slot's listening socket for its whole life and hands it
  to the slot's worker. A worker that exits (crash, restart, recycling) closes only its copy:
  connections waiting in the slot's accept queue stay there for the next worker instead of being
  reset, which closing the last copy of a SO_REUSEPORT listener would do;
- recycling starts the replacement on the same socket first and retires the old worker only
  once the new one is warm; the old one then stops accepting, finishes its requests and its
  analyses (no short deadline) and exits. At most one slot is recycled at a time;
- a worker is recycled when its RSS stays above its warm size by more than
  `worker_recycle_growth` for `worker_recycle_after_s`: what a burst leaves behind that the
  allocator trim (app.http.memory) cannot give back;
- the supervisor forwards SIGINT/SIGTERM, restarts a worker that dies, and gives up when a
  worker keeps dying at start.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING

from app.errors import ServiceUnavailableError
from app.http.healthport import STALL_S, HealthServer, Heartbeats, WorkerState

if TYPE_CHECKING:
    from ctypes import Array, c_double
    from multiprocessing.synchronize import Event

RESTART_WINDOW = 10.0  # a worker that dies sooner than this after starting counts as a crash loop
MAX_QUICK_DEATHS = 3
RETIRE_SIGNAL = signal.SIGUSR1
RETIRE_GRACE_S = 900  # a retiring worker's in-flight requests (a 1 GB upload) get this long
STOP_GRACE_S = 30  # on SIGTERM to the server
WARM_TIMEOUT_S = 300  # a replacement that is not warm by then is dropped, the old one kept

_warm: Event | None = None  # set in a worker process by the supervisor
_beats: tuple[Heartbeats, int] | None = None  # this worker's heartbeat slot, when supervised


_retiring = False  # set when the supervisor retires this worker (SIGUSR1)


def drain_seconds(default: float) -> float:
    """How long the app lets its admitted analyses finish at shutdown: all of the retire grace
    when it is being recycled (every upload it answered 202 is still its to finish; cancelled,
    they would fail as interrupted), `default` on an ordinary stop."""
    return float(RETIRE_GRACE_S) if _retiring else default


def supervised() -> bool:
    """Whether this process is a worker of `serve_reuseport` (its loop should `beat`)."""
    return _beats is not None


def beat() -> None:
    """Stamp this worker's heartbeat: its event loop is turning (`app.http.healthport`)."""
    if _beats is not None:
        _beats[0].beat(_beats[1])


def notify_warm() -> None:
    """Called by the app once its start-up work is done (templates, scan pool, heap frozen)."""
    if _warm is not None:
        _warm.set()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def _watch_parent(parent: int) -> None:
    """Exit gracefully when the supervisor is gone (even SIGKILLed): no orphan keeps the port."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)


def _worker(
    sock: socket.socket, log_level: str, parent: int, warm: Event, beats: Array[c_double], slot: int
) -> None:
    import uvicorn

    from app.http.protocol import uvicorn_http
    from app.settings import get_settings

    global _warm, _beats
    _warm = warm
    _beats = (Heartbeats(beats), slot)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    config = uvicorn.Config(
        "app.asgi:create_app",
        factory=True,
        log_level=log_level,
        proxy_headers=True,
        timeout_graceful_shutdown=STOP_GRACE_S,
        # request heads bounded (431), head timeout (408), connections capped: per process
        http=uvicorn_http(get_settings()),
    )
    server = uvicorn.Server(config)

    def retire(_signum: int, _frame: FrameType | None) -> None:
        global _retiring
        _retiring = True
        server.config.timeout_graceful_shutdown = RETIRE_GRACE_S
        server.should_exit = True

    signal.signal(RETIRE_SIGNAL, retire)
    server.run(sockets=[sock])


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _Slot:
    sock: socket.socket
    proc: BaseProcess
    warm: Event
    started: float
    index: int = 0  # its heartbeat's place
    floor: int | None = None  # smallest RSS seen since warm: the size it should come back to
    above_since: float | None = None
    retiring: list[BaseProcess] = field(default_factory=list)
    next: tuple[BaseProcess, Event, float] | None = None  # the replacement, until it is warm


def serve_reuseport(
    *,
    host: str,
    port: int,
    workers: int,
    log_level: str,
    recycle_growth: float = 0.0,
    recycle_after_s: float = 60.0,
    health_port: int | None = None,
    health_stall_s: float = STALL_S,
    on_health_port: Callable[[int], None] | None = None,
) -> int:
    # Any same-user SO_REUSEPORT socket may join a port: probe with a plain bind first, which
    # conflicts with every listener there (another logtriage included), so a second server fails.
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        if port == 0:
            port = probe.getsockname()[1]
    except OSError as exc:
        raise ServiceUnavailableError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    finally:
        probe.close()
    ctx = multiprocessing.get_context("spawn")
    stop = threading.Event()
    poll_s = min(0.5, recycle_after_s / 4)
    beats = ctx.RawArray("d", workers)
    slots: list[_Slot] = []
    health: HealthServer | None = None
    if health_port is not None:
        stamps = Heartbeats(beats)
        health = HealthServer(host, health_port, lambda: _states(slots, stamps), stall_s=health_stall_s)
        try:
            bound = health.bind()
        except OSError as exc:
            health.close()
            raise ServiceUnavailableError(f"cannot bind {host}:{health_port}: {exc.strerror}") from None
        if on_health_port is not None:
            on_health_port(bound)

    def start(sock: socket.socket, index: int) -> tuple[BaseProcess, Event, float]:
        warm = ctx.Event()
        p = ctx.Process(
            target=_worker, args=(sock, log_level, os.getpid(), warm, beats, index), name="logtriage-worker"
        )
        p.start()
        return p, warm, time.monotonic()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    for i in range(workers):
        sock = _bind(host, port)
        slots.append(_Slot(sock, *start(sock, i), index=i))
    if health is not None:
        health.start()
    quick_deaths = 0
    try:
        while not stop.wait(poll_s):
            for slot in slots:
                slot.retiring = [p for p in slot.retiring if p.is_alive()]
                if slot.next is not None and _replace(slot):
                    continue
                if not slot.proc.is_alive():
                    if time.monotonic() - slot.started < RESTART_WINDOW:
                        quick_deaths += 1
                    else:
                        quick_deaths = 0
                    if quick_deaths >= MAX_QUICK_DEATHS:
                        print("logtriage: server workers keep dying at start; stopping", file=sys.stderr)
                        stop.set()
                        break
                    print(
                        f"logtriage: worker {slot.proc.pid} exited ({slot.proc.exitcode}); restarting it",
                        file=sys.stderr,
                    )
                    slot.proc, slot.warm, slot.started = start(slot.sock, slot.index)
                    slot.floor = slot.above_since = None
                    continue
                busy = any(s.next is not None or s.retiring for s in slots)
                if recycle_growth > 0 and not busy and _grown(slot, recycle_growth, recycle_after_s):
                    rss = rss_bytes(slot.proc.pid or 0) or 0
                    print(
                        f"logtriage: worker {slot.proc.pid} stays at {rss >> 20} MiB, above its warm "
                        f"{(slot.floor or 0) >> 20} MiB; replacing it",
                        file=sys.stderr,
                    )
                    slot.next = start(slot.sock, slot.index)
    finally:
        if health is not None:
            health.close()
        procs = [p for s in slots for p in (s.proc, *s.retiring, *([s.next[0]] if s.next else []))]
        for p in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: uvicorn finishes in-flight requests, then exits
        for p in procs:
            p.join(STOP_GRACE_S + 5)
            if p.is_alive():
                p.kill()
        for s in slots:
            s.sock.close()
    return 0 if quick_deaths < MAX_QUICK_DEATHS else 3


def _states(slots: list[_Slot], beats: Heartbeats) -> list[WorkerState]:
    now = time.monotonic()
    return [
        WorkerState(alive=s.proc.is_alive(), warm=s.warm.is_set(), age=beats.age(s.index, now))
        for s in list(slots)
    ]


def _grown(slot: _Slot, growth: float, after_s: float) -> bool:
    if not slot.warm.is_set() or slot.proc.pid is None:
        return False
    rss = rss_bytes(slot.proc.pid)
    if rss is None:
        return False
    now = time.monotonic()
    if slot.floor is None or rss < slot.floor:
        slot.floor = rss
    if rss <= slot.floor * (1 + growth):
        slot.above_since = None
        return False
    if slot.above_since is None:
        slot.above_since = now
    return now - slot.above_since >= after_s


def _replace(slot: _Slot) -> bool:
    """Advance a recycling: once the replacement is warm it takes the slot and the old worker
    retires. True while the slot is busy with it."""
    assert slot.next is not None
    new, warm, started = slot.next
    if not new.is_alive() or time.monotonic() - started > WARM_TIMEOUT_S:
        print("logtriage: the replacement worker did not start; keeping the old one", file=sys.stderr)
        if new.is_alive():
            new.kill()
        slot.next = None
        slot.above_since = None
        return False
    if not warm.is_set():
        return True
    old = slot.proc
    slot.proc, slot.warm, slot.started = new, warm, started
    slot.next, slot.floor, slot.above_since = None, None, None
    if old.is_alive() and old.pid is not None:
        os.kill(old.pid, RETIRE_SIGNAL)
        slot.retiring.append(old)
    return True
