"""The blob store interface, the pending blob, and the local staging writer every store uses."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from app.blobstore.grams import GramBuilder

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
ZSTD_LEVEL = 1  # on logs as small as level 3 (29.77 vs 29.75 KB of 200 KB) and a third faster
READ_CHUNK = 1 << 20
# A blob is a run of independent zstd frames of this many uncompressed bytes (the last one
# shorter): a reader enters the blob at the frame holding the line it wants, so showing the end
# of a multi-GB log decompresses at most one frame before it (~8 ms, not 1.5-1.9 s, at the end
# of 1 GB) for 1.2% of the stored size; 1 MiB frames cost 4.6%, 8 MiB 0.6% (bench/viewer_bench.py).
FRAME_BYTES = 4 << 20
# `bytes.count(b"\n")` runs at ~1.2 GB/s here and holds the GIL: the frame index's count cost a
# 1 GB upload 0.85 s of CPU in the writer thread, blocking the scan thread meanwhile. numpy's
# compare is ~3.4x faster (0.25 s/GiB); writes smaller than this skip its import (a hook's log).
NUMPY_COUNT_MIN = 1 << 16

# Where to enter a blob: one ``[uncompressed offset, compressed offset, newlines before it]`` per
# zstd frame, then one last entry for the end of the blob, ``[size, stored size, newlines, lines]``
# (``lines`` counts a last line without its newline), followed, when the blob carries search
# filters (app.blobstore.grams), by the stored offset where they start. Stored as JSON in
# ``blobs.line_index``; None for a blob stored as one frame before it existed (read from the start).
FrameIndex = Sequence[Sequence[int]]


@dataclass(frozen=True)
class PendingBlob:
    """A finished, not yet committed blob (picklable: scan workers hand it to the server)."""

    sha256: str
    size: int  # uncompressed bytes
    stored_size: int  # bytes on disk
    tmp_path: str
    frames: tuple[tuple[int, ...], ...] | None = None  # its FrameIndex


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

    def writer(self, *, size: int | None = None, sync: bool = False) -> BlobWriter:
        """A staging writer. `size`, when the content's length is known, lets a blob that fits
        one frame skip the search filters it would not keep; `sync` asks a local store to fsync
        the staged file as it finishes (a writer off the answer's path: the commit then finds
        nothing left to write)."""
        ...

    def commit(self, pending: PendingBlob) -> bool: ...
    def discard(self, pending: PendingBlob) -> None: ...
    def open(self, sha256: str) -> BinaryIO: ...
    def open_at(self, sha256: str, compressed_offset: int) -> BinaryIO:
        """The uncompressed content from the zstd frame starting at ``compressed_offset`` (a
        frame index entry) to the end; only the bytes from there on are read."""
        ...

    def read_stored(self, sha256: str, offset: int, length: int) -> bytes:
        """Stored (compressed) bytes [offset, offset + length) of a blob, as they are."""
        ...

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
    """Streams content into a temporary file under ``tmp_dir``, hashing and compressing as it goes.

    A zstd frame ends every ``frame_bytes`` of content; ``finish`` returns where each begins
    (``PendingBlob.frames``). The frames decompress, one after the other, to the content.
    """

    def __init__(
        self,
        tmp_dir: Path,
        *,
        frame_bytes: int = FRAME_BYTES,
        grams: bool = True,
        gram_bits: int = 0,
        size: int | None = None,
        sync: bool = False,
    ) -> None:
        import zstandard

        self._sync = sync
        if size is not None and size <= frame_bytes:
            grams = False  # one frame: `finish` would drop them (a search reads it whole anyway)

        tmp_dir.mkdir(parents=True, exist_ok=True)
        self.path = tmp_dir / f"blob-{os.getpid()}-{secrets.token_hex(8)}.zst.part"
        self._fh: IO[bytes] = self.path.open("xb")
        self._hash = hashlib.sha256()
        self._size = 0
        # each frame is compressed in one call, its content gathered until it ends: less CPU
        # than zstd's stream writer flushed at each frame end (a 1 MB hook's copy 15% less, 4 MiB
        # frames ~5%; bench/README.md, "Floors"), for at most a frame held (FRAME_BYTES)
        self._cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
        self._pieces: list[bytes | memoryview] = []
        self._frame_bytes = frame_bytes
        self._frame_left = frame_bytes
        self._newlines = 0
        self._ends_line = True  # the content so far ends with a newline (or is empty)
        self._frames: list[tuple[int, ...]] = [(0, 0, 0)]
        self._done = False
        # the search filters (app.blobstore.grams), staged beside the blob and appended to it
        # as skippable frames by `finish` when the blob has more than one frame
        self._grams_path = self.path.with_suffix(".grams")
        self._grams_fh: IO[bytes] | None = None
        self._grams: GramBuilder | None = None
        if grams:
            from app.blobstore.grams import GramBuilder

            self._grams_fh = self._grams_path.open("xb")
            # bits in proportion to the frame: 2**18 for 4 MiB (app.blobstore.grams.GRAM_BITS)
            bits = gram_bits or max(8, min(24, frame_bytes.bit_length() - 5))
            self._grams = GramBuilder(self._grams_fh, bits=bits)

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        n = len(data)
        if not n:
            return
        view = memoryview(data)
        pos = 0
        grams = self._grams
        # kept until the frame ends: a caller's bytes as they are (they cannot change under us),
        # a piece of any other buffer (one a reader refills) as a copy
        keep: Callable[[memoryview], bytes | memoryview] = (lambda v: v) if isinstance(data, bytes) else bytes
        while n - pos > self._frame_left:  # the frame fills up within this write
            end = pos + self._frame_left
            self._pieces.append(keep(view[pos:end]))
            if grams is not None:
                grams.feed(view[pos:end])
                grams.end_frame()
            self._newlines += count_newlines(data, pos, end)
            self._size += end - pos
            self._end_frame()
            self._frames.append((self._size, self._fh.tell(), self._newlines))
            self._frame_left = self._frame_bytes
            pos = end
        self._pieces.append(keep(view[pos:]))
        if grams is not None:
            grams.feed(view[pos:] if pos else data)
        self._newlines += count_newlines(data, pos)
        self._size += n - pos
        self._frame_left -= n - pos
        self._ends_line = data[-1] == 0x0A

    def _end_frame(self) -> None:
        """Compress the gathered content as one frame and write it out: tell() is its end."""
        pieces = self._pieces
        self._fh.write(self._cctx.compress(pieces[0] if len(pieces) == 1 else b"".join(pieces)))
        pieces.clear()

    def finish(self) -> PendingBlob:
        self._end_frame()  # the last frame (an empty one for empty content, as before)
        data_end = self._fh.tell()
        end: tuple[int, ...] = ()
        if self._grams is not None and self._grams_fh is not None:
            if len(self._frames) > 1:  # one frame: a search reads it whole anyway
                self._grams.end_frame()
                self._append_grams()
                end = (data_end,)
            self._grams_fh.close()
            self._grams_path.unlink(missing_ok=True)
        self._fh.flush()
        if self._sync:
            os.fsync(self._fh.fileno())  # not by default: a duplicate's copy is dropped unsynced
        stored = self._fh.tell()
        self._fh.close()
        self._done = True
        lines = self._newlines + (0 if self._ends_line else 1)
        frames = (*self._frames, (self._size, stored, self._newlines, lines, *end))
        return PendingBlob(self._hash.hexdigest(), self._size, stored, str(self.path), frames)

    def _append_grams(self) -> None:
        """The filters after the data frames, as zstd skippable frames: [grams header, bits]."""
        from app.blobstore.grams import skippable_frames

        assert self._grams is not None and self._grams_fh is not None
        self._grams_fh.flush()
        header = self._grams.header()
        body = self._grams_fh.tell()
        with self._grams_path.open("rb") as src:
            first = True
            for head, n in skippable_frames(len(header) + body):
                self._fh.write(head)
                if first:
                    self._fh.write(header)
                    n -= len(header)
                    first = False
                left = n
                while left > 0:
                    got = src.read(min(left, READ_CHUNK))
                    if not got:
                        raise OSError("the staged search filters ended early")
                    self._fh.write(got)
                    left -= len(got)

    def abort(self) -> None:
        if not self._done:
            self._pieces.clear()
            with contextlib.suppress(Exception):
                self._fh.close()
            self._done = True
        if self._grams_fh is not None:
            with contextlib.suppress(Exception):
                self._grams_fh.close()
            self._grams_path.unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> StagingWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is not None:
            self.abort()


def count_newlines(data: bytes, start: int = 0, end: int | None = None) -> int:
    """Newlines in ``data[start:end]``."""
    end = len(data) if end is None else end
    if end - start >= NUMPY_COUNT_MIN:
        try:
            import numpy as np
        except ImportError:
            pass
        else:
            return int(np.count_nonzero(np.frombuffer(data, np.uint8, end - start, start) == 0x0A))
    return data.count(b"\n", start, end)


def decompressing(raw: IO[bytes]) -> BinaryIO:
    """A reader of the uncompressed content of a stored blob (closes ``raw`` when closed)."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
    return reader
