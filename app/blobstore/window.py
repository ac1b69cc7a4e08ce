"""A window of lines from a stored log, by line number or byte offset, without reading it whole.

A blob is a run of zstd frames of ``FRAME_BYTES`` each, and its frame index says where each frame
starts (uncompressed and compressed) and how many newlines come before it. To show line ``n``, the
reader enters the blob at the frame holding the newline that ends line ``n - 1``, counts newlines
from there (``bytes.count``, no per-line work) and splits only the lines it shows, so a page at
the end of a 5 GB log costs one frame's decompression, like a page at its start. A blob without an
index (stored as one frame) is read from its start; the answer is the same, only slower.

Lines are numbered from 1 and end at ``\\n`` (as the engine numbers its evidence); a ``\\r``
before it is dropped from the text; a last line without a newline is a line. Offsets are bytes of
the uncompressed log. Memory stays bounded: one read chunk, the offsets of at most a page and its
context, and at most ``max_line_bytes`` of any line (a longer one is cut, and says how much).
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

from app.blobstore.base import BlobStore

log = logging.getLogger("logtriage.blobstore")

MAX_LINES = 500  # lines on a page
MAX_BYTES = 1 << 20  # bytes of the log a page covers (at least one line, however long)
MAX_LINE_BYTES = 4096  # bytes of one line that are shown; the rest is counted
CHUNK = 256 << 10  # decompressed bytes read at a time


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    offset: int  # of its first byte
    length: int  # bytes, with its line ending
    text: str  # UTF-8 (invalid bytes replaced), without the line ending, at most max_line_bytes
    cut: int  # bytes of the line not in `text` (0: all of it)


@dataclass(frozen=True)
class Window:
    lines: list[Line]
    start: int  # offset of the first line (the page's own link)
    end: int  # offset just after the last line
    prev_offset: int | None  # where the page before this one starts; None on the first page
    next_offset: int | None  # where the page after this one starts; None on the last page
    total_lines: int | None  # from the index, or counted when the read reached the end
    target: int | None  # the line asked for, clamped into the log (None for an offset)

    @property
    def first_line(self) -> int:
        return self.lines[0].number if self.lines else 0

    @property
    def last_line(self) -> int:
        return self.lines[-1].number if self.lines else 0


@dataclass(frozen=True)
class FrameIndex:
    """A validated frame index (see ``app.blobstore.base.FrameIndex``)."""

    offsets: list[int]  # uncompressed offset of each frame
    compressed: list[int]  # compressed offset of each frame
    newlines: list[int]  # newlines before each frame
    size: int | None = None
    total_newlines: int | None = None
    total_lines: int | None = None
    stored_size: int | None = None
    grams_at: int | None = None  # where the search filters start in the stored blob, if it has them

    @classmethod
    def whole(cls) -> FrameIndex:
        """A blob stored as one frame: everything is read from its start."""
        return cls([0], [0], [0])

    @classmethod
    def parse(cls, raw: Sequence[Sequence[int]] | None) -> FrameIndex:
        """The index as stored; anything malformed reads the blob from its start."""
        if not raw:
            return cls.whole()
        try:
            *frames, end = [[int(v) for v in e] for e in raw]
            ok = (
                len(frames) >= 1
                and all(len(f) == 3 for f in frames)
                and len(end) in (4, 5)
                and (len(end) == 4 or 0 < end[4] <= end[1])
                and frames[0] == [0, 0, 0]
                and all(a[0] < b[0] and a[1] < b[1] and a[2] <= b[2] for a, b in itertools.pairwise(frames))
                and frames[-1][0] <= end[0]
                and frames[-1][2] <= end[2] <= end[3] <= end[2] + 1
            )
        except (TypeError, ValueError):
            ok = False
        if not ok:
            log.warning("ignoring a malformed frame index (%.80r): reading from the start", raw)
            return cls.whole()
        return cls(
            [f[0] for f in frames],
            [f[1] for f in frames],
            [f[2] for f in frames],
            size=end[0],
            total_newlines=end[2],
            total_lines=end[3],
            stored_size=end[1],
            grams_at=end[4] if len(end) == 5 else None,
        )

    @property
    def framed(self) -> bool:
        return self.size is not None

    def frame_of_newline(self, k: int) -> int:
        """The frame holding newline number ``k`` (1-based), i.e. where line ``k + 1`` starts."""
        return max(0, bisect.bisect_left(self.newlines, k) - 1)

    def frame_before(self, offset: int) -> int:
        """The last frame starting before ``offset`` (so the byte before it is read too)."""
        return max(0, bisect.bisect_left(self.offsets, offset) - 1)


class IndexMismatch(ValueError):
    """The frame index does not describe the stored bytes."""


class _Cursor:
    """Reads a decompressed blob forward, knowing its offset and the newlines before it."""

    def __init__(self, fh: BinaryIO, offset: int, newlines: int, end: int | None) -> None:
        self.fh = fh
        self.buf = b""
        self.pos = 0
        self.base = offset  # offset of buf[0]
        self.newlines = newlines
        self.prev = -1  # the byte before the position (-1: the start of the log, or not read)
        self.end = end  # where the log ends, when the index says

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def fill(self) -> bool:
        """Data at the position (False: the end of the log)."""
        if self.pos < len(self.buf):
            return True
        self.base += len(self.buf)
        self.buf = self.fh.read(CHUNK)
        self.pos = 0
        if not self.buf and self.end is not None and self.base != self.end:
            raise IndexMismatch(f"the blob ends at {self.base}, its index says {self.end}")
        return bool(self.buf)

    def skip_newlines(self, k: int) -> bool:
        """Move just past the next ``k`` newlines; False when the log ends first."""
        while k > 0:
            if not self.fill():
                return False
            buf, pos = self.buf, self.pos
            n = buf.count(b"\n", pos)
            if n < k:
                k -= n
                self.newlines += n
                self.pos = len(buf)
                self.prev = buf[-1]
                continue
            i = pos - 1
            for _ in range(k):
                i = buf.index(b"\n", i + 1)
            self.newlines += k
            self.pos = i + 1
            self.prev = 0x0A
            k = 0
        return True

    def skip_to(self, offset: int) -> bool:
        """Move to ``offset``, counting newlines; False when the log ends first."""
        while self.offset < offset:
            if not self.fill():
                return False
            take = min(len(self.buf) - self.pos, offset - self.offset)
            self.newlines += self.buf.count(b"\n", self.pos, self.pos + take)
            self.pos += take
            self.prev = self.buf[self.pos - 1]
        return True

    def next_line(self, keep: int) -> tuple[int, int, bytes, int] | None:
        """The line at the position: (offset, length, its first ``keep`` bytes, length of its
        ending), or None at the end of the log. The position must be a line start."""
        if not self.fill():
            return None
        start = self.offset
        head = bytearray()
        length = 0
        ending = 0
        last = -1  # the byte before the current piece
        while self.fill():
            buf, pos = self.buf, self.pos
            j = buf.find(b"\n", pos)
            end = len(buf) if j < 0 else j + 1
            if len(head) < keep:
                head += buf[pos : min(end, pos + keep - len(head))]
            length += end - pos
            self.pos = end
            self.prev = buf[end - 1]
            if j >= 0:
                self.newlines += 1
                before = buf[j - 1] if j > pos else last
                ending = 2 if before == 0x0D else 1
                break
            last = buf[end - 1]
        return start, length, bytes(head), ending


def _line(number: int, offset: int, length: int, head: bytes, ending: int, max_line_bytes: int) -> Line:
    content = length - ending
    shown = head[: min(content, max_line_bytes)]
    if len(shown) < content:  # cut, but not in the middle of a UTF-8 sequence
        tail = 0  # continuation bytes at the end
        while tail < 3 and tail < len(shown) and shown[-1 - tail] & 0xC0 == 0x80:
            tail += 1
        if tail < len(shown) and shown[-1 - tail] >= 0xC0:
            lead = shown[-1 - tail]
            if tail < (1 if lead < 0xE0 else 2 if lead < 0xF0 else 3):
                shown = shown[: -1 - tail]
    return Line(number, offset, length, shown.decode("utf-8", errors="replace"), content - len(shown))


def read_window(
    store: BlobStore,
    sha256: str,
    index: Sequence[Sequence[int]] | None,
    *,
    line: int | None = None,
    offset: int | None = None,
    max_lines: int = MAX_LINES,
    max_bytes: int = MAX_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
    before: int | None = None,
) -> Window:
    """A page of the stored log ``sha256``.

    By ``line``: the page around it (``before`` lines of context above, half a page by default),
    clamped into the log (a line past the end gives the last page). By ``offset``: the page
    starting at the first line that starts at or after it (past the end: the last page). Neither:
    the first page. ``prev_offset``/``next_offset`` are the neighbouring pages' ``offset``\\s.
    Raises ``FileNotFoundError`` for a missing blob.
    """
    import zstandard

    if max_lines < 1 or max_bytes < 1:
        raise ValueError("a page holds at least one line")
    reader = _Reader(store, sha256, FrameIndex.parse(index), max_lines, max_bytes, max_line_bytes)
    try:
        return reader.window(line, offset, before)
    except (zstandard.ZstdError, IndexMismatch) as exc:
        if not reader.index.framed:
            raise
        # the index does not describe the stored bytes (a blob written again by another
        # writer, say): the content is the same, so reading from the start is right
        log.warning("blob %s: frame index does not fit the blob (%s); read from the start", sha256, exc)
        reader.index = FrameIndex.whole()
        reader.total_lines = None
        return reader.window(line, offset, before)


class _Reader:
    def __init__(
        self,
        store: BlobStore,
        sha256: str,
        index: FrameIndex,
        max_lines: int,
        max_bytes: int,
        max_line_bytes: int,
    ) -> None:
        self.store = store
        self.sha256 = sha256
        self.index = index
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.max_line_bytes = max_line_bytes
        self.total_lines = index.total_lines

    def _open(self, frame: int) -> _Cursor:
        ix = self.index
        fh = self.store.open_at(self.sha256, ix.compressed[frame]) if frame else self.store.open(self.sha256)
        return _Cursor(fh, ix.offsets[frame], ix.newlines[frame], ix.size)

    def _ended(self, cur: _Cursor) -> int:
        """At the end of the log: the number of lines (remembered)."""
        total = cur.newlines + (1 if cur.prev not in (-1, 0x0A) else 0)
        self.total_lines = total
        return total

    def window(self, line: int | None, offset: int | None, before: int | None) -> Window:
        if line is None and offset is not None and offset > 0:
            found = self._line_at(offset)
            if found is None:  # no line starts there: the last page
                return self._around(self._last_line(), before=self.max_lines - 1, target=None)
            return self._around(found, before=0, target=None)
        if line is None:
            return self._around(1, before=0, target=None)
        ctx = self.max_lines // 2 if before is None else max(0, min(before, self.max_lines - 1))
        return self._around(max(1, line), before=ctx, target=max(1, line))

    def _last_line(self) -> int:
        if self.total_lines is not None:
            return self.total_lines
        cur = self._open(len(self.index.offsets) - 1)
        with cur.fh:
            while cur.skip_newlines(1 << 30):
                pass
            return self._ended(cur)

    def _line_at(self, offset: int) -> int | None:
        """The number of the first line starting at or after ``offset`` (> 0), or None."""
        ix = self.index
        if ix.size is not None and offset >= ix.size:
            return None
        cur = self._open(ix.frame_before(offset))
        with cur.fh:
            if not cur.skip_to(offset):
                self._ended(cur)
                return None
            if cur.prev != 0x0A and not cur.skip_newlines(1):
                self._ended(cur)
                return None
            if not cur.fill():
                self._ended(cur)
                return None
            return cur.newlines + 1

    def _around(self, line: int, *, before: int, target: int | None) -> Window:
        """The page holding ``line`` with up to ``before`` lines above it (fewer where lines are
        long: the page covers at most max_bytes), and where the page before it starts."""
        if self.total_lines is not None and line > self.total_lines:
            line, before = self.total_lines, self.max_lines - 1
            target = line if target is not None else None
        if line < 1:  # an empty log
            return Window([], 0, 0, None, None, 0, None)
        first_wanted = max(1, line - before)
        scan_from = max(1, first_wanted - self.max_lines)  # the page before needs these too
        cur = self._open(self.index.frame_of_newline(scan_from - 1) if scan_from > 1 else 0)
        with cur.fh:
            if not cur.skip_newlines(scan_from - 1 - cur.newlines):
                total = self._ended(cur)
                return self._around(total, before=self.max_lines - 1, target=target and total)
            starts: list[tuple[int, int]] = []  # (offset, length) of lines scan_from..line
            kept: dict[int, Line] = {}
            n = scan_from
            while n <= line:
                got = cur.next_line(self.max_line_bytes + 2 if n >= first_wanted else 0)
                if got is None:
                    total = self._ended(cur)
                    if total == 0:
                        return Window([], 0, 0, None, None, 0, None)
                    return self._around(total, before=self.max_lines - 1, target=target and total)
                off, length, head, ending = got
                starts.append((off, length))
                if n >= first_wanted:
                    kept[n] = _line(n, off, length, head, ending, self.max_line_bytes)
                n += 1

            def start_of(k: int) -> int:
                return starts[k - scan_from][0]

            line_end = start_of(line) + starts[line - scan_from][1]
            # the context above gets its share of the page's bytes, as of its lines
            above = self.max_bytes * before // self.max_lines
            first = first_wanted
            while first < line and (
                start_of(line) - start_of(first) > above or line_end - start_of(first) > self.max_bytes
            ):
                first += 1
            prev_offset = None
            if first > 1:
                q = max(scan_from, first - self.max_lines)
                while q < first - 1 and start_of(first) - start_of(q) > self.max_bytes:
                    q += 1
                prev_offset = start_of(q)
            lines = [kept[k] for k in range(first, line + 1)]
            used = line_end - start_of(first)
            next_offset: int | None = None
            while len(lines) < self.max_lines:
                got = cur.next_line(self.max_line_bytes + 2)
                if got is None:
                    break
                off, length, head, ending = got
                if used + length > self.max_bytes:
                    next_offset = off
                    break
                lines.append(_line(lines[-1].number + 1, off, length, head, ending, self.max_line_bytes))
                used += length
            else:
                if cur.fill():
                    next_offset = cur.offset
            if next_offset is None and self.total_lines is None:
                self._ended(cur)
            end = lines[-1].offset + lines[-1].length
            return Window(lines, lines[0].offset, end, prev_offset, next_offset, self.total_lines, target)
