"""Several server processes on one port, balanced by the kernel (SO_REUSEPORT).

uvicorn's own `--workers` shares one listening socket between processes; asyncio accepts
connections in batches, so under load the first process to wake takes most of them and the
others idle (measured: one of two workers served ~all requests of a 50-connection load). Here
each worker binds its own socket with SO_REUSEPORT and the kernel spreads new connections by
hash. The supervisor forwards SIGINT/SIGTERM and restarts a worker that dies, giving up when a
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
from multiprocessing.process import BaseProcess
from types import FrameType

from app.errors import ServiceUnavailableError

RESTART_WINDOW = 10.0  # a worker that dies sooner than this after starting counts as a crash loop
MAX_QUICK_DEATHS = 3


def _bind(host: str, port: int) -> socket.socket:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _watch_parent(parent: int) -> None:
    """Exit gracefully when the supervisor is gone (even SIGKILLed): no orphan keeps the port."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)


def _worker(host: str, port: int, log_level: str, parent: int) -> None:
    import uvicorn

    from app.api.protocol import uvicorn_http

    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    sock = _bind(host, port)
    sock.listen(2048)
    config = uvicorn.Config(
        "app.api.main:create_app",
        factory=True,
        log_level=log_level,
        proxy_headers=True,
        timeout_graceful_shutdown=30,
        http=uvicorn_http(),  # request heads bounded: 431, not unbounded memory
    )
    uvicorn.Server(config).run(sockets=[sock])


def serve_reuseport(*, host: str, port: int, workers: int, log_level: str) -> int:
    # Any same-user SO_REUSEPORT socket may join a port: probe with a plain bind first, which
    # conflicts with every listener there (another logtriage included), so a second server fails.
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as exc:
        raise ServiceUnavailableError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    finally:
        probe.close()
    ctx = multiprocessing.get_context("spawn")
    stop = threading.Event()

    def start() -> tuple[BaseProcess, float]:
        p = ctx.Process(target=_worker, args=(host, port, log_level, os.getpid()), name="logtriage-worker")
        p.start()
        return p, time.monotonic()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    procs = [start() for _ in range(workers)]
    quick_deaths = 0
    try:
        while not stop.wait(0.5):
            for i, (p, started) in enumerate(procs):
                if p.is_alive():
                    continue
                quick_deaths = quick_deaths + 1 if time.monotonic() - started < RESTART_WINDOW else 0
                if quick_deaths >= MAX_QUICK_DEATHS:
                    print("logtriage: server workers keep dying at start; stopping", file=sys.stderr)
                    stop.set()
                    break
                print(f"logtriage: worker {p.pid} exited ({p.exitcode}); restarting it", file=sys.stderr)
                procs[i] = start()
    finally:
        for p, _ in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: uvicorn finishes in-flight requests, then exits
        for p, _ in procs:
            p.join(35)
            if p.is_alive():
                p.kill()
    return 0 if quick_deaths < MAX_QUICK_DEATHS else 3
