"""Ingest: turn files, directories and stdin into byte streams the scanner can read.

Compression is detected by magic bytes (not by file name), so a renamed `.log` that is really
gzip still works. Every stream counts the (decompressed) bytes it yields and stops with a clear
error at the configured limit. A zstd stream that ends inside a frame is an error (zstd's own
reader ends quietly there; gzip's raises). The service also passes a `Guard`: a compressed
stream may not expand past a ratio of the compressed bytes read so far (bombs stop within the
first MiBs, before anything is written), and samples of the whole stream must look like text.
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

from app.engine.pipeline.archive import ARCHIVE_HEAD, archive_error, archive_format, check_not_archive
from app.errors import (
    DISK_FULL_ERRNOS,
    InputError,
    InputTooLargeError,
    LogtriageError,
    UnsupportedMediaError,
    disk_full,
)

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# a size after the number is not a rank ("one-rank-930g.log": a rank holding 930 GB, not rank 930)
_RANK_IN_NAME = re.compile(
    r"(?:^|[^a-z])(?:rank|local_rank|worker)[-_]?(\d{1,5})(?!\d)(?![kmgt](?:i?b)?(?:[^a-z]|$))", re.I
)


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


# torchrun --log-dir: <dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log (the web page
# uploads a folder's files with "__" for "/"); the number is the rank local to its node
_TORCHRUN_LOG = re.compile(r"(?:^|/|_)attempt_\d+(?:/|__)(\d+)(?:/|__)(?:stdout|stderr|error)\.(?:log|json)$")


def rank_from_name(name: str) -> int | None:
    m = _RANK_IN_NAME.search(Path(name).name)
    if m:
        return int(m.group(1))
    t = _TORCHRUN_LOG.search(name.replace("\\", "/"))
    return int(t.group(1)) if t else None


def sniff_compression(path: Path) -> str | None:
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def _binary_head(path: Path) -> str | None:
    """Why a plain file's first 4 KiB are not text (None: text, or compressed)."""
    with path.open("rb") as fh:
        head = fh.read(SAMPLE_BYTES)
    if head.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
        return None
    return binary_reason(head)


def _looks_binary(path: Path) -> bool:
    return _binary_head(path) is not None


def archive_of_file(path: Path) -> str | None:
    """The archive a file holds (zip, tar, 7z...; a .tar.gz or .tar.zst too), else None."""
    with path.open("rb") as fh:
        head = fh.read(ARCHIVE_HEAD)
    if head.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
        head = _expanded_head(path, head)
    return archive_format(head)


def _expanded_head(path: Path, head: bytes) -> bytes:
    """The first bytes a gzip or zstd file expands to (b"" when it is corrupt: read later)."""
    try:
        with path.open("rb") as raw:
            if head.startswith(GZIP_MAGIC):
                with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                    return gz.read(ARCHIVE_HEAD)
            import zstandard

            with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as zs:
                return bytes(zs.read(ARCHIVE_HEAD))
    except Exception:  # corrupt data is reported by the scan that reads it
        return b""


def _flight_source(path: Path) -> Source | None:
    """A PyTorch flight-recorder dump (a pickle) read as its text rendition (app.engine.timeline.flight)."""
    from app.engine.timeline import flight

    rank = rank_from_name(str(path))
    text = flight.read_dump(path, rank=rank)
    return Source(name=str(path), stream=io.BytesIO(text), rank_hint=rank) if text is not None else None


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
                fmt = archive_of_file(f)
                if fmt is not None:
                    warnings.append(f"{f}: skipped, a {fmt} archive (archives are not unpacked)")
                    continue
                if _looks_binary(f):
                    dump = _flight_source(f)
                    if dump is not None:
                        sources.append(dump)
                        continue
                    warnings.append(f"{f}: skipped, binary file")
                    continue
                sources.append(Source(name=str(f), path=f, rank_hint=rank_from_name(str(f))))
        elif p.is_file():
            try:
                fmt = archive_of_file(p)
                why = _binary_head(p)
            except OSError as exc:
                raise InputError(f"{item}: cannot open ({exc.strerror})") from None
            if fmt is not None:
                raise archive_error(item, fmt)
            if why is not None:
                dump = _flight_source(p)
                if dump is None:
                    raise UnsupportedMediaError(f"{item}: binary content, not a text log ({why})")
                sources.append(dump)
                continue
            sources.append(Source(name=str(p), path=p, rank_hint=rank_from_name(str(p))))
        elif p.exists():
            raise InputError(f"{item}: not a regular file")
        else:
            raise InputError(f"{item}: no such file or directory")
    if not sources:
        raise InputError("no input: give log files, directories or - for stdin")
    return sources, warnings


class LimitedReader:
    """Wraps a readable, counting bytes and enforcing the total-size limit across sources, and
    what the `Guard` asks: the expansion ratio of a compressed stream (`raw` counts what the
    decompressor has read) and text samples. At the end of a zstd stream its frames must be
    complete."""

    def __init__(
        self,
        inner: Readable,
        *,
        budget: ByteBudget,
        name: str,
        guard: Guard | None = None,
        raw: _Counted | None = None,
    ) -> None:
        self._inner = inner
        self._budget = budget
        self._name = name
        self._raw = raw
        self._ratio = guard.max_ratio if guard is not None and raw is not None else 0.0
        self._floor = guard.ratio_floor if guard is not None else 0
        self._text = TextSampler(name) if guard is not None and guard.check_text else None
        self.produced = 0

    def readinto(self, b: memoryview) -> int:
        try:
            n = self._inner.readinto(b) or 0
        except LogtriageError:
            raise
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                # a reader that writes (the service's redacted upload stages its blob) met a
                # full disk: the server's trouble, not the input's (507, not 400)
                raise disk_full(exc) from None
            raise InputError(f"{self._name}: cannot read ({exc})") from None
        except Exception as exc:  # zstd, zlib and ISA-L raise their own types (ZstdError, IsalError)
            if type(exc).__name__ == "ZstdError":
                raise InputError(f"{self._name}: corrupt zstd data ({exc})") from None
            if self._raw is not None:
                raise InputError(f"{self._name}: corrupt compressed data ({exc})") from None
            raise
        self._budget.take(n, self._name)
        raw = self._raw
        if self._text is not None and raw is not None and not self.produced and n >= 4:
            head = bytes(memoryview(b)[:4])
            if head.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
                raise UnsupportedMediaError(
                    f"{self._name}: compressed twice (gzip or zstd inside gzip or zstd); compress it once"
                )
        self.produced += n
        if self._ratio and raw is not None and self.produced > max(self._floor, self._ratio * raw.count):
            raise InputTooLargeError(
                f"{self._name}: expands more than {self._ratio:g} times its compressed size "
                f"({human_bytes(self.produced)} from {human_bytes(raw.count)} so far), like a "
                "compression bomb; refused before anything was stored (LOGTRIAGE_MAX_EXPANSION_RATIO)"
            )
        if self._text is not None:
            if n:
                self._text.feed(memoryview(b)[:n])
            else:
                self._text.finish()
        if not n and self._raw is not None:
            self._raw.at_end(self._name)
        return n


@dataclass(frozen=True)
class Guard:
    """What the service asks of an upload besides its size (the CLI reads the user's own files
    and passes none). `max_ratio`: a compressed stream may expand to at most this many times the
    compressed bytes read so far, once it is past `ratio_floor` bytes (0 = no ratio check);
    `check_text`: samples of the whole decompressed stream must look like text."""

    max_ratio: float = 0.0
    ratio_floor: int = 0
    check_text: bool = False


RATIO_FLOOR = 8 << 20  # a log expanding to less than this is never refused for its ratio
RAW_STEP = 64 << 10  # compressed bytes handed to a decompressor per read: what the ratio counts

_CONTROL = bytes(b for b in range(32) if b not in (8, 9, 10, 12, 13, 27))  # not in text logs
_NUL_RUN = re.compile(rb"\x00{16,}")
SAMPLE_BYTES = 4096
SAMPLE_EVERY = 256 << 10  # one 4 KiB sample per 256 KiB: ~1.6% of the bytes looked at


def binary_reason(sample: bytes) -> str | None:
    """Why a sample of a stream is not text, or None when it is.

    Runs of NULs are left out (a log a crashed node wrote ends in them). Text has almost no
    control bytes (tab, backspace, form feed, CR, ESC excepted); bytes that are not UTF-8 count
    only beside control bytes, so Latin-1 or Shift-JIS logs stay text while random or compressed
    data (10% control bytes, ~40% invalid UTF-8) does not."""
    rest = _NUL_RUN.sub(b"", sample) if b"\x00" * 16 in sample else sample
    if len(rest) < 64:
        return None
    control = len(rest) - len(rest.translate(None, _CONTROL))  # a byte loop cost 0.3 ms
    if control * 10 > len(rest):
        if rest[1::2].count(0) * 2 > len(rest) * 0.9 or rest[::2].count(0) * 2 > len(rest) * 0.9:
            return "UTF-16 text; convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"
        return f"{100 * control // len(rest)}% control bytes"
    if control * 50 <= len(rest) or rest.isascii():
        return None
    invalid = rest.decode("utf-8", "replace").count("\ufffd") - rest.count(b"\xef\xbf\xbd")
    if (control + invalid) * 10 > len(rest) * 3:
        return "control bytes and bytes that are not UTF-8"
    return None


def check_text(sample: bytes, name: str) -> None:
    why = binary_reason(sample)
    if why is not None:
        raise UnsupportedMediaError(
            f"{name}: binary content, not a text log ({why}); send plain text, gzip or zstd "
            "(archives such as .tar or .zip are not unpacked)"
        )


class TextSampler:
    """Checks a stream for binary content as it goes by: a sample at the start and every
    SAMPLE_EVERY bytes after, each SAMPLE_BYTES long (gathered across reads)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pos = 0  # bytes seen
        self.next_at = 0  # where the next sample starts
        self.buf = bytearray()
        self.first = True  # the first sample also names an archive (zip, tar, ...): refused

    def _check(self, sample: bytes) -> None:
        if self.first:
            self.first = False
            check_not_archive(sample, self.name)
        check_text(sample, self.name)

    def feed(self, data: memoryview | bytes) -> None:
        n = len(data)
        i = 0
        while i < n:
            if self.next_at > self.pos + i:
                i = min(n, self.next_at - self.pos)
                continue
            take = min(SAMPLE_BYTES - len(self.buf), n - i)
            self.buf += data[i : i + take]
            i += take
            if len(self.buf) >= SAMPLE_BYTES:
                self._check(bytes(self.buf))
                self.buf.clear()
                self.next_at = self.pos + i - SAMPLE_BYTES + SAMPLE_EVERY
        self.pos += n

    def finish(self) -> None:
        if self.buf:
            self._check(bytes(self.buf))
            self.buf.clear()


class ZstdFrames:
    """Walks zstd frame and block headers as the compressed bytes go by, without decompressing,
    to tell a complete stream from one cut short: zstd's stream reader ends quietly at the end
    of its input, inside a frame or not (RFC 8878: frame header, blocks up to the last one, an
    optional checksum; skippable frames)."""

    MAGIC = 0xFD2FB528

    def __init__(self) -> None:
        self.state = "magic"
        self.need = 4
        self.buf = bytearray()
        self.skip = 0
        self.checksum = False
        self.frames = 0

    def feed(self, data: memoryview | bytes) -> None:
        n = len(data)
        i = 0
        while i < n:
            if self.skip:
                k = min(self.skip, n - i)
                self.skip -= k
                i += k
                continue
            k = min(self.need - len(self.buf), n - i)
            self.buf += data[i : i + k]
            i += k
            if len(self.buf) == self.need:
                header = bytes(self.buf)
                self.buf.clear()
                self._header(header)

    def _header(self, h: bytes) -> None:
        if self.state == "magic":
            magic = int.from_bytes(h, "little")
            if magic == self.MAGIC:
                self.state, self.need = "frame", 1
            elif magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its size follows
                self.state, self.need = "skippable", 4
            else:  # not zstd: the decompressor says so; nothing more to walk
                self.state, self.skip = "garbage", 1 << 62
        elif self.state == "skippable":
            self.skip = int.from_bytes(h, "little")
            self.state, self.need = "magic", 4
        elif self.state == "frame":
            fhd = h[0]
            single = (fhd >> 5) & 1
            self.checksum = bool(fhd & 4)
            fcs = (single, 2, 4, 8)[fhd >> 6]
            self.skip = (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
            self.state, self.need = "block", 3
        elif self.state == "block":
            value = int.from_bytes(h, "little")
            last, kind, size = value & 1, (value >> 1) & 3, value >> 3
            self.skip = 1 if kind == 1 else size  # an RLE block holds one byte
            if last:
                self.skip += 4 if self.checksum else 0
                self.frames += 1
                self.state, self.need = "magic", 4

    @property
    def complete(self) -> bool:
        return self.state == "magic" and not self.buf and not self.skip and self.frames > 0


class _Counted(io.RawIOBase):
    """The compressed bytes as a decompressor reads them: counted, at most RAW_STEP per call (so
    the count is close to what it has consumed), and walked by `frames` for a zstd stream."""

    def __init__(self, raw: BinaryIO, *, frames: ZstdFrames | None = None) -> None:
        self._raw = raw
        self.count = 0
        self.frames = frames
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:
        view = memoryview(buffer).cast("B")[:RAW_STEP]
        n = (self._raw.readinto(view) or 0) if hasattr(self._raw, "readinto") else _read_into(self._raw, view)
        self.count += n
        if self.frames is not None and n:
            self.frames.feed(view[:n])
        if not n:
            self._eof = True
        return n

    def at_end(self, name: str) -> None:
        """The decompressed stream ended: a zstd stream must end with a whole frame."""
        if self.frames is None:
            return
        if not self._eof:  # whatever the decompressor left unread still has to be whole frames
            buf = bytearray(RAW_STEP)
            while self.readinto(buf):
                pass
        if not self.frames.complete:
            raise InputError(
                f"{name}: truncated zstd data (the stream ends inside a frame); send the whole file"
            )


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
    if n >= 1 << 70:  # beyond what a float holds exactly (or at all: a log may claim 10^400 GiB)
        return f"{n >> 30} GiB"
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

        frames = ZstdFrames()
        frames.feed(data)
        if not frames.complete:
            return None  # cut short: the worker reports it
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


def open_source(src: Source, *, budget: ByteBudget, guard: Guard | None = None) -> OpenedSource:
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
    counted = None
    if kind is None:
        raw = _flight_rendition(raw, src)
    if kind is not None:
        counted = _Counted(raw, frames=ZstdFrames() if kind == "zstd" else None)
        raw = counted  # type: ignore[assignment]
    inner = _decompressor(raw, kind)
    reader = LimitedReader(inner, budget=budget, name=src.name, guard=guard, raw=counted)
    return OpenedSource(reader, kind, closer)


def _read_upto(fh: BinaryIO, n: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < n:
        data = fh.read(n - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _flight_rendition(raw: BinaryIO, src: Source) -> BinaryIO:
    """A PyTorch flight-recorder dump (a pickle: uploads, stdin) as its text rendition; any
    other stream unchanged. Only a stream that starts like a pickle is read further."""
    from app.engine.timeline import flight

    head = _read_upto(raw, 2)
    if len(head) < 2 or head[0] != 0x80 or head[1] not in (2, 3, 4, 5):
        if src.path is not None:
            raw.seek(0)  # a plain file keeps its unbuffered reader (the scan's fast path)
            return raw
        return io.BufferedReader(_Peeked(head, raw)) if head else raw
    more = _read_upto(raw, 4094)
    if flight.looks_like_dump(head + more):
        data = head + more + _read_upto(raw, flight.MAX_DUMP_BYTES + 1 - len(head) - len(more))
        dump = flight.load(data)
        if dump is not None:
            return io.BytesIO(flight.render(dump, rank=src.rank_hint).encode())
        more = data[2:]
    return io.BufferedReader(_Peeked(head + more, raw))


def file_size(src: Source) -> int | None:
    if src.path is None:
        return None
    try:
        return os.stat(src.path).st_size
    except OSError:
        return None
