"""Blobs as files: ``root/ab/cd/<sha256>.zst``, committed by an atomic, exclusive hard link."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from app.blobstore.base import PendingBlob, StagingWriter, blob_key, decompressing, sha_of_key


class DirectoryBlobStore:
    """Blobs under ``root/ab/cd/<sha256>.zst``; staging files under ``tmp_dir``."""

    def __init__(self, root: Path, *, tmp_dir: Path) -> None:
        self.root = root
        self.tmp_dir = tmp_dir
        self.location = str(root)

    def path_of(self, sha256: str) -> Path:
        return self.root / blob_key(sha256)

    def writer(self, *, size: int | None = None, sync: bool = False) -> StagingWriter:
        return StagingWriter(self.tmp_dir, size=size, sync=sync)

    def commit(self, pending: PendingBlob) -> bool:
        final = self.path_of(pending.sha256)
        tmp = Path(pending.tmp_path)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            if final.exists():  # a log posted again: no need to wait for the disk
                return False
            _fsync(tmp)  # the content is on disk before any name points at it
            os.link(tmp, final)  # atomic and exclusive: exactly one committer sees the blob as new
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        _fsync(final.parent)
        return True

    def discard(self, pending: PendingBlob) -> None:
        Path(pending.tmp_path).unlink(missing_ok=True)

    def open(self, sha256: str) -> BinaryIO:
        return decompressing(self.path_of(sha256).open("rb"))

    def open_at(self, sha256: str, compressed_offset: int) -> BinaryIO:
        raw = self.path_of(sha256).open("rb")
        try:
            raw.seek(compressed_offset)
        except BaseException:
            raw.close()
            raise
        return decompressing(raw)

    def read_stored(self, sha256: str, offset: int, length: int) -> bytes:
        with self.path_of(sha256).open("rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def exists(self, sha256: str) -> bool:
        return self.path_of(sha256).is_file()

    def delete(self, sha256: str) -> None:
        self.path_of(sha256).unlink(missing_ok=True)

    def iter_blobs(self, *, older_than: float | None = None) -> Iterator[str]:
        """Every stored blob; with ``older_than`` (epoch seconds) only those modified before it."""
        if not self.root.is_dir():
            return
        for p in self.root.glob("??/??/*.zst"):
            sha = sha_of_key(p.relative_to(self.root).as_posix())
            if sha is None:
                continue
            if older_than is not None:
                try:
                    if p.stat().st_mtime >= older_than:
                        continue
                except FileNotFoundError:
                    continue
            yield sha

    def check_writable(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        probe = self.tmp_dir / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        probe.write_bytes(b"ok")
        probe.unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def blob_store_for(data_dir: Path) -> DirectoryBlobStore:
    """The directory store in a data dir (``open_blob_store`` picks the configured store)."""
    return DirectoryBlobStore(data_dir / "blobs", tmp_dir=data_dir / "tmp")
