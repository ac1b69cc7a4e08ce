"""uvicorn's httptools protocol with a bound on the request head.

httptools (llhttp) sets no limit on headers: a client could send megabytes of header lines,
all held in memory and then handed to the app. Here the head (request line and headers) may
take at most `MAX_HEADER_BYTES` and `MAX_HEADERS` fields; past either, the connection gets a
clean `431` problem+json and is closed (not reset), before anything reaches the app. Malformed
requests keep uvicorn's own `400`. `app.api.inputcheck` checks the same sizes in the app, for a
server started without this class.

Used by `logtriage serve` (`uvicorn_http()`), its `--workers` processes and the tests' servers.
"""

from __future__ import annotations

import json
from typing import Any

from app.api.inputcheck import MAX_HEADER_BYTES, MAX_HEADERS

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is a dependency; without it uvicorn falls back to h11
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


LINGER_SECONDS = 2.0
LINGER_BYTES = 8 << 20
# a connection accepted just before a graceful shutdown gets this long to send its first request
FIRST_REQUEST_GRACE_S = 5.0


class _HeadTooLarge(Exception):
    pass


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_bytes = 0
            self._headers_done = False
            self._n_headers = 0
            self._too_large: str | None = None
            self._discarded = -1  # >= 0 once refused: what the client still sends is read and dropped
            self._serve_one_then_close = False  # set by shutdown() on a connection with no request yet

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._headers_done = False
            self._n_headers = 0

        def on_header(self, name: bytes, value: bytes) -> None:
            self._n_headers += 1
            if self._n_headers > MAX_HEADERS:
                self._too_large = f"more than {MAX_HEADERS} header fields"
                raise _HeadTooLarge
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
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
            body = json.dumps(
                {
                    "type": "/problems/request-header-fields-too-large",
                    "title": "Request header fields too large",
                    "status": 431,
                    "detail": f"{detail}; at most {MAX_HEADER_BYTES >> 10} KiB and {MAX_HEADERS} fields",
                }
            ).encode()
            head = [b"HTTP/1.1 431 Request Header Fields Too Large\r\n"]
            for name, value in self.server_state.default_headers:
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
            self.loop.call_later(LINGER_SECONDS, self.transport.close)


def uvicorn_http() -> Any:
    """What to pass uvicorn as `http`: the bounded protocol, or "auto" without httptools."""
    if HttpToolsProtocol is None:
        return "auto"
    return BoundedHttpToolsProtocol
