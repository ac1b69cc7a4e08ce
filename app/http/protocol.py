"""uvicorn's httptools protocol with a bound on the request head.

httptools (llhttp) sets no limit on headers: a client could send megabytes of header lines,
all held in memory and then handed to the app. Here the head (request line and headers) may
take at most `MAX_HEADER_BYTES` and `MAX_HEADERS` fields; past either, the connection gets a
clean `431` problem+json and is closed (not reset), before anything reaches the app. Malformed
requests keep uvicorn's own `400`. `app.http.inputcheck` checks the same sizes in the app, for a
server started without this class.

Slow and hostile clients (issue 20):

- a connection must send its whole request head within `LOGTRIAGE_HEADER_TIMEOUT` seconds,
  counted from the connection (first request) or from the first byte of a later one (an idle
  kept-alive connection is closed by uvicorn's keep-alive timeout first). Past it: closed, with a
  408 problem if part of a head came. One `loop.call_later` per connection, cancelled when the
  head is complete: a slowloris horde is cut after that many seconds, whatever it trickles;
- at most `LOGTRIAGE_MAX_CONNECTIONS_PER_CLIENT` open connections per client address and
  `LOGTRIAGE_MAX_CONNECTIONS` in all, per server process: one more is answered at once, before
  its request is read (429 or 503, problem+json, `Retry-After`) and closed. The counts are the
  process's own: under `serve --workers N` the kernel spreads one client's connections over the
  N processes by hash (SO_REUSEPORT), so a client may hold up to N times the limit. uvicorn's
  `limit_concurrency` is not used: it answers 503 only once a head is complete, so connections
  that never finish one were never refused.

Used by `logtriage serve` (`uvicorn_http(settings)`), its `--workers` processes and the tests'
servers.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from app.errors import (
    HeaderFieldsTooLargeError,
    LogtriageError,
    RequestTimeoutError,
    ServiceUnavailableError,
    TooManyConnectionsError,
)
from app.http.inputcheck import MAX_HEADER_BYTES, MAX_HEADERS

if TYPE_CHECKING:
    from app.settings import Settings

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is a dependency; without it uvicorn falls back to h11
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


LINGER_SECONDS = 2.0
LINGER_BYTES = 8 << 20
# a connection accepted just before a graceful shutdown gets this long to send its first request
FIRST_REQUEST_GRACE_S = 5.0


REFUSE_LINGER_SECONDS = 1.0  # a refused connection: long enough for its request to be read and dropped
RETRY_AFTER_BUSY_S = 5


class _HeadTooLarge(Exception):
    pass


@dataclass(frozen=True)
class ConnLimits:
    header_timeout: float = 10.0  # LOGTRIAGE_HEADER_TIMEOUT (0 = none)
    per_client: int = 64  # LOGTRIAGE_MAX_CONNECTIONS_PER_CLIENT (0 = none)
    total: int = 1024  # LOGTRIAGE_MAX_CONNECTIONS (0 = none)

    @classmethod
    def of(cls, settings: Settings) -> ConnLimits:
        return cls(settings.header_timeout, settings.max_connections_per_client, settings.max_connections)


@dataclass
class _OpenConnections:
    """The connections a server holds (refused ones not counted), in all and per client address."""

    total: int = 0
    by_client: dict[str, int] = field(default_factory=dict)

    def add(self, client: str) -> None:
        self.total += 1
        self.by_client[client] = self.by_client.get(client, 0) + 1

    def remove(self, client: str) -> None:
        self.total -= 1
        left = self.by_client.get(client, 1) - 1
        if left > 0:
            self.by_client[client] = left
        else:
            self.by_client.pop(client, None)


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        # what `uvicorn_http(settings)` binds; None: read from the environment's settings once
        limits: ConnLimits | None = None
        open_connections = _OpenConnections()  # per server (`uvicorn_http` makes a class per server)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_timer: asyncio.TimerHandle | None = None
            self._counted: str | None = None  # the client address this connection is counted under
            self._head_bytes = 0
            self._headers_done = False
            self._n_headers = 0
            self._too_large: str | None = None
            self._discarded = -1  # >= 0 once refused: what the client still sends is read and dropped
            self._serve_one_then_close = False  # set by shutdown() on a connection with no request yet

        @classmethod
        def _limits(cls) -> ConnLimits:
            if cls.limits is None:
                from app.settings import get_settings

                cls.limits = ConnLimits.of(get_settings())
            return cls.limits

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            limits = self._limits()
            conns = self.open_connections
            client = self.client[0] if self.client else ""
            if limits.total and conns.total >= limits.total:
                self._refuse(
                    ServiceUnavailableError(
                        f"the server holds its most connections ({limits.total}, LOGTRIAGE_MAX_CONNECTIONS); "
                        "retry shortly"
                    )
                )
                return
            if limits.per_client and client and conns.by_client.get(client, 0) >= limits.per_client:
                self._refuse(
                    TooManyConnectionsError(
                        f"this client holds {limits.per_client} connections to this server process already "
                        "(LOGTRIAGE_MAX_CONNECTIONS_PER_CLIENT); reuse them or retry shortly"
                    )
                )
                return
            conns.add(client)
            self._counted = client
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._release()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self) -> None:
            self._release()  # the connection is handed to another protocol: not ours to count
            super().handle_websocket_upgrade()

        def _release(self) -> None:
            self._cancel_head_timer()
            if self._counted is not None:
                self.open_connections.remove(self._counted)
                self._counted = None

        def _arm_head_timer(self) -> None:
            timeout = self._limits().header_timeout
            if timeout > 0 and self._head_timer is None:
                self._head_timer = self.loop.call_later(timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or self._discarded >= 0:
                return
            if self.cycle is not None and not self.cycle.response_complete:
                # a pipelined head behind a response still being sent: its clock starts later
                self._arm_head_timer()
                return
            if self._head_bytes == 0:
                self.transport.close()  # nothing of a request came: nothing to answer
                return
            timeout = self._limits().header_timeout
            self._send_problem(
                RequestTimeoutError(
                    f"the request head (request line and headers) did not arrive within {timeout:g} s "
                    "(LOGTRIAGE_HEADER_TIMEOUT)"
                )
            )

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._headers_done = False
            self._n_headers = 0
            self._arm_head_timer()  # a kept-alive connection's next head: from its first byte

        def on_header(self, name: bytes, value: bytes) -> None:
            self._n_headers += 1
            if self._n_headers > MAX_HEADERS:
                self._too_large = f"more than {MAX_HEADERS} header fields"
                raise _HeadTooLarge
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._cancel_head_timer()
            self._headers_done = True
            self._head_bytes = 0
            super().on_headers_complete()
            if self._serve_one_then_close and self.cycle is not None:
                self.cycle.keep_alive = False

        def shutdown(self) -> None:
            # uvicorn closes every connection with no request in progress. One the kernel handed
            # over just before the shutdown (a retiring worker, a rolling restart) may not have
            # sent its first request head yet, or only part of it: closing it drops a request
            # the client has already made ("server disconnected without sending a response").
            # Such a connection is served once, without keep-alive, if its request comes soon.
            if self.cycle is None and not self.transport.is_closing():
                self._serve_one_then_close = True
                self.loop.call_later(FIRST_REQUEST_GRACE_S, self._close_if_still_idle)
                return
            super().shutdown()

        def _close_if_still_idle(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._headers_done = False  # a kept-alive connection's next head starts

        def data_received(self, data: bytes) -> None:
            if self._discarded >= 0:
                self._discarded += len(data)
                if self._discarded > LINGER_BYTES:
                    self.transport.close()
                return
            if not self._headers_done:
                self._head_bytes += len(data)
            super().data_received(data)
            if (
                not self._headers_done
                and self._head_bytes > MAX_HEADER_BYTES
                and not self.transport.is_closing()
            ):
                # the head is still incomplete past the limit (a chunk that completes a small
                # head and carries body bytes never gets here)
                self._send_431(f"request line and headers over {MAX_HEADER_BYTES >> 10} KiB")

        def send_400_response(self, msg: str) -> None:
            if self._too_large is not None:
                self._send_431(self._too_large)
            else:
                super().send_400_response(msg)

        def _send_431(self, detail: str) -> None:
            self._send_problem(
                HeaderFieldsTooLargeError(
                    f"{detail}; at most {MAX_HEADER_BYTES >> 10} KiB and {MAX_HEADERS} fields"
                )
            )

        def _refuse(self, err: LogtriageError) -> None:
            retry = [(b"retry-after", str(RETRY_AFTER_BUSY_S).encode())]
            self._send_problem(err, headers=retry, linger=REFUSE_LINGER_SECONDS)

        def _send_problem(
            self,
            err: LogtriageError,
            *,
            headers: list[tuple[bytes, bytes]] | None = None,
            linger: float = LINGER_SECONDS,
        ) -> None:
            """Answer from the protocol, before (or instead of) the app, and close the connection."""
            self._cancel_head_timer()
            status = err.http_status
            body = json.dumps(
                {"type": f"/problems/{err.slug}", "title": err.title, "status": status, "detail": err.detail}
            ).encode()
            head = [b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode())]
            for name, value in [*self.server_state.default_headers, *(headers or [])]:
                head += [name, b": ", value, b"\r\n"]
            head += [
                b"content-type: application/problem+json\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
            ]
            self.transport.write(b"".join(head) + body)
            # a lingering close: closing with the client's bytes unread would reset the
            # connection, and the client could lose the answer; read and drop them a while
            self._discarded = 0
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(linger, self.transport.close)


def uvicorn_http(settings: Settings | None = None) -> Any:
    """What to pass uvicorn as `http`: the bounded protocol, or "auto" without httptools.

    With `settings`, a class of its own, bound to their limits, counting its own connections
    (one per server: the tests run several in one process). Without, the limits come from the
    environment's settings when the first connection arrives (a class that pickles by name, for
    uvicorn's own multi-process mode)."""
    if HttpToolsProtocol is None:
        return "auto"
    if settings is None:
        return BoundedHttpToolsProtocol
    return type(
        "BoundedHttpToolsProtocol",
        (BoundedHttpToolsProtocol,),
        {"limits": ConnLimits.of(settings), "open_connections": _OpenConnections()},
    )
