"""Uploads into redacted, content-addressed pending blobs, read once as a stream by the scan.

Nothing unredacted reaches the blob store: every byte stored passes `redact_stream`. An upload
is read once: decompressed as it goes (with the service's `Guard`: expansion ratio, text
samples of the whole stream, the size limit, complete zstd frames), redacted line by line, and
each redacted chunk is written to the pending blob and handed to the scan (`RedactedUpload` is
the scan's source). No decompressed or redacted copy is written to disk, so the temporary disk
an upload takes is its spooled body plus its staged, compressed blob, both counted against
`LOGTRIAGE_MAX_TMP_BYTES`; a bomb is refused within its first MiBs, having written nothing.
"""

from __future__ import annotations

import io
import os
import queue
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from app.blobstore import BlobStore, BlobWriter, PendingBlob
from app.engine.pipeline.ingest import (
    RATIO_FLOOR,
    ByteBudget,
    Guard,
    LimitedReader,
    OpenedSource,
    Source,
    TextSampler,
    check_text,
    human_bytes,
    open_source,
    rank_from_name,
)
from app.engine.pipeline.redact import redact_stream, redact_text
from app.errors import DISK_FULL_ERRNOS, InputError, InputTooLargeError, disk_full
from app.service.jobs import InputFile
from app.service.spool import GrowingFile
from app.settings import Settings

__all__ = [
    "MAX_CONFIG_BYTES",
    "RedactedUpload",
    "TmpBudget",
    "check_text",
    "guard_of",
    "read_config",
    "redact_bytes",
    "redact_upload",
    "stage_bytes",
]

MAX_CONFIG_BYTES = 1 << 20
READ_CHUNK = 1 << 20
THREAD_AFTER = 8 << 20  # a log past this many bytes gets a writer thread (a hook's never does)
TMP_CHECK_EVERY = 8 << 20  # how often the staged blob's size is looked at


def guard_of(settings: Settings) -> Guard:
    """What the service asks of every upload it stores (`open_source`)."""
    return Guard(max_ratio=float(settings.max_expansion_ratio), ratio_floor=RATIO_FLOOR, check_text=True)


@dataclass
class TmpBudget:
    """The temporary disk one upload may take: its spooled body (as sent) plus the blobs it
    stages (compressed, redacted), at most `limit` bytes (0 = no limit)."""

    limit: int
    spooled: int = 0
    staged: int = 0  # blobs already finished

    def check(self, staging: int, name: str) -> None:
        used = self.spooled + self.staged + staging
        if self.limit and used > self.limit:
            raise InputTooLargeError(
                f"{name}: the upload needs more than {human_bytes(self.limit)} of temporary disk "
                f"(its body and the stored copy being written: {human_bytes(used)}); "
                "refused (LOGTRIAGE_MAX_TMP_BYTES)"
            )


class _BlobFeed:
    """Writes the redacted chunks to a pending blob: in the caller's thread at first, in a
    writer thread once the log proves big, so hashing and compressing overlap the scan (a
    hook's log starts no thread)."""

    def __init__(self, writer: BlobWriter, *, name: str, tmp: TmpBudget | None) -> None:
        self.writer = writer
        self.name = name
        self.tmp = tmp
        self.written = 0
        self._next_check = TMP_CHECK_EVERY
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def put(self, chunk: bytes) -> None:
        if self._error is not None:
            raise _storage(self._error)
        self.written += len(chunk)
        if self._queue is None and self.written > THREAD_AFTER:
            self._queue = queue.Queue(maxsize=2)  # MiB-sized chunks: what a one-line log holds in memory
            self._thread = threading.Thread(target=self._run, name="blob-writer", daemon=True)
            self._thread.start()
        if self._queue is None:
            try:
                self.writer.write(chunk)
            except OSError as exc:
                raise _storage(exc) from None
        else:
            self._queue.put(chunk)
        if self.tmp is not None and self.written >= self._next_check:
            self._next_check = self.written + TMP_CHECK_EVERY
            self.tmp.check(self.staging_size(), self.name)

    def staging_size(self) -> int:
        path = getattr(self.writer, "path", None)
        try:
            return os.stat(path).st_size if path is not None else 0
        except OSError:
            return 0

    def _run(self) -> None:
        assert self._queue is not None
        while (chunk := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.writer.write(chunk)
                except BaseException as exc:  # raised in the reading thread by the next put
                    self._error = exc

    def _stop(self) -> None:
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._queue = None

    def finish(self) -> PendingBlob:
        self._stop()
        if self._error is not None:
            self.writer.abort()
            raise _storage(self._error)
        try:
            blob = self.writer.finish()
        except OSError as exc:
            self.writer.abort()
            raise _storage(exc) from None
        if self.tmp is not None:
            self.tmp.staged += blob.stored_size
            try:
                self.tmp.check(0, self.name)
            except InputTooLargeError:
                Path(blob.tmp_path).unlink(missing_ok=True)
                raise
        return blob

    def abort(self) -> None:
        self._stop()
        self.writer.abort()


def _storage(exc: BaseException) -> BaseException:
    """A full disk met while staging a blob is a 507 (`InsufficientStorageError`), whoever reads
    the upload (the scan wraps it in a reader that calls other OSErrors unreadable input)."""
    return disk_full(exc) if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS else exc


class _Reads:
    """`read(n)` over a `LimitedReader` (what `redact_stream` reads from)."""

    def __init__(self, reader: LimitedReader) -> None:
        self._reader = reader

    def read(self, n: int = READ_CHUNK) -> bytes | bytearray:
        # the bytearray itself, not a bytes copy: `redact_stream` only ever joins it to its
        # carry (`bytes + bytearray` is bytes), and the copy cost a GB upload 0.1 s of the scan
        buf = bytearray(n)
        k = self._reader.readinto(memoryview(buf))
        del buf[k:]
        return buf


class RedactedUpload(io.RawIOBase):
    """One upload as the scan reads it: redacted, and written to a pending blob on the way.

    `finish()` (after the scan has read it) reads what is left and returns the pending blob;
    `abort()` throws it away. Errors in the upload (bomb, binary, truncated, too large) are
    raised by `readinto`, that is, inside the scan."""

    def __init__(
        self,
        opened: OpenedSource,
        writer: BlobWriter,
        *,
        name: str,
        tmp: TmpBudget | None = None,
        counts: Counter[str] | None = None,
    ) -> None:
        self.name = name
        self._opened = opened
        self._chunks: Iterator[bytes] = redact_stream(_Reads(opened.reader), counts=counts)  # type: ignore[arg-type]
        self._feed = _BlobFeed(writer, name=name, tmp=tmp)
        self._pending = memoryview(b"")
        self._done = False

    @property
    def size(self) -> int:
        return self._feed.written

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending:
            if self._done:
                return 0
            chunk = next(self._chunks, None)
            if chunk is None:
                self._done = True
                return 0
            if chunk:
                self._feed.put(chunk)
                self._pending = memoryview(chunk)
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def finish(self) -> PendingBlob:
        buf = bytearray(READ_CHUNK)
        while self.readinto(buf):  # whatever the scan left unread is still stored
            pass
        self._opened.close()
        if self._feed.written == 0:
            self._feed.abort()
            raise InputError(f"{self.name}: the log is empty")
        return self._feed.finish()

    def abort(self) -> None:
        self._opened.close()
        self._feed.abort()


def redact_upload(
    f: InputFile,
    store: BlobStore,
    budget: ByteBudget,
    *,
    guard: Guard,
    tmp: TmpBudget | None = None,
    counts: Counter[str] | None = None,
) -> RedactedUpload:
    """An upload (spooled, or in memory) opened for the one pass: `RedactedUpload`."""
    if f.data is not None:
        src = Source(name=f.name, stream=io.BytesIO(f.data), rank_hint=rank_from_name(f.name))
    elif f.growing:  # read behind the request that is still writing it
        stream = cast(BinaryIO, io.BufferedReader(GrowingFile(Path(f.path)), buffer_size=1 << 20))
        src = Source(name=f.name, stream=stream, rank_hint=rank_from_name(f.name))
    else:
        src = Source(name=f.name, path=Path(f.path), rank_hint=rank_from_name(f.name))
    opened = open_source(src, budget=budget, guard=guard)
    try:
        writer = store.writer()
    except BaseException:
        opened.close()
        raise
    return RedactedUpload(opened, writer, name=f.name, tmp=tmp, counts=counts)


def redact_bytes(name: str, data: bytes, budget: ByteBudget, *, counts: Counter[str] | None = None) -> bytes:
    """A small plain upload that arrived in memory, checked (text samples over all of it) and
    redacted; `stage_bytes` stores the result. A PyTorch flight-recorder dump (a pickle) is
    stored and scanned as its text rendition (app.engine.timeline.flight)."""
    from app.engine.timeline import flight

    rendered = flight.as_text(data, rank=rank_from_name(name)) if data[:1] == b"\x80" else None
    if rendered is not None:
        data = rendered
    sampler = TextSampler(name)
    sampler.feed(data)
    sampler.finish()
    if not data:
        raise InputError(f"{name}: the log is empty")
    budget.take(len(data), name)
    return b"".join(redact_stream(io.BytesIO(data), counts=counts))


def stage_bytes(store: BlobStore, data: bytes) -> PendingBlob:
    """Redacted bytes held in memory as a pending blob (compressed, hashed, not yet committed).
    Synced here: it runs beside the scan (`app.service.worker`), so its commit on the way to the
    answer no longer waits for the disk."""
    with store.writer(size=len(data), sync=True) as w:
        w.write(data)
        return w.finish()


def read_config(f: InputFile, *, counts: Counter[str] | None = None) -> str:
    if f.size > MAX_CONFIG_BYTES:
        raise InputTooLargeError(f"{f.name}: config file over {MAX_CONFIG_BYTES >> 20} MiB")
    return redact_text(f.read().decode("utf-8", errors="replace"), counts)
