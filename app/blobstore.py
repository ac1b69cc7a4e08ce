"""Content-addressed store for redacted logs: sha256 of the content, zstd-compressed on disk.

Writing is two-phase so a crash never leaves a half blob under its final name and the database
row and the blob are committed together:

1. ``store.writer()`` streams content into a temporary file in the data dir (same filesystem),
   hashing and compressing as it goes; ``finish()`` fsyncs it and returns a ``PendingBlob``.
2. ``store.commit(pending)`` renames it into place atomically (returns whether it was new);
   ``store.discard(pending)`` throws it away. The caller deletes a new blob again if the database
   transaction that refers to it fails.

``BlobStore`` is the interface; ``DirectoryBlobStore`` the implementation. An S3-compatible store
can implement the same protocol (stage locally, upload on commit).
"""

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
ZSTD_LEVEL = 3


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
    def writer(self) -> BlobWriter: ...
    def commit(self, pending: PendingBlob) -> bool: ...
    def discard(self, pending: PendingBlob) -> None: ...
    def open(self, sha256: str) -> BinaryIO: ...
    def exists(self, sha256: str) -> bool: ...
    def delete(self, sha256: str) -> None: ...
    def iter_blobs(self) -> Iterator[str]: ...
    def check_writable(self) -> None: ...


class _DirWriter:
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
        self._fh.flush()
        os.fsync(self._fh.fileno())
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

    def __enter__(self) -> _DirWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is not None:
            self.abort()


class DirectoryBlobStore:
    """Blobs under ``root/ab/cd/<sha256>.zst``; staging files under ``tmp_dir``."""

    def __init__(self, root: Path, *, tmp_dir: Path) -> None:
        self.root = root
        self.tmp_dir = tmp_dir

    def path_of(self, sha256: str) -> Path:
        if not SHA256_RE.match(sha256):
            raise ValueError(f"not a sha256: {sha256!r}")
        return self.root / sha256[:2] / sha256[2:4] / f"{sha256}.zst"

    def writer(self) -> _DirWriter:
        return _DirWriter(self.tmp_dir)

    def commit(self, pending: PendingBlob) -> bool:
        final = self.path_of(pending.sha256)
        tmp = Path(pending.tmp_path)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tmp, final)  # atomic and exclusive: exactly one committer sees the blob as new
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(final.parent)
        return True

    def discard(self, pending: PendingBlob) -> None:
        Path(pending.tmp_path).unlink(missing_ok=True)

    def open(self, sha256: str) -> BinaryIO:
        import zstandard

        fh = self.path_of(sha256).open("rb")
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True, closefd=True)
        return reader

    def exists(self, sha256: str) -> bool:
        return self.path_of(sha256).is_file()

    def delete(self, sha256: str) -> None:
        self.path_of(sha256).unlink(missing_ok=True)

    def iter_blobs(self) -> Iterator[str]:
        if not self.root.is_dir():
            return
        for p in self.root.glob("??/??/*.zst"):
            if SHA256_RE.match(p.stem) and p == self.path_of(p.stem):
                yield p.stem

    def check_writable(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        probe = self.tmp_dir / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        probe.write_bytes(b"ok")
        probe.unlink()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def blob_store_for(data_dir: Path) -> DirectoryBlobStore:
    return DirectoryBlobStore(data_dir / "blobs", tmp_dir=data_dir / "tmp")
