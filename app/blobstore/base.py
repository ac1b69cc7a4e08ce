"""The blob store interface, the pending blob, and the local staging writer every store uses."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    import zstandard

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
ZSTD_LEVEL = 1  # on logs as small as level 3 (29.77 vs 29.75 KB of 200 KB) and a third faster
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class PendingBlob:
    """A finished, not yet committed blob (picklable: scan workers hand it to the server)."""

    sha256: str
    size: int  # uncompressed bytes
    stored_size: int  # bytes on disk
    tmp_path: str


class BlobWriter(Protocol):
    def write(self, data: bytes) -> None: ...
    def finish(self) -> PendingBlob: ...
    def abort(self) -> None: ...
    def __enter__(self) -> BlobWriter: ...
    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class BlobStore(Protocol):
    """Content-addressed, zstd-compressed blobs.

    ``open`` and ``exists`` raise ``FileNotFoundError`` / return False for a missing blob; a store
    that cannot be reached raises ``app.errors.ServiceUnavailableError``.
    """

    tmp_dir: Path  # local staging (pending blobs, re-triage work files)
    location: str  # for messages: a directory or an s3:// URL

    def writer(self) -> BlobWriter: ...
    def commit(self, pending: PendingBlob) -> bool: ...
    def discard(self, pending: PendingBlob) -> None: ...
    def open(self, sha256: str) -> BinaryIO: ...
    def exists(self, sha256: str) -> bool: ...
    def delete(self, sha256: str) -> None: ...
    def iter_blobs(self, *, older_than: float | None = None) -> Iterator[str]: ...
    def check_writable(self) -> None: ...


def blob_key(sha256: str) -> str:
    """``ab/cd/<sha256>.zst``: the same layout in a directory and under an S3 prefix."""
    if not SHA256_RE.match(sha256):
        raise ValueError(f"not a sha256: {sha256!r}")
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}.zst"


def sha_of_key(key: str) -> str | None:
    """The sha256 a key names, or None for anything else under the root (probes, strays)."""
    name = key.rsplit("/", 1)[-1]
    sha = name.removesuffix(".zst")
    return sha if SHA256_RE.match(sha) and key == blob_key(sha) else None


def iter_range(fh: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    """Bytes [start, start + length) of an opened (decompressing) blob, in chunks of at most 1 MiB.

    A zstd frame cannot be entered in the middle, so the bytes before ``start`` are decompressed
    and dropped; memory stays at one chunk.
    """
    skip = start
    while skip > 0:
        got = fh.read(min(skip, READ_CHUNK))
        if not got:
            return
        skip -= len(got)
    left = length
    while left > 0:
        chunk = fh.read(min(left, READ_CHUNK))
        if not chunk:
            return
        left -= len(chunk)
        yield chunk


class StagingWriter:
    """Streams content into a temporary file under ``tmp_dir``, hashing and compressing as it goes."""

    def __init__(self, tmp_dir: Path) -> None:
        import zstandard

        tmp_dir.mkdir(parents=True, exist_ok=True)
        self.path = tmp_dir / f"blob-{os.getpid()}-{secrets.token_hex(8)}.zst.part"
        self._fh: IO[bytes] = self.path.open("xb")
        self._hash = hashlib.sha256()
        self._size = 0
        self._zw: zstandard.ZstdCompressionWriter = zstandard.ZstdCompressor(
            level=ZSTD_LEVEL, write_checksum=True
        ).stream_writer(self._fh, closefd=False)
        self._done = False

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        self._size += len(data)
        self._zw.write(data)

    def finish(self) -> PendingBlob:
        self._zw.close()  # type: ignore[no-untyped-call]  # ends the zstd frame
        self._fh.flush()  # not fsynced: `commit` does, as it puts the blob in place
        stored = self._fh.tell()
        self._fh.close()
        self._done = True
        return PendingBlob(self._hash.hexdigest(), self._size, stored, str(self.path))

    def abort(self) -> None:
        if not self._done:
            with contextlib.suppress(Exception):
                self._zw.close()  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):
                self._fh.close()
            self._done = True
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> StagingWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is not None:
            self.abort()


def decompressing(raw: IO[bytes]) -> BinaryIO:
    """A reader of the uncompressed content of a stored blob (closes ``raw`` when closed)."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
    return reader
