"""Ingest: turn files, directories and stdin into byte streams the scanner can read.

Compression is detected by magic bytes (not by file name), so a renamed `.log` that is really
gzip still works. Every stream counts the (decompressed) bytes it yields and stops with a clear
error at the configured limit, which also defuses decompression bombs.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from app.errors import InputError, InputTooLargeError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|local_rank|worker)[-_]?(\d{1,5})(?:\D|$)", re.I)


class Readable(Protocol):
    def readinto(self, b: memoryview, /) -> int | None: ...


@dataclass
class Source:
    """One log to scan. `name` is what findings cite; `path` is set for plain files."""

    name: str
    path: Path | None = None
    stream: BinaryIO | None = None  # for stdin or uploads
    rank_hint: int | None = None

    @property
    def splittable(self) -> bool:
        """A plain (uncompressed) file can be cut into byte ranges for parallel scanning."""
        return self.path is not None and sniff_compression(self.path) is None


def rank_from_name(name: str) -> int | None:
    m = _RANK_IN_NAME.search(Path(name).name)
    return int(m.group(1)) if m else None


def sniff_compression(path: Path) -> str | None:
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def _looks_binary(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(8192)
    return b"\x00" in head and sniff_compression(path) is None


def collect_sources(inputs: list[str], *, stdin: BinaryIO | None = None) -> tuple[list[Source], list[str]]:
    """Expand CLI-style inputs (files, directories, ``-``) into sources; return warnings too."""
    sources: list[Source] = []
    warnings: list[str] = []
    for item in inputs:
        if item == "-":
            sources.append(Source(name="<stdin>", stream=stdin or sys.stdin.buffer))
            continue
        p = Path(item)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
            if not files:
                raise InputError(f"{item}: directory holds no files")
            for f in files:
                if _looks_binary(f):
                    warnings.append(f"{f}: skipped, binary file")
                    continue
                sources.append(Source(name=str(f), path=f, rank_hint=rank_from_name(f.name)))
        elif p.is_file():
            sources.append(Source(name=str(p), path=p, rank_hint=rank_from_name(p.name)))
        elif p.exists():
            raise InputError(f"{item}: not a regular file")
        else:
            raise InputError(f"{item}: no such file or directory")
    if not sources:
        raise InputError("no input: give log files, directories or - for stdin")
    return sources, warnings


class LimitedReader:
    """Wraps a readable, counting bytes and enforcing the total-size limit across sources."""

    def __init__(self, inner: Readable, *, budget: ByteBudget, name: str) -> None:
        self._inner = inner
        self._budget = budget
        self._name = name

    def readinto(self, b: memoryview) -> int:
        try:
            n = self._inner.readinto(b) or 0
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"{self._name}: cannot read ({exc})") from None
        except Exception as exc:  # zstd raises its own ZstdError type
            if type(exc).__name__ == "ZstdError":
                raise InputError(f"{self._name}: corrupt zstd data ({exc})") from None
            raise
        self._budget.take(n, self._name)
        return n


@dataclass
class ByteBudget:
    limit: int  # 0 = unlimited
    used: int = 0

    def take(self, n: int, name: str) -> None:
        self.used += n
        if self.limit and self.used > self.limit:
            raise too_large(f"{name}: input exceeds the limit of {human_bytes(self.limit)} (decompressed)")


def too_large(what: str) -> InputTooLargeError:
    return InputTooLargeError(
        f"{what}; raise the limit (CLI --max-bytes, service LOGTRIAGE_MAX_BYTES; 0 = none) "
        "or pass the tail of the log, e.g. `tail -c 2G job.log`"
    )


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _decompressor(raw: BinaryIO, kind: str | None) -> Readable:
    if kind == "gzip":
        try:
            from isal import igzip_threaded
        except ImportError:
            return gzip.GzipFile(fileobj=raw, mode="rb")
        # ISA-L inflates ~2x faster than zlib, and in a background thread (it releases the GIL)
        # so decompression overlaps the scan instead of adding to it.
        return igzip_threaded.open(raw, "rb", threads=1)  # type: ignore[no-any-return,no-untyped-call]
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return raw  # type: ignore[return-value]


def expand_in_memory(data: bytes, *, limit: int) -> bytes | None:
    """A small upload's content: `data` decompressed as its magic says (plain data as is), or
    None when that is over `limit` bytes or the data is corrupt (whoever reads it as a stream
    reports that). Same libraries as `open_source`, so the same bytes."""
    if data.startswith(GZIP_MAGIC):
        try:
            from isal import igzip as gz
        except ImportError:
            import gzip as gz  # type: ignore[no-redef]
        reader: Any = gz.GzipFile(fileobj=io.BytesIO(data), mode="rb")  # type: ignore[no-untyped-call]
    elif data.startswith(ZSTD_MAGIC):
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    else:
        return data if len(data) <= limit else None
    try:
        with reader:
            out: bytes = reader.read(limit + 1)
    except Exception:  # truncated or corrupt: gzip, zlib, ISA-L and zstd each raise their own
        return None
    return out if len(out) <= limit else None


class _Peeked(io.RawIOBase):
    """A stream with its first bytes already read (to sniff magic on stdin/uploads)."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:
        b = memoryview(buffer).cast("B")
        if self._head.nbytes:
            n = min(len(b), self._head.nbytes)
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._rest.readinto(b) if hasattr(self._rest, "readinto") else _read_into(self._rest, b)


def _read_into(fh: BinaryIO, b: memoryview) -> int:
    data = fh.read(len(b))
    b[: len(data)] = data
    return len(data)


@dataclass
class OpenedSource:
    reader: LimitedReader
    compression: str | None
    closer: list[BinaryIO]

    def close(self) -> None:
        for fh in self.closer:
            fh.close()


def open_source(src: Source, *, budget: ByteBudget) -> OpenedSource:
    """Open a source for sequential reading, decompressing as its magic bytes say."""
    closer: list[BinaryIO] = []
    if src.path is not None:
        try:
            raw: BinaryIO = src.path.open("rb", buffering=0)
        except OSError as exc:
            raise InputError(f"{src.name}: cannot open ({exc.strerror})") from None
        closer.append(raw)
        kind = sniff_compression(src.path)
    else:
        assert src.stream is not None
        head = src.stream.read(4) or b""
        kind = "gzip" if head.startswith(GZIP_MAGIC) else "zstd" if head.startswith(ZSTD_MAGIC) else None
        raw = io.BufferedReader(_Peeked(head, src.stream))
    inner = _decompressor(raw, kind)
    return OpenedSource(LimitedReader(inner, budget=budget, name=src.name), kind, closer)


def file_size(src: Source) -> int | None:
    if src.path is None:
        return None
    try:
        return os.stat(src.path).st_size
    except OSError:
        return None
