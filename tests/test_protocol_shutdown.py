"""A graceful shutdown serves the request of a connection accepted just before it.

A retiring worker (`serve --workers`, recycling) shuts down while clients keep connecting; a
connection the kernel handed to it just before may not have sent its request yet. Stock uvicorn
closes it ("server disconnected without sending a response"); the project's protocol serves that
one request and then closes (app/http/protocol.py).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.http.protocol import BoundedHttpToolsProtocol
from tests.servicekit import free_port

REQUEST = b"GET /ping HTTP/1.1\r\nHost: test\r\n\r\n"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"pong"})


def _until(cond: Any, what: str, limit_s: float = 60.0) -> None:
    # a bound against a hang, not a timing assumption: the condition is what is waited for
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.01)


@contextlib.contextmanager
def _server(protocol: type) -> Iterator[tuple[uvicorn.Server, int]]:
    port = free_port()
    config = uvicorn.Config(_app, host="127.0.0.1", port=port, http=protocol, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _until(lambda: server.started, "server start")
        yield server, port
    finally:
        server.should_exit = True
        thread.join(60)
        assert not thread.is_alive()


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def _request_after_shutdown_began(protocol: type) -> bytes:
    with _server(protocol) as (server, port):
        conn = socket.create_connection(("127.0.0.1", port), timeout=30)
        try:
            _until(lambda: len(server.server_state.connections) == 1, "connection accepted")
            server.should_exit = True
            _until(lambda: _refused(port), "listener closed")
            try:
                conn.sendall(REQUEST)
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
            except ConnectionError:
                return b""
            return b"".join(chunks)
        finally:
            conn.close()


def test_a_connection_accepted_before_shutdown_gets_its_answer() -> None:
    reply = _request_after_shutdown_began(BoundedHttpToolsProtocol)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert b"\r\npong\r\n" in reply
    assert b"connection: close" in reply.lower()


def test_stock_uvicorn_drops_it_which_is_what_this_guards_against() -> None:
    # the scenario above reproduces the race: uvicorn's own protocol closes the connection
    assert _request_after_shutdown_began(HttpToolsProtocol) == b""
