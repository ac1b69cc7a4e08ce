"""Stream a request body to spool files in the data dir: never the whole body in memory.

Two shapes are accepted on ``POST /api/v1/analyses``:

- a raw body (``text/plain``, ``application/octet-stream``, ...; ``Content-Encoding: gzip|zstd``
  or already-compressed bytes, detected by magic) holding one log;
- ``multipart/form-data`` with one or more log file parts (``log``), an optional ``config``
  part and metadata fields.

Bytes are hashed while they are written (in a worker thread, 1 MiB at a time) and counted
against the upload limit and the temporary-disk limit, which end the request with 413 as soon as
one is crossed. A body that sends nothing for `LOGTRIAGE_BODY_TIMEOUT` seconds, or that averages
less than `LOGTRIAGE_MIN_BODY_RATE` bytes/s over a `LOGTRIAGE_BODY_RATE_WINDOW`, ends it with 408.
A full disk while spooling is a 507 (`app.http.errors`); the route removes the spool either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fastapi import Request
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from app.engine.pipeline.archive import ARCHIVE_HEAD, check_not_archive
from app.engine.pipeline.ingest import GZIP_MAGIC, ZSTD_MAGIC, human_bytes
from app.errors import (
    ForbiddenError,
    InputError,
    LogtriageError,
    PayloadTooLargeError,
    RequestTimeoutError,
    UnsupportedMediaError,
    ValidationFailedError,
)
from app.service.jobs import InputFile, ScanJob
from app.service.metadata import JobMeta
from app.service.spool import mark_aborted, mark_done

# called once a raw body has spooled its first MiB: the caller may start analysing it then
OnSpool = Callable[[InputFile], Awaitable[None]]

FLUSH_BYTES = 1 << 20
MEMORY_BYTES = FLUSH_BYTES  # a request body up to this size is passed on in memory
RAW_TYPES = {
    "",
    "text/plain",
    "text/x-log",
    "application/octet-stream",
    "application/gzip",
    "application/x-gzip",
    "application/zstd",
    "application/x-zstd",
    # what `curl --data-binary @job.log` sends when no Content-Type is given
    "application/x-www-form-urlencoded",
}
ENCODINGS = {"", "identity", "gzip", "x-gzip", "zstd"}
LOG_PARTS = {"log", "logs", "file", "files"}
CONFIG_PART = "config"
META_FIELDS = {"job_id", "framework", "exit_code", "host", "label", "labels", "source", "filename"}
# the web page's form (without JavaScript): its CSRF token, and the paste box as a log
FORM_FIELDS = {"csrf_token"}
PASTE_PART = "text"
MAX_FILES = 64
MAX_FIELDS = 64
MAX_FIELD_BYTES = 64 << 10
MAX_CONFIG_BYTES = 1 << 20
CSRF_REFUSED = "the form has expired (missing or wrong CSRF token); reload the page and try again"
# control characters (C0, DEL, C1), bidi overrides and isolates (a name that reads backwards
# in a page), lone surrogates; every script, emoji (with their joiners) and combining mark stays
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def safe_name(raw: str | None, default: str) -> str:
    """The base name of an uploaded file, without directories or control characters, at most
    200 characters."""
    if not raw:
        return default
    name = _UNSAFE.sub("", raw.replace("\\", "/").rsplit("/", 1)[-1]).strip()
    if name in ("", ".", ".."):
        return default
    return name[:200]


class _Budget:
    def __init__(self, limit: int, tmp_limit: int = 0) -> None:
        self.limit = limit
        self.tmp_limit = tmp_limit  # the spool is temporary disk too (LOGTRIAGE_MAX_TMP_BYTES)
        self.used = 0

    def take(self, n: int) -> None:
        self.used += n
        if self.limit and self.used > self.limit:
            raise PayloadTooLargeError(
                f"request body over the upload limit of {human_bytes(self.limit)} "
                "(LOGTRIAGE_MAX_UPLOAD_BYTES); compress the log (gzip/zstd) or send its tail"
            )
        if self.tmp_limit and self.used > self.tmp_limit:
            raise PayloadTooLargeError(
                f"request body over the temporary disk an upload may take, {human_bytes(self.tmp_limit)} "
                "(LOGTRIAGE_MAX_TMP_BYTES); compress the log (gzip/zstd) or send its tail"
            )


@dataclass(frozen=True)
class Limits:
    """What the server's settings allow a request body (read from the app's settings, so every
    route that receives an upload, API or web form, gets the same)."""

    tmp_bytes: int = 0
    body_timeout: float = 0.0
    min_body_rate: int = 0
    body_rate_window: float = 30.0

    @classmethod
    def of(cls, request: Request) -> Limits:
        settings = getattr(request.app.state, "settings", None)
        if settings is None:
            return cls()
        return cls(
            tmp_bytes=settings.max_tmp_bytes,
            body_timeout=settings.body_timeout,
            min_body_rate=settings.min_body_rate,
            body_rate_window=settings.body_rate_window,
        )


class _RateFloor:
    """A body must bring `rate` bytes/s averaged over every `window` seconds, from one window
    after its start: bytes counted per second of arrival, the last window's kept (a few dozen
    numbers). `deadline()` is when the floor breaks if nothing more arrives."""

    def __init__(self, rate: int, window: float, now: float) -> None:
        self.rate = rate
        self.window = window
        self.need = rate * window
        self.start = now
        self.seconds: deque[list[int]] = deque()  # [second of arrival, bytes]

    def add(self, n: int, now: float) -> None:
        sec = int(now)
        if self.seconds and self.seconds[-1][0] == sec:
            self.seconds[-1][1] += n
        else:
            self.seconds.append([sec, n])
            while self.seconds and self.seconds[0][0] + 1 + self.window <= now:
                self.seconds.popleft()

    def deadline(self) -> float:
        got = 0
        for sec, n in reversed(self.seconds):  # the newest second that keeps the window full
            got += n
            if got >= self.need:
                return max(self.start + self.window, sec + 1 + self.window)
        return self.start + self.window

    def received(self, now: float) -> int:
        return sum(n for sec, n in self.seconds if sec + 1 + self.window > now)


async def body_chunks(request: Request, timeout: float) -> AsyncIterator[bytes]:
    """The request body as it arrives; a client that sends nothing for `timeout` seconds, or
    less than `LOGTRIAGE_MIN_BODY_RATE` bytes/s over a `LOGTRIAGE_BODY_RATE_WINDOW`, ends the
    request with 408 (it would otherwise hold a connection and a spool file for ever)."""
    limits = Limits.of(request)
    loop = asyncio.get_running_loop()
    floor = (
        _RateFloor(limits.min_body_rate, limits.body_rate_window, loop.time())
        if limits.min_body_rate > 0
        else None
    )
    stream = request.stream().__aiter__()
    while True:
        wait = timeout if timeout > 0 else None
        too_slow = False
        if floor is not None:
            left = floor.deadline() - loop.time()
            if wait is None or left < wait:
                wait, too_slow = max(left, 0.0), True
        try:
            if wait is not None:
                async with asyncio.timeout(wait):
                    chunk = await anext(stream)
            else:
                chunk = await anext(stream)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if too_slow and floor is not None:
                raise RequestTimeoutError(
                    f"the request body came too slowly: {floor.received(loop.time())} bytes in the last "
                    f"{limits.body_rate_window:g} s, under {limits.min_body_rate} bytes/s "
                    "(LOGTRIAGE_MIN_BODY_RATE); send the upload again"
                ) from None
            raise RequestTimeoutError(
                f"the request body stalled: nothing arrived for {timeout:g} s "
                "(LOGTRIAGE_BODY_TIMEOUT); send the upload again"
            ) from None
        if chunk:
            if floor is not None:
                floor.add(len(chunk), loop.time())
            yield chunk


class _Sink:
    """One uploaded file: buffered in memory up to 1 MiB, then written and hashed in a thread.

    A body that stays small is never written here at all: it goes to the scan worker in memory
    (`close(in_memory=True)`), which saves a hook's upload a directory, a file, three thread
    hops and the removal (~1 ms of a web process's CPU). The spool directory is created by the
    first sink that writes.
    """

    def __init__(self, path: Path, *, name: str, limit: int = 0, digest: bool = True) -> None:
        self.path = path
        self.name = name
        self.limit = limit
        # the body's sha256 only serves the Idempotency-Key check: without a key it is not worth
        # its ~0.9 s of CPU per GB
        self.digest = digest
        self.size = 0
        self.head = b""
        self.data: bytes | None = None  # the whole file, when it stayed in memory
        # the body's pieces as they came: joined once (a single piece is not copied at all);
        # a growing bytearray copied each piece once more and then the whole, ~1 ms of a 1 MB
        # hook on the event loop
        self._parts: list[bytes] = []
        self._pending = 0
        self._hash = hashlib.sha256()
        self._fh: IO[bytes] | None = None

    def feed(self, data: bytes) -> None:
        self.size += len(data)
        if self.limit and self.size > self.limit:
            raise PayloadTooLargeError(f"{self.name}: over {human_bytes(self.limit)}")
        if len(self.head) < ARCHIVE_HEAD:
            self.head = (self.head + data[:ARCHIVE_HEAD])[:ARCHIVE_HEAD]
            if len(self.head) == ARCHIVE_HEAD:
                check_not_archive(self.head, self.name)  # a zip or tar: 415 before it is spooled
        self._parts.append(bytes(data))
        self._pending += len(data)

    def _take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts, self._pending = [], 0
        return data

    @property
    def pending(self) -> int:
        return self._pending

    def _file(self) -> IO[bytes]:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("wb")
        return self._fh

    def _write(self, data: bytes) -> None:
        fh = self._file()
        fh.write(data)
        fh.flush()  # a scan worker may be reading behind it (`growing_file`)
        if self.digest:
            self._hash.update(data)

    async def flush(self, *, force: bool = False) -> None:
        if self._pending and (force or self._pending >= FLUSH_BYTES):
            data = self._take()
            await asyncio.to_thread(self._write, data)

    async def close(self, *, in_memory: bool = False) -> str:
        """Finish the file; returns its sha256. `in_memory`: keep it in `data` if nothing was
        written yet (the caller decides what the request may hold in memory)."""
        check_not_archive(self.head, self.name)  # one shorter than ARCHIVE_HEAD (an empty zip)
        if in_memory and self._fh is None:
            self.data = self._take()
            return hashlib.sha256(self.data).hexdigest() if self.digest else ""
        await self.flush(force=True)

        await asyncio.to_thread(lambda: self._file().close())
        return self._hash.hexdigest() if self.digest else ""

    @property
    def written(self) -> bool:
        """Whether the file has bytes on disk (a body past 1 MiB)."""
        return self._fh is not None

    def input_file(self) -> InputFile:
        return InputFile(self.name, str(self.path), data=self.data)

    def growing_file(self, expected: int | None) -> InputFile:
        """The file while it is still being written (read behind it until `mark_done`)."""
        self._file().flush()
        return InputFile(self.name, str(self.path), growing=True, expected=expected)

    def abort(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):  # a full disk fails the flush too; the file goes anyway
                self._fh.close()


@dataclass
class Upload:
    files: list[InputFile] = field(default_factory=list)
    config: InputFile | None = None
    fields: dict[str, list[str]] = field(default_factory=dict)
    parts: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, name, sha256)
    total_bytes: int = 0  # log bytes as sent


def _media_type(request: Request) -> tuple[str, dict[bytes, bytes]]:
    ctype, params = parse_options_header(request.headers.get("content-type", ""))
    return ctype.decode("latin-1").lower(), params


def _check_encoding(request: Request) -> str:
    enc = request.headers.get("content-encoding", "").strip().lower()
    if enc not in ENCODINGS:
        raise UnsupportedMediaError(f"Content-Encoding {enc!r} is not supported; use gzip or zstd (or none)")
    return "gzip" if enc == "x-gzip" else enc


def check_declared_length(
    request: Request, limit: int, *, setting: str = "LOGTRIAGE_MAX_UPLOAD_BYTES"
) -> None:
    length = request.headers.get("content-length")
    if length and length.isdigit() and limit and int(length) > limit:
        raise PayloadTooLargeError(
            f"request body of {human_bytes(int(length))} is over the upload limit of {human_bytes(limit)} "
            f"({setting}); compress the log (gzip/zstd) or send its tail"
        )


async def receive(
    request: Request,
    *,
    spool: Path,
    limit: int,
    raw_name: str | None,
    form: bool = False,
    digest: bool = True,
    on_spool: OnSpool | None = None,
    csrf: Callable[[str], bool] | None = None,
) -> Upload:
    """Spool the request body; raises LogtriageErrors (415, 413, 400, 422) on bad input.

    `form`: the body is the web page's own form (sent without JavaScript): empty file inputs
    are left out, the paste box counts as a log, and the CSRF field is accepted. `csrf`: the
    check of that field, made as it streams by: a multipart body whose `csrf_token` field fails
    it, or does not come before the first file, is a 403 before any file byte is kept.
    `digest`: hash a raw body (only an Idempotency-Key check needs it). `on_spool`: called with
    a raw body's file once its first MiB is on disk, to analyse it while the rest arrives (the
    file then ends with a `.done` marker, or `.abort` when the request fails)."""
    try:
        return await _receive(
            request,
            spool=spool,
            limit=limit,
            raw_name=raw_name,
            form=form,
            digest=digest,
            on_spool=on_spool,
            csrf=csrf,
        )
    except ClientDisconnect:
        raise InputError("the client disconnected before the upload was complete") from None


async def _receive(
    request: Request,
    *,
    spool: Path,
    limit: int,
    raw_name: str | None,
    form: bool = False,
    digest: bool = True,
    on_spool: OnSpool | None = None,
    csrf: Callable[[str], bool] | None = None,
) -> Upload:
    limits = Limits.of(request)
    check_declared_length(request, limit)
    check_declared_length(request, limits.tmp_bytes, setting="LOGTRIAGE_MAX_TMP_BYTES")
    ctype, params = _media_type(request)
    encoding = _check_encoding(request)
    budget = _Budget(limit, limits.tmp_bytes)
    if csrf is not None and ctype != "multipart/form-data":
        raise ForbiddenError(CSRF_REFUSED)  # no form field can carry the token
    if ctype == "multipart/form-data":
        if encoding not in ("", "identity"):
            raise UnsupportedMediaError(
                "a multipart body cannot carry Content-Encoding; compress each file instead"
            )
        return await _receive_multipart(
            request,
            spool=spool,
            budget=budget,
            params=params,
            form=form,
            timeout=limits.body_timeout,
            csrf=csrf,
        )
    if ctype in RAW_TYPES or ctype.startswith("text/"):
        return await _receive_raw(
            request,
            spool=spool,
            budget=budget,
            encoding=encoding,
            name=raw_name,
            timeout=limits.body_timeout,
            digest=digest,
            on_spool=on_spool,
        )
    raise UnsupportedMediaError(
        f"Content-Type {ctype!r} is not accepted; send the log as text/plain (optionally with "
        "Content-Encoding: gzip or zstd) or as multipart/form-data with `log` file parts"
    )


def _check_head(head: bytes, encoding: str) -> None:
    if encoding == "gzip" and not head.startswith(GZIP_MAGIC):
        raise InputError("Content-Encoding says gzip but the body is not gzip data")
    if encoding == "zstd" and not head.startswith(ZSTD_MAGIC):
        raise InputError("Content-Encoding says zstd but the body is not zstd data")


def _declared_length(request: Request) -> int | None:
    length = request.headers.get("content-length", "")
    return int(length) if length.isdigit() else None


async def _receive_raw(
    request: Request,
    *,
    spool: Path,
    budget: _Budget,
    encoding: str,
    name: str | None,
    timeout: float,
    digest: bool = True,
    on_spool: OnSpool | None = None,
) -> Upload:
    display = safe_name(name, "job.log")
    sink = _Sink(spool / "in-0", name=display, digest=digest)
    started = False
    try:
        async for chunk in body_chunks(request, timeout):
            budget.take(len(chunk))
            sink.feed(chunk)
            await sink.flush()
            if on_spool is not None and not started and sink.written:
                _check_head(sink.head, encoding)
                started = True  # the analysis reads the file behind us from here on
                await on_spool(sink.growing_file(_declared_length(request)))
        sha = await sink.close(in_memory=sink.size <= MEMORY_BYTES and not started)
        if started:
            await asyncio.to_thread(mark_done, sink.path, sink.size)
    except BaseException:
        sink.abort()
        if started:
            mark_aborted(sink.path)
        raise
    if sink.size == 0:
        raise InputError("empty request body: send the log as the body (or as a multipart `log` part)")
    _check_head(sink.head, encoding)
    up = Upload(total_bytes=sink.size)
    up.files.append(sink.input_file())
    up.parts.append(("log", display, sha))
    return up


class _MultipartState:
    def __init__(self, spool: Path, *, form: bool = False, csrf: Callable[[str], bool] | None = None) -> None:
        self.spool = spool
        self.form = form
        self.csrf = csrf
        self.csrf_passed = csrf is None
        self.header_field = bytearray()
        self.header_value = bytearray()
        self.headers: dict[str, bytes] = {}
        self.kind: str | None = None  # log | config | field
        self.part_name = ""
        self.sink: _Sink | None = None
        self.field_buf = bytearray()
        self.sinks: list[tuple[str, _Sink]] = []  # (kind, sink)
        self.fields: dict[str, list[str]] = {}
        self.n_fields = 0
        self.ended = False
        self.error: LogtriageError | None = None

    def fail(self, exc: LogtriageError) -> None:
        if self.error is None:
            self.error = exc

    def on_part_begin(self) -> None:
        self.headers = {}
        self.kind = None
        self.sink = None
        self.field_buf = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[self.header_field.decode("latin-1").lower()] = bytes(self.header_value)
        self.header_field = bytearray()
        self.header_value = bytearray()

    def on_headers_finished(self) -> None:
        disp, opts = parse_options_header(self.headers.get("content-disposition", b""))
        name = opts.get(b"name", b"").decode("utf-8", "replace")
        filename = opts.get(b"filename")
        fname = filename.decode("utf-8", "replace") if filename is not None else None
        self.part_name = name
        if disp != b"form-data" or not name:
            self.fail(InputError("a multipart part has no `Content-Disposition: form-data; name=...`"))
            self.kind = "skip"
            return
        if self.form and name == PASTE_PART and fname is None:
            fname = "pasted.log"  # a browser form's paste box: a log like any other
            name = "log"
        if not self.csrf_passed and (name in LOG_PARTS or name == CONFIG_PART):
            # the page's form sends its token first: nothing of a file is kept without it
            self.fail(ForbiddenError(CSRF_REFUSED))
            self.kind = "skip"
            return
        if name in LOG_PARTS:
            n_logs = sum(1 for k, _ in self.sinks if k == "log")
            if n_logs >= MAX_FILES:
                self.fail(ValidationFailedError(f"at most {MAX_FILES} log files per analysis"))
                self.kind = "skip"
                return
            display = safe_name(fname, f"log{n_logs + 1}.log" if n_logs else "job.log")
            self.sink = _Sink(self.spool / f"in-{len(self.sinks)}", name=display)
            self.sinks.append(("log", self.sink))
            self.kind = "log"
        elif name == CONFIG_PART:
            if any(k == "config" for k, _ in self.sinks):
                self.fail(ValidationFailedError("at most one `config` part"))
                self.kind = "skip"
                return
            self.sink = _Sink(
                self.spool / f"in-{len(self.sinks)}", name=safe_name(fname, "config"), limit=MAX_CONFIG_BYTES
            )
            self.sinks.append(("config", self.sink))
            self.kind = "config"
        elif (name in META_FIELDS or (self.form and name in FORM_FIELDS)) and fname is None:
            self.n_fields += 1
            if self.n_fields > MAX_FIELDS:
                self.fail(ValidationFailedError(f"at most {MAX_FIELDS} form fields"))
                self.kind = "skip"
                return
            self.kind = "field"
        else:
            allowed = ", ".join(sorted(LOG_PARTS | {CONFIG_PART} | META_FIELDS))
            self.fail(ValidationFailedError(f"unknown multipart part {name!r}; expected one of: {allowed}"))
            self.kind = "skip"

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.kind in ("log", "config") and self.sink is not None:
            try:
                self.sink.feed(data[start:end])
            except LogtriageError as exc:
                self.fail(exc)
                self.kind = "skip"
        elif self.kind == "field":
            self.field_buf += data[start:end]
            if len(self.field_buf) > MAX_FIELD_BYTES:
                self.fail(
                    ValidationFailedError(f"form field {self.part_name!r} over {MAX_FIELD_BYTES >> 10} KiB")
                )
                self.kind = "skip"

    def on_part_end(self) -> None:
        if self.kind == "field":
            try:
                value = self.field_buf.decode("utf-8")
            except UnicodeDecodeError:
                self.fail(ValidationFailedError(f"form field {self.part_name!r} is not UTF-8"))
                return
            self.fields.setdefault(self.part_name, []).append(value)
            if self.csrf is not None and self.part_name in FORM_FIELDS:
                if not self.csrf(value):
                    self.fail(ForbiddenError(CSRF_REFUSED))
                self.csrf_passed = not self.error

    def on_end(self) -> None:
        self.ended = True


async def _receive_multipart(
    request: Request,
    *,
    spool: Path,
    budget: _Budget,
    params: dict[bytes, bytes],
    form: bool = False,
    timeout: float = 0.0,
    csrf: Callable[[str], bool] | None = None,
) -> Upload:
    boundary = params.get(b"boundary")
    if not boundary:
        raise InputError("multipart/form-data without a boundary parameter")
    st = _MultipartState(spool, form=form, csrf=csrf)
    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": st.on_part_begin,
            "on_part_data": st.on_part_data,
            "on_part_end": st.on_part_end,
            "on_header_field": st.on_header_field,
            "on_header_value": st.on_header_value,
            "on_header_end": st.on_header_end,
            "on_headers_finished": st.on_headers_finished,
            "on_end": st.on_end,
        },
    )
    try:
        async for chunk in body_chunks(request, timeout):
            budget.take(len(chunk))
            try:
                parser.write(chunk)
            except LogtriageError:
                raise
            except Exception as exc:  # the parser's own errors: a malformed body
                raise InputError(f"malformed multipart body ({exc})") from None
            if st.error is not None:
                raise st.error
            for _kind, sink in st.sinks:
                if sink.pending:
                    # a finished part waits in memory while the request may still stay there
                    await sink.flush(force=sink is not st.sink and budget.used > MEMORY_BYTES)
        if not st.ended:
            raise InputError("truncated multipart body (no closing boundary)")
        if not st.csrf_passed:
            raise ForbiddenError(CSRF_REFUSED)
        if form:  # a form sends its empty file inputs and an empty paste box too
            for _k, sink in [(k, s) for k, s in st.sinks if s.size == 0]:
                sink.abort()
                sink.path.unlink(missing_ok=True)
            st.sinks = [(k, s) for k, s in st.sinks if s.size > 0]
        up = Upload(fields=st.fields)
        for kind, sink in st.sinks:
            sha = await sink.close(in_memory=budget.used <= MEMORY_BYTES)
            if kind == "log":
                up.files.append(sink.input_file())
                up.total_bytes += sink.size
            else:
                up.config = sink.input_file()
            up.parts.append((kind, sink.name, sha))
    except BaseException:
        for _k, sink in st.sinks:
            sink.abort()
        raise
    if not up.files:
        raise ValidationFailedError("no log in the multipart body: add at least one `log` file part")
    if any(s.size == 0 for k, s in st.sinks if k == "log"):
        empty = next(s.name for k, s in st.sinks if k == "log" and s.size == 0)
        raise InputError(f"{empty}: the log is empty")
    return up


@dataclass(frozen=True)
class Intake:
    """An upload made ready to analyse: the job, what the hook said about it, a request digest
    (the idempotency check compares it)."""

    job: ScanJob
    meta: JobMeta
    digest: str


def _redacted_meta(meta: Any) -> Any:
    """Metadata as stored and shown: a secret in a job id, host, source or label goes the way of
    one in the log. A label is checked as `key=value`, so `WANDB_API_KEY=...` is seen as the
    assignment it is."""
    from app.engine.pipeline.redact import redact_text

    labels = {}
    for key, value in (meta.labels or {}).items():
        pair = f"{key}={value}"
        red = redact_text(pair)
        safe_key = redact_text(key)
        if red == pair:
            labels[safe_key] = value
        else:
            labels[safe_key] = red[len(key) + 1 :] if red.startswith(key + "=") else "[REDACTED:label]"
    changes: dict[str, Any] = {"labels": labels}
    for name in ("job_id", "host", "source"):
        value = getattr(meta, name)
        if isinstance(value, str):
            changes[name] = redact_text(value)
    return meta.model_copy(update=changes)


def _redacted_name(f: InputFile) -> InputFile:
    from app.engine.pipeline.redact import redact_text

    name = redact_text(f.name)
    return f if name == f.name else InputFile(name, f.path, data=f.data)


def intake_of(upload: Upload, *, query: dict[str, Any], labels: list[str], source: str) -> Intake:
    """Metadata from the query and the form fields (a field wins), validated; every edge that
    receives an upload (REST, web form) builds its job here."""
    from app.service.metadata import parse_labels, validate_metadata

    fields = upload.fields
    data: dict[str, Any] = {**query, "source": source}
    for name in ("job_id", "framework", "exit_code", "host", "source", "labels"):
        if len(fields.get(name, [])) > 1:  # which one would be meant? (`label` is the one that repeats)
            raise ValidationFailedError(f"form field {name!r} given {len(fields[name])} times; give it once")
    for name in ("job_id", "framework", "exit_code", "host", "source"):
        if fields.get(name):
            data[name] = fields[name][-1]
    data["labels"] = parse_labels([*labels, *fields.get("label", [])], fields.get("labels"))
    data = {k: v for k, v in data.items() if v is not None and v != ""}
    meta = validate_metadata(data)
    meta = _redacted_meta(meta)
    upload.files = [_redacted_name(f) for f in upload.files]
    if upload.config is not None:
        upload.config = _redacted_name(upload.config)
    digest = hashlib.sha256(
        json.dumps({"parts": upload.parts, "meta": meta.model_dump()}, sort_keys=True).encode()
    ).hexdigest()
    job = ScanJob(
        files=tuple(upload.files), config=upload.config, framework=meta.framework, exit_code=meta.exit_code
    )
    job_meta = JobMeta(
        source=meta.source,
        job_id=meta.job_id,
        framework=meta.framework,
        exit_code=meta.exit_code,
        host=meta.host,
        labels=meta.labels,
    )
    return Intake(job, job_meta, digest)
