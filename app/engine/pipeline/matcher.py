"""Multi-pattern first pass: which patterns *may* match which lines of a chunk.

Two interchangeable engines answer the same question:

- ``HyperscanMatcher``: every pattern compiled into one Hyperscan database in prefilter mode
  (constructs Hyperscan cannot do exactly are over-approximated, never under-approximated), one
  pass over the raw bytes of a line-aligned chunk; the callback only records (pattern, offset).
- ``RegexMatcher``: the portable fallback; runs each pattern with ``regex`` on each line.

Both may report lines that do not really match. The caller always re-checks each reported
(pattern, line) with ``regex`` on the normalised line, so both engines give the same findings.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import regex

_HS_CACHE_FORMAT = "2"


@dataclass(frozen=True)
class PatternSpec:
    text: str
    ignore_case: bool = False
    single: bool = False  # one report per chunk is enough (facts, framework detectors)


class Matcher(Protocol):
    name: str

    def scan(self, chunk: memoryview, out: list[tuple[int, int]]) -> None:
        """Append (pattern_index, end_offset) for candidate matches in ``chunk``."""


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


class HyperscanMatcher:
    name = "hyperscan"

    def __init__(
        self, patterns: Sequence[PatternSpec], *, cache_dir: Path | None = None, id_offset: int = 0
    ) -> None:
        import hyperscan as hs

        self._offset = id_offset
        self._hs = hs
        key = hashlib.sha256(
            repr(
                (
                    _HS_CACHE_FORMAT,
                    getattr(hs, "__version__", "?"),
                    id_offset,  # the ids are compiled into the database
                    [(p.text, p.ignore_case, p.single) for p in patterns],
                )
            ).encode()
        ).hexdigest()[:24]
        cached = cache_dir / f"hs-{key}.db" if cache_dir else None
        db = None
        if cached is not None and cached.is_file():
            try:
                db = hs.loadb(cached.read_bytes(), hs.HS_MODE_BLOCK)
                db.scratch = hs.Scratch(db)
            except Exception:  # a stale or truncated cache file is rebuilt, never fatal
                db = None
        if db is None:
            db = self._compile(patterns)
            if cached is not None:
                self._store(cached, hs.dumpb(db))
        self._db = db

    def _compile(self, patterns: Sequence[PatternSpec]) -> Any:
        hs = self._hs
        flags = []
        for p in patterns:
            f = hs.HS_FLAG_PREFILTER | hs.HS_FLAG_MULTILINE | hs.HS_FLAG_ALLOWEMPTY
            if p.ignore_case:
                f |= hs.HS_FLAG_CASELESS
            if p.single:
                f |= hs.HS_FLAG_SINGLEMATCH
            flags.append(f)
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        db.compile(
            expressions=[p.text.encode() for p in patterns],
            ids=list(range(self._offset, self._offset + len(patterns))),
            elements=len(patterns),
            flags=flags,
        )
        return db

    @staticmethod
    def _store(path: Path, blob: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(blob)
            tmp.replace(path)  # atomic: concurrent workers never read half a file
        except OSError:
            pass  # a read-only cache only costs start-up time

    def scan(self, chunk: memoryview, out: list[tuple[int, int]]) -> None:
        append = out.append

        def on_match(pid: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append((pid, to))

        self._db.scan(chunk, match_event_handler=on_match)  # type: ignore[type-var]


class RegexMatcher:
    """Portable fallback: every pattern on every line. Correct, ~100x slower."""

    name = "regex"

    def __init__(self, patterns: Sequence[PatternSpec], *, id_offset: int = 0) -> None:
        self._offset = id_offset
        self._compiled = [regex.compile(p.text, regex.IGNORECASE if p.ignore_case else 0) for p in patterns]

    def scan(self, chunk: memoryview, out: list[tuple[int, int]]) -> None:
        data = chunk.tobytes()
        start = 0
        n = len(data)
        while start < n:
            end = data.find(b"\n", start)
            if end < 0:
                end = n
            line = data[start:end].decode("utf-8", errors="replace")
            for segment in line.split("\r"):
                for i, rx in enumerate(self._compiled):
                    try:
                        if rx.search(segment, timeout=0.25):
                            out.append((i + self._offset, end))
                    except TimeoutError:
                        out.append((i + self._offset, end))  # let the verifier decide
            start = end + 1


# fewer lines are tested one by one in Python unless the database is there already
FEW_LINES = 64


class LineFilter:
    """Which of many lines hold any of a few literals (case-sensitive), in one pass over them all.

    The tail checks (signal lines, the timeline's rank attribution) look at the last thousands
    of lines of a log one by one; on a log of metric lines almost none qualify, and testing each
    line for each literal in Python costs more than the scan of the megabyte before it.
    Hyperscan answers for all the lines at once; without it, each line is tested as before.
    `extra`: Hyperscan expressions that also pass a line (a superset is fine: callers re-check),
    with `extra_test`, the same test on one line for the path without Hyperscan. The lines are
    searched joined by newlines: an expression must not match a newline, or a hit would be
    counted on the line after it."""

    def __init__(
        self,
        literals: Sequence[str],
        *,
        extra: Sequence[str] = (),
        extra_test: Callable[[str], bool] | None = None,
    ) -> None:
        self._literals = tuple(literals)
        self._extra_test = extra_test
        self._db: Any = None
        self._lock = threading.Lock()
        self._expressions = [regex.escape(lit) for lit in self._literals] + list(extra)

    def _database(self) -> Any:
        """Compiled on first use with enough lines (~1 ms each: a one-line log's CLI run needs none)."""
        if self._db is not None:
            return self._db
        with self._lock:
            if self._db is None and hyperscan_available() and self._expressions:
                import hyperscan as hs

                expressions = self._expressions
                db = hs.Database(mode=hs.HS_MODE_BLOCK)
                db.compile(
                    expressions=[e.encode() for e in expressions],
                    ids=list(range(len(expressions))),
                    elements=len(expressions),
                    flags=[0] * len(expressions),
                )
                db.scratch = hs.Scratch(db)
                self._db = db
            return self._db

    def lines_with(self, lines: Sequence[str]) -> list[int]:
        """The indices, ascending, of the lines holding at least one of the literals."""
        db = self._db if len(lines) < FEW_LINES else self._database()
        if db is None:
            lits = self._literals
            test = self._extra_test
            return [
                i
                for i, line in enumerate(lines)
                if any(lit in line for lit in lits) or (test is not None and test(line))
            ]
        text = "\n".join(lines)
        data = text.encode("utf-8", "surrogatepass")
        ends: list[int] = []
        with self._lock:  # one scratch space per database: scans take turns (a fraction of a ms)
            db.scan(data, match_event_handler=lambda _id, _from, to, _flags, _ctx: ends.append(to))
        if not ends:
            return []
        # a line's byte offsets only when some line matched (rare on the lines this is for)
        starts = line_starts(lines, ascii=len(data) == len(text))
        out: list[int] = []
        for to in sorted(set(ends)):
            i = bisect.bisect_right(starts, to - 1) - 1  # the line the match's last byte is in
            if not out or out[-1] != i:
                out.append(i)
        return out


def line_starts(lines: Sequence[str], *, ascii: bool) -> list[int]:
    """The byte offset of each line in the lines joined by newlines and encoded as UTF-8.
    `ascii`: the joined text encoded to as many bytes as it has characters (lengths are sizes)."""
    if ascii:
        return list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
    starts: list[int] = []
    pos = 0
    for line in lines:
        starts.append(pos)
        pos += len(line.encode("utf-8", "surrogatepass")) + 1
    return starts


class NullMatcher:
    """No patterns (a library of trigger-only rules): nothing to report, nothing to compile."""

    name = "none"

    def scan(self, chunk: memoryview, out: list[tuple[int, int]]) -> None:
        return None


def build_matcher(
    patterns: Sequence[PatternSpec],
    *,
    engine: str = "auto",
    cache_dir: Path | None = None,
    id_offset: int = 0,
) -> Matcher:
    """Pattern i reports as id ``id_offset + i`` (two matchers can share one entry table)."""
    if engine not in {"auto", "hyperscan", "regex"}:
        raise ValueError(f"unknown engine {engine!r}")
    if not patterns:
        return NullMatcher()
    if engine == "regex" or (engine == "auto" and not hyperscan_available()):
        return RegexMatcher(patterns, id_offset=id_offset)
    return HyperscanMatcher(patterns, cache_dir=cache_dir, id_offset=id_offset)
