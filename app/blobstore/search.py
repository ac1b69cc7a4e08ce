"""Finding lines in a stored log without reading it whole: the next or previous line that a
pattern matches, from a line, and how many lines match (counted a slice at a time).

Forward, the search enters the blob at the frame holding the line it starts from (as
`app.blobstore.window` does) and reads on in 1 MiB pieces until the first hit, so a hit near
the position costs one frame's decompression whatever the log's size. Backward, it decompresses
whole frames one at a time from the position towards the start (a frame is ``FRAME_BYTES``);
a blob without an index is read from its start. Every search has a deadline: when it passes,
the answer says how far the search got, and the caller offers to go on from there, so one
request never holds a worker longer than its budget, whatever the log or the pattern.

The bytes searched are the stored ones (UTF-8, ANSI codes included); a match is a match inside
one line (a pattern that spans a newline is checked again on the line alone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.blobstore import grams
from app.blobstore.base import BlobStore
from app.blobstore.grams import Literal
from app.blobstore.window import FrameIndex

READ = 1 << 20  # decompressed bytes read at a time going forward
MAX_CARRY = 8 << 20  # of one line: a longer line is searched in pieces of this size
FIRST_PIECE = 0.25  # seconds the first piece of a search may take whatever its deadline (progress)


_scratch = threading.local()


class SearchTimeout(Exception):
    """The deadline passed inside one regex call (a pattern slow on this text)."""


@dataclass(frozen=True)
class Matcher:
    """A compiled query over bytes (the blob) and str (the shown lines).

    With ``literals``, candidates are found with ``bytes.find`` (C speed, no regex over the
    bulk of the log): a case-sensitive plain search is its one literal; a pattern given with
    literals it cannot match without (`prefiltered`) is checked by ``regex`` on the candidate's
    line only. Everything else is the ``regex`` module with a timeout, so a pattern that
    backtracks without end is stopped.
    """

    fwd: Any  # regex.Pattern[bytes]
    rev: Any  # the same, REVERSE: its first match is the last one
    text: Any  # regex.Pattern[str], for marking matches on the shown lines
    literals: tuple[bytes, ...] = ()
    verify: bool = False  # a literal's line must also match ``fwd``
    text_literals: tuple[str, ...] = ()  # the literals, to skip the regex on shown lines
    hs: Any = None  # a Hyperscan database of the literals (one pass over a piece), when installed
    # text every match holds, for the blob's frame filters (app.blobstore.grams): alternatives,
    # each pieces that a match holds all of; empty: every frame is read
    required: tuple[tuple[Literal, ...], ...] = ()

    @classmethod
    def compile(cls, pattern: str, *, is_regex: bool, case: bool) -> Matcher:
        """Raises ``ValueError`` with the regex module's reason for a pattern it refuses."""
        import regex

        src = pattern if is_regex else regex.escape(pattern)
        flags = regex.MULTILINE | regex.VERSION0 | (0 if case else regex.IGNORECASE)
        try:
            text = regex.compile(src, flags)
            fwd = regex.compile(src.encode("utf-8"), flags)
            rev = regex.compile(src.encode("utf-8"), flags | regex.REVERSE)
        except (regex.error, ValueError, OverflowError, RecursionError) as exc:
            raise ValueError(str(exc)) from None
        if text.flags & regex.REVERSE:  # an inline (?r): "first" would find the last match
            raise ValueError("reverse searching, (?r), is not supported: use Find previous")
        try:
            empty = text.search("", timeout=0.05) is not None
        except TimeoutError:
            empty = False
        if empty:
            raise ValueError("it matches an empty string, so every line")
        literals = (pattern.encode("utf-8"),) if not is_regex and case else ()
        found = ([[pattern]], False) if not is_regex else grams.required_literals(pattern)
        required: tuple[tuple[Literal, ...], ...] = ()
        if found:
            alts, fold = found
            required = tuple(tuple(Literal(x.encode("utf-8"), not case or fold) for x in a) for a in alts)
        return cls(fwd, rev, text, literals, required=required)

    @classmethod
    def prefiltered(cls, pattern: str, literals: tuple[str, ...]) -> Matcher:
        """A case-sensitive ``pattern`` every match of which holds one of ``literals``."""
        m = cls.compile(pattern, is_regex=True, case=True)
        lits = tuple(x.encode() for x in literals)
        required = tuple((Literal(x, False),) for x in lits)
        return cls(m.fwd, m.rev, m.text, lits, True, literals, _literal_db(lits), required)

    def _candidates(self, data: bytes, start: int, end: int) -> list[int] | None:
        """Where literals end in data[start:end], in order (Hyperscan: one pass however many
        literals; `bytes.find` once per literal ran at ~120 MB/s for 16). None without it."""
        db: Any = self.hs
        if db is None:
            return None
        ends: list[int] = []

        def on_match(_id: int, _start: int, to: int, _flags: int, _ctx: object) -> None:
            ends.append(start + to - 1)

        # a scratch space per thread: the page's searches run in threads, and one scratch may
        # not serve two scans at once
        scratch = getattr(_scratch, "space", None)
        if scratch is None or getattr(_scratch, "db", None) is not db:
            import hyperscan

            scratch = _scratch.space = hyperscan.Scratch(db)
            _scratch.db = db
        db.scan(memoryview(data)[start:end], match_event_handler=on_match, scratch=scratch)
        return ends

    def _line_of(self, data: bytes, i: int, start: int, end: int, deadline: float) -> tuple[bool, int, int]:
        """(whether the line holding data[i] matches, its start, its end)."""
        ls = max(start, data.rfind(b"\n", start, i) + 1)
        le = data.find(b"\n", i, end)
        le = end if le < 0 else le
        return (not self.verify or self._search(self.fwd, data, ls, le, deadline) is not None), ls, le

    def first(self, data: bytes, start: int, end: int, deadline: float) -> int | None:
        """Where the first match inside one line of data[start:end] starts (with literals:
        where its line's first candidate is), or None."""
        if self.hs is not None:
            pos = start
            for i in self._candidates(data, start, end) or ():
                if i < pos:
                    continue
                ok, _ls, le = self._line_of(data, i, start, end, deadline)
                if ok:
                    return i
                pos = le + 1
            return None
        if self.literals:
            # each literal's next place, found again only once the search has passed it
            nxt = {lit: data.find(lit, start, end) for lit in self.literals}
            pos = start
            while True:
                for lit, at in nxt.items():
                    if 0 <= at < pos:
                        nxt[lit] = data.find(lit, pos, end)
                found = [at for at in nxt.values() if at >= 0]
                if not found:
                    return None
                i = min(found)
                ok, _ls, le = self._line_of(data, i, start, end, deadline)
                if ok:
                    return i
                pos = le + 1
                if time.monotonic() > deadline:
                    raise SearchTimeout
        pos = start
        while pos < end:
            m = self._search(self.fwd, data, pos, end, deadline)
            if m is None:
                return None
            a, b = m.span()
            ls = data.rfind(b"\n", start, a) + 1 if a > start else start
            le = data.find(b"\n", a, end)
            le = end if le < 0 else le
            if b <= le:
                return int(a)
            again = self._search(self.fwd, data, max(ls, start), le, deadline)
            if again is not None:
                return int(again.start())
            pos = le + 1
        return None

    def last(self, data: bytes, start: int, end: int, deadline: float) -> int | None:
        """Where the last line of data[start:end] with a match has one, or None."""
        if self.hs is not None:
            stop = end
            for i in reversed(self._candidates(data, start, end) or ()):
                if i >= stop:
                    continue
                ok, ls, _le = self._line_of(data, i, start, end, deadline)
                if ok:
                    return i
                stop = ls
            return None
        if self.literals:
            prv = {lit: data.rfind(lit, start, end) for lit in self.literals}
            stop = end
            while True:
                for lit, at in prv.items():
                    if at >= 0 and at + len(lit) > stop:
                        prv[lit] = data.rfind(lit, start, stop)
                found = [at for at in prv.values() if at >= 0]
                if not found:
                    return None
                i = max(found)
                ok, ls, _le = self._line_of(data, i, start, end, deadline)
                if ok:
                    return i
                if ls <= start:
                    return None
                stop = ls - 1
                if time.monotonic() > deadline:
                    raise SearchTimeout
        while end > start:
            m = self._search(self.rev, data, start, end, deadline)
            if m is None:
                return None
            a, b = m.span()
            ls = max(start, data.rfind(b"\n", start, a) + 1)
            le = data.find(b"\n", a, end)
            le = end if le < 0 else le
            if b <= le:
                return int(a)
            again = self._search(self.fwd, data, ls, le, deadline)
            if again is not None:
                return int(again.start())
            end = ls - 1 if ls > start else start
        return None

    def spans(self, text: str, *, timeout: float = 0.05) -> list[tuple[int, int]]:
        """The matches in a shown line (none when the pattern is too slow on it)."""
        if self.verify and not any(lit in text for lit in self.text_literals):
            return []
        try:
            return [m.span() for m in self.text.finditer(text, timeout=timeout) if m.end() > m.start()]
        except TimeoutError:
            return []

    @staticmethod
    def _search(pattern: Any, data: bytes, pos: int, end: int, deadline: float) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SearchTimeout
        try:  # the regex module overflows on a huge timeout: no call needs more than a minute
            return pattern.search(data, pos, end, timeout=min(left, 60.0), concurrent=True)
        except TimeoutError:
            raise SearchTimeout from None


def _literal_db(literals: tuple[bytes, ...]) -> Any:
    """A Hyperscan block-mode database matching any of ``literals``, or None without Hyperscan
    (it is an optional, x86-64/aarch64 dependency)."""
    try:
        import hyperscan
    except ImportError:
        return None
    import re

    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=[re.escape(x) for x in literals],
        ids=list(range(len(literals))),
        elements=len(literals),
        flags=[0] * len(literals),
    )
    return db


@dataclass(frozen=True)
class Found:
    """A search's answer: the hit's line, or None with how far it looked.

    ``done``: the search reached the end (or the start) of the log; otherwise the deadline
    passed and ``reached`` is the last line it looked at (going backward: the first), where a
    search that goes on starts."""

    line: int | None
    reached: int
    done: bool


def _open(store: BlobStore, sha256: str, ix: FrameIndex, frame: int) -> Any:
    return store.open_at(sha256, ix.compressed[frame]) if frame else store.open(sha256)


def _candidates(store: BlobStore, sha256: str, ix: FrameIndex, matcher: Matcher) -> Any:
    """Which frames hold lines that can match (a bool per frame, from the blob's filters), or
    None: read every frame (no filters, or a query they cannot narrow)."""
    if not matcher.required or ix.grams_at is None or ix.stored_size is None or ix.total_newlines is None:
        return None
    filt = grams.load(store, sha256, ix.grams_at, ix.stored_size)
    if filt is None or filt.frames != len(ix.offsets):
        return None
    return filt.candidates(matcher.required, [*ix.newlines, ix.total_newlines])


def _narrowed(
    store: BlobStore, sha256: str, ix: FrameIndex, cand: Any, start_line: int
) -> Iterator[tuple[int, bytes, int]]:
    """`_blocks` from ``start_line`` on, over the lines that start in candidate frames only: each
    run of candidate frames is entered at its first frame and read to the end of the line that
    crosses out of its last one; the frames between runs are not read."""
    if cand is None:
        yield from _blocks(store, sha256, ix, start_line)
        return
    n = len(cand)
    f = ix.frame_of_newline(start_line - 1) if start_line > 1 else 0
    nxt = start_line  # the first line not yet read
    while f < n:
        if not cand[f]:
            f += 1
            continue
        g = f
        while g + 1 < n and cand[g + 1]:
            g += 1
        first = max(nxt, ix.newlines[f] + 1)
        stop = ix.offsets[g + 1] if g + 1 < n else None
        for line, data, end in _blocks(store, sha256, ix, first, stop):
            yield line, data, end
            nxt = line + data.count(b"\n", 0, end)
            if end and data[end - 1] != 0x0A:
                nxt += 1
        f = g + 1


def _blocks(
    store: BlobStore, sha256: str, ix: FrameIndex, start_line: int, stop: int | None = None
) -> Iterator[tuple[int, bytes, int]]:
    """From line ``start_line`` on: (number of the line at data[0], data, end) where data[:end]
    is whole lines (a last piece without a newline at the end of the log, or of a giant line).
    With ``stop`` (an offset in the content), the last line is the one holding byte stop - 1."""
    frame = ix.frame_of_newline(start_line - 1) if start_line > 1 else 0
    with _open(store, sha256, ix, frame) as fh:
        data = fh.read(READ)
        newlines = ix.newlines[frame]
        pos = 0
        base = ix.offsets[frame]  # content offset of data[0]
        # to the start of start_line: count newlines a piece at a time
        while newlines < start_line - 1:
            if pos >= len(data):
                base += len(data)
                data, pos = fh.read(READ), 0
                if not data:
                    return
            n = data.count(b"\n", pos)
            if newlines + n < start_line - 1:
                newlines += n
                pos = len(data)
                continue
            for _ in range(start_line - 1 - newlines):
                pos = data.index(b"\n", pos) + 1
            newlines = start_line - 1
        carry = data[pos:]
        base += pos
        line = start_line
        while True:
            chunk = fh.read(READ)
            data = carry + chunk if carry else chunk
            if not chunk:
                if data:
                    yield line, data, len(data)
                return
            end = data.rfind(b"\n") + 1
            if end == 0:
                if len(data) < MAX_CARRY:
                    carry = data
                    continue
                end = len(data)
            if stop is not None and base + end >= stop:
                last = data.find(b"\n", max(0, stop - 1 - base), end)
                if last >= 0:
                    yield line, data, last + 1
                    return
            yield line, data, end
            line += data.count(b"\n", 0, end)
            carry = data[end:]
            base += end


def find_next(
    store: BlobStore,
    sha256: str,
    index: Sequence[Sequence[int]] | None,
    matcher: Matcher,
    *,
    start_line: int,
    deadline: float,
) -> Found:
    """The first line at or after ``start_line`` with a match."""
    ix = FrameIndex.parse(index)
    reached = start_line - 1
    try:
        cand = _candidates(store, sha256, ix, matcher)
        for k, (line, data, end) in enumerate(_narrowed(store, sha256, ix, cand, max(1, start_line))):
            if k and time.monotonic() > deadline:  # one piece at least: every request gets on
                return Found(None, reached, False)
            at = matcher.first(data, 0, end, deadline if k else max(deadline, time.monotonic() + FIRST_PIECE))
            if at is not None:
                n = line + data.count(b"\n", 0, at)
                return Found(n, n, False)
            reached = line + data.count(b"\n", 0, end) - 1
    except SearchTimeout:
        return Found(None, reached, False)
    return Found(None, reached, True)


def find_prev(
    store: BlobStore,
    sha256: str,
    index: Sequence[Sequence[int]] | None,
    matcher: Matcher,
    *,
    before_line: int,
    deadline: float,
) -> Found:
    """The last line before ``before_line`` with a match."""
    ix = FrameIndex.parse(index)
    if before_line <= 1:
        return Found(None, 1, True)
    if not ix.framed or ix.total_lines is None:
        return _prev_from_start(store, sha256, ix, matcher, before_line, deadline)
    before_line = min(before_line, ix.total_lines + 1)
    frame = ix.frame_of_newline(before_line - 1)
    ends = [*ix.offsets[1:], ix.size or 0]
    # the lines of frame f whose start is in it; the piece before its first newline belongs to
    # a line that started in an earlier frame, and is carried back to it
    carry = b""
    reached = before_line
    searched = False  # some line was searched (the first frame may hold none of the asked)
    try:
        need = _needed_backward(ix, _candidates(store, sha256, ix, matcher))
        for f in range(frame, -1, -1):
            if need is not None and not need[f][0]:
                carry = b""  # no frame before needs this one's first line
                if f < frame:
                    reached = ix.newlines[f] + 1 + (1 if f else 0)
                continue
            with _open(store, sha256, ix, f) as fh:
                data = fh.read(ends[f] - ix.offsets[f]) + carry
            limit = len(data)
            if f == frame:  # up to the start of before_line
                limit, k = 0, before_line - 1 - ix.newlines[f]
                for _ in range(k):
                    nl = data.find(b"\n", limit)
                    if nl < 0:  # before_line is past the log's last line, which has no newline
                        limit = len(data)
                        break
                    limit = nl + 1
            head = 0 if f == 0 else data.find(b"\n", 0, limit) + 1
            if f and head == 0:  # no newline: the whole frame is inside one line
                carry = data[:limit][:MAX_CARRY]
                continue
            if head < limit and need is not None and not need[f][1]:
                if f < frame:
                    reached = ix.newlines[f] + 1 + (1 if f else 0)
            elif head < limit:
                until = deadline if searched else max(deadline, time.monotonic() + FIRST_PIECE)
                at = matcher.last(data, head, limit, until)
                if at is not None:
                    n = ix.newlines[f] + 1 + data.count(b"\n", 0, at)
                    return Found(n, n, False)
                searched = True
                reached = ix.newlines[f] + 1 + (1 if f else 0)
            carry = data[:head][:MAX_CARRY]
            if searched and f and time.monotonic() > deadline:
                return Found(None, reached, False)
    except SearchTimeout:
        return Found(None, reached, False)
    return Found(None, 1, True)


def _needed_backward(ix: FrameIndex, cand: Any) -> list[tuple[bool, bool]] | None:
    """Going backward, per frame: (read it, search it). A frame is searched when its lines can
    match, and read also when the frame before it is searched and needs its first line's end
    (or, through frames without a newline, the frame before that)."""
    if cand is None:
        return None
    n = len(cand)
    marks = [*ix.newlines, ix.total_newlines if ix.total_newlines is not None else ix.newlines[-1] + 1]
    has_nl = [marks[f + 1] > marks[f] for f in range(n)]
    out: list[tuple[bool, bool]] = []
    feeds = False  # frame f's head ends a line that a searched frame before it holds
    for f in range(n):
        if f:
            feeds = bool(cand[f - 1]) or (not has_nl[f - 1] and feeds)
        out.append((bool(cand[f]) or feeds, bool(cand[f])))
    return out


def _prev_from_start(
    store: BlobStore, sha256: str, ix: FrameIndex, matcher: Matcher, before_line: int, deadline: float
) -> Found:
    """A blob without an index: read forward from the start, remembering the last hit."""
    best: int | None = None
    try:
        for line, data, end in _blocks(store, sha256, FrameIndex.whole(), 1):
            stop = end
            if line + data.count(b"\n", 0, end) >= before_line:
                stop = 0
                for _ in range(before_line - line):
                    stop = data.index(b"\n", stop) + 1
            at = matcher.last(data, 0, stop, deadline)
            if at is not None:
                best = line + data.count(b"\n", 0, at)
            if stop < end:
                break
    except SearchTimeout:  # a later hit may lie past where it stopped: no answer yet
        return Found(None, before_line, False)
    return Found(best, best or 1, best is None)


@dataclass
class Count:
    """Matching lines counted so far, from line 1 to ``reached`` (the whole log when done)."""

    lines: int = 0
    reached: int = 0
    done: bool = False


def count_more(
    store: BlobStore,
    sha256: str,
    index: Sequence[Sequence[int]] | None,
    matcher: Matcher,
    count: Count,
    *,
    deadline: float,
) -> Count:
    """Go on counting the lines that match, from where ``count`` stopped, until the deadline."""
    if count.done:
        return count
    ix = FrameIndex.parse(index)
    got = Count(count.lines, count.reached, False)
    try:
        cand = _candidates(store, sha256, ix, matcher)
        for k, (line, data, end) in enumerate(_narrowed(store, sha256, ix, cand, count.reached + 1)):
            # checked before a block (the log's last piece is counted) but after the first (a
            # slow read still counts on)
            if k and time.monotonic() > deadline:
                return got
            pos, n = 0, 0
            until = deadline if k else max(deadline, time.monotonic() + FIRST_PIECE)
            while (at := matcher.first(data, pos, end, until)) is not None:
                n += 1
                nl = data.find(b"\n", at, end)
                if nl < 0:
                    break
                pos = nl + 1
            got.lines += n
            got.reached = line + data.count(b"\n", 0, end) - 1
    except SearchTimeout:
        return got
    got.done = True
    return got
