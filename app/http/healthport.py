"""The supervisor's liveness listener (`LOGTRIAGE_HEALTH_PORT`, `serve --health-port`).

Why a port of its own: in a burst of uploads the kernel queues new connections on the service
port behind the uploads' own (measured: 55-85 connections waiting ~0.6 s per worker's accept
queue), so a liveness probe sent there waits with them and a kubelet could restart the pods in
the middle of the incident the service is needed for. Here the supervisor, which does no request
work, answers `GET /healthz` on another port from a thread of its own.

What it answers is still the workers' liveness, not the supervisor's: each worker's event loop
stamps a shared clock (`Heartbeats`) every `BEAT_S`; a worker that is warm and has not stamped
for `LOGTRIAGE_HEALTH_STALL_S` (15 s) makes `/healthz` a 503 (its event loop is stuck:
restarting the pod is right).
A worker that is starting or being restarted by the supervisor does not count against it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctypes import Array, c_double
    from http.server import BaseHTTPRequestHandler

__all__ = ["BEAT_S", "STALL_S", "HealthServer", "Heartbeats", "WorkerState", "verdict"]

BEAT_S = 0.5  # a worker's loop stamps its slot this often
STALL_S = 15.0  # a warm worker silent this long is stuck (far above any GIL or GC pause seen)
HEAD_TIMEOUT_S = 5.0  # a probe connection that sends no request in this long is closed


class Heartbeats:
    """One monotonic timestamp per worker slot in shared memory (CLOCK_MONOTONIC is one clock for
    every process of the machine). The supervisor makes it; each worker writes its own slot."""

    def __init__(self, array: Array[c_double]) -> None:
        self.array = array

    def beat(self, slot: int) -> None:
        self.array[slot] = time.monotonic()  # one double: no lock needed for a single writer

    def age(self, slot: int, now: float) -> float | None:
        last = float(self.array[slot])
        return None if last == 0.0 else now - last


class WorkerState:
    """What the listener knows of one slot: whether its process lives and is warm, its loop's age."""

    __slots__ = ("age", "alive", "warm")

    def __init__(self, *, alive: bool, warm: bool, age: float | None) -> None:
        self.alive, self.warm, self.age = alive, warm, age


def verdict(workers: list[WorkerState], *, stall_s: float = STALL_S) -> tuple[int, dict[str, Any]]:
    """The status and body of `/healthz` for these workers."""
    stalled = [w for w in workers if w.alive and w.warm and (w.age is None or w.age > stall_s)]
    body: dict[str, Any] = {
        "workers": len(workers),
        "warm": sum(1 for w in workers if w.alive and w.warm),
        "stalled": len(stalled),
    }
    if stalled:
        worst = max((w.age or 0.0) for w in stalled)
        detail = f"{len(stalled)} worker event loop(s) silent for {worst:.1f} s (limit {stall_s:.0f} s)"
        return 503, {
            "type": "/problems/service-unavailable",
            "title": "Service unavailable",
            "status": 503,
            "detail": detail,
            **body,
        }
    return 200, {"status": "ok", **body}


class HealthServer:
    """`GET /healthz` (and `HEAD`) on its own socket, served by daemon threads."""

    def __init__(
        self, host: str, port: int, state: Callable[[], list[WorkerState]], *, stall_s: float = STALL_S
    ) -> None:
        from http.server import ThreadingHTTPServer  # only the supervisor needs it, not every import

        handler = _handler(state, stall_s)
        self._httpd = ThreadingHTTPServer((host, port), handler, bind_and_activate=False)
        self._httpd.daemon_threads = True
        self._httpd.allow_reuse_address = True
        self._thread: threading.Thread | None = None

    def bind(self) -> int:
        """Bind and listen; returns the port (the one asked, or the kernel's for 0)."""
        self._httpd.server_bind()
        self._httpd.server_activate()
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.5}, name="healthz", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()


def _handler(state: Callable[[], list[WorkerState]], stall_s: float) -> type[BaseHTTPRequestHandler]:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        timeout = HEAD_TIMEOUT_S
        protocol_version = "HTTP/1.1"
        server_version = "logtriage-health"
        sys_version = ""

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, *, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path not in ("/healthz", "/livez"):
                status, doc = (
                    404,
                    {
                        "type": "/problems/not-found",
                        "title": "Not found",
                        "status": 404,
                        "detail": "this port serves GET /healthz only; the service is on its main port",
                    },
                )
            else:
                status, doc = verdict(state(), stall_s=stall_s)
            data = json.dumps(doc).encode()
            self.send_response(status)
            ctype = "application/json" if status == 200 else "application/problem+json"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if body:
                self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a probe every few seconds is not news; the access log is the service port's

    return Handler
