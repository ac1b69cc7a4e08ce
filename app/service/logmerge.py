"""Several files of one analysis (a log per rank, say) read as one, in time order: the viewer's
"by time" page. Blocking (database and blob store): call it in a thread.

Each line is placed by the clock at its start (`app.engine.timeline.clock.parse_time`, the forms
the timeline reads); a line without one keeps the time of the line before it in its file, so a
traceback stays under its header. Equal times keep the files' order, then line order.

Nothing is read whole: a page starts, in each file, at the first line at or after a time,
found by bisecting the file's line numbers (each probe reads a few lines from the frame holding
them, `app.blobstore.window.read_window`), then reads one window per file and merges them. The
page's links carry a cursor, the next line of each file, so paging on is exact and stateless;
"earlier" reads the windows that end where the page starts and keeps the latest lines.

A file with no clock in its first and last lines cannot be placed: it is named on the page, with
a link to it on its own, and left out of the merge.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.blobstore.window import Line, read_window
from app.db import repo
from app.db.repo.completion import blob_line_index
from app.engine.timeline.clock import parse_time, year_of
from app.errors import AnalysisNotReadyError, NotFoundError, ValidationFailedError
from app.service.access import Principal, check_can_read
from app.service.context import ServiceContext
from app.service.logview import ViewLine, evidence_hits, view_line

PAGE_LINES = 300  # lines of the merged page (from all files together)
PROBE_LINES = 24  # lines read at the head and tail of a file to see whether it has clocks
PROBE_WIDTHS = (24, 400, 4000)  # lines read back from a line for the clock it goes by
MAX_FILES = 16  # files merged on one page: more are listed, to pick from
CONTEXT = 8  # lines of each file shown before the time a page is opened at


@dataclass(frozen=True)
class MergedLine:
    position: int  # the file
    t: float | None  # seconds (its own clock or the line's before it), None before the first
    line: ViewLine


@dataclass(frozen=True)
class MergedFile:
    position: int
    name: str
    clock: bool  # has lines with a clock: merged
    total_lines: int | None


@dataclass(frozen=True)
class MergedView:
    analysis_id: str
    title: str | None
    files: list[MergedFile]  # every file of the analysis
    merged: list[int]  # the positions merged on this page
    lines: list[MergedLine]
    start: dict[int, int]  # each merged file's first line on the page
    next_cursor: dict[int, int] | None  # where the next page starts (None: every file ended)
    at: float | None = None  # the time the page was opened at, when it was
    root: tuple[int, int] | None = None  # the root cause's (file, line), when it is in a merged file
    root_time: float | None = None
    timestamps: bool = field(default=False)


@dataclass(frozen=True)
class _Src:
    position: int
    name: str
    sha256: str
    index: Any


def parse_cursor(value: str | None) -> dict[int, int] | None:
    """``0:120,2:88`` -> {0: 120, 2: 88}: the line each file starts at."""
    if value is None or not value.strip():
        return None
    out: dict[int, int] = {}
    for part in value.split(","):
        m = re.fullmatch(r"\s*(\d{1,4}):(\d{1,12})\s*", part)
        if not m or int(m.group(2)) < 1:
            raise ValidationFailedError(
                f"a cursor is FILE:LINE pairs with lines from 1, like 0:120,1:98; not {value[:60]!r}"
            )
        out[int(m.group(1))] = int(m.group(2))
    return out


def format_cursor(cursor: dict[int, int]) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(cursor.items()))


def parse_positions(value: str | None) -> list[int] | None:
    if value is None or not value.strip():
        return None
    out = []
    for part in value.split(","):
        if not part.strip().isdigit() or len(part.strip()) > 4:
            raise ValidationFailedError(f"files is a list of file numbers like 0,1,3; not {value[:60]!r}")
        out.append(int(part))
    return sorted(set(out))


def parse_at(value: str | None) -> float | None:
    """A time as the page links it (epoch seconds) or as a person types it (ISO 8601, UTC)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if re.fullmatch(r"\d{1,12}(?:\.\d{1,9})?", text):
        return float(text)
    t = parse_time(text)
    if t is None:
        raise ValidationFailedError(
            f"at is a time like 2026-11-27 04:12:00 (UTC) or epoch seconds, not {value[:40]!r}"
        )
    return t


def load_merged(
    ctx: ServiceContext,
    *,
    analysis_id: str,
    principal: Principal,
    positions: Sequence[int] | None = None,
    at: float | None = None,
    cursor: dict[int, int] | None = None,
    before: dict[int, int] | None = None,
    page_lines: int = PAGE_LINES,
) -> MergedView:
    """A page of the analysis' files in time order: from ``cursor`` (each file's next line),
    from the time ``at``, ending just before ``before`` (the page before a cursor), or, with
    none of them, around the root cause when a merged file holds it (else from the start)."""
    aid, title, result, srcs = _sources(ctx, analysis_id=analysis_id, principal=principal)
    wanted = list(positions) if positions else [s.position for s in srcs][:MAX_FILES]
    unknown = [p for p in wanted if not 0 <= p < len(srcs)]
    if unknown:
        raise NotFoundError(
            f"analysis {aid} has {len(srcs)} files (0 to {len(srcs) - 1}); no file {unknown[0]}"
        )
    if len(wanted) > MAX_FILES:
        raise ValidationFailedError(f"at most {MAX_FILES} files are merged on one page; pick fewer")
    year = _year(ctx, [srcs[p] for p in wanted])
    files: list[MergedFile] = []
    clocked: list[_Src] = []
    for s in srcs:
        if s.position not in wanted:
            files.append(MergedFile(s.position, s.name, False, _total(s)))
            continue
        has = _has_clock(ctx, s, year)
        files.append(MergedFile(s.position, s.name, has, _total(s)))
        if has:
            clocked.append(s)
    root, root_time = _root(ctx, result, srcs, clocked, year)
    if before is not None:
        start = _earlier(ctx, clocked, before, year, page_lines)
    elif cursor is not None:
        start = {s.position: cursor.get(s.position, 1) for s in clocked}
    else:
        t = at if at is not None else root_time
        if t is None:
            start = {s.position: 1 for s in clocked}
        else:
            # a cut at the time in every file, then the few lines just before it, from all of
            # them together: the page is one stretch of the merged order, starting before ``t``
            cut = {s.position: _line_at(ctx, s, t, year) for s in clocked}
            start = _earlier(ctx, clocked, cut, year, CONTEXT * max(1, len(clocked)))
    lines, nxt = _merge_forward(ctx, clocked, start, year, page_lines, result, len(srcs))
    return MergedView(
        analysis_id=aid,
        title=title,
        files=files,
        merged=[s.position for s in clocked],
        lines=lines,
        start=start,
        next_cursor=nxt,
        at=at,
        root=root,
        root_time=root_time,
        timestamps=any(m.line.ts for m in lines),
    )


def _sources(
    ctx: ServiceContext, *, analysis_id: str, principal: Principal
) -> tuple[str, str | None, Any, list[_Src]]:
    with ctx.db.read() as s:
        row = repo.get_analysis(s, analysis_id=analysis_id, full=True)
        check_can_read(principal, row)
        files = sorted(row.files, key=lambda f: f.position)
        if not files:
            if row.status == "pending":
                raise AnalysisNotReadyError(
                    f"analysis {row.id} is still running; its log is stored when it ends"
                )
            raise NotFoundError(f"analysis {row.id} has no stored log ({row.status})")
        srcs = [
            _Src(i, f.name, f.blob_sha256, blob_line_index(s, sha256=f.blob_sha256))
            for i, f in enumerate(files)
        ]
        root = (row.result or {}).get("root_cause") or {}
        return row.id, root.get("title"), row.result, srcs


def _window(ctx: ServiceContext, s: _Src, line: int, *, n: int, before: int = 0) -> list[Line]:
    try:
        return read_window(ctx.store, s.sha256, s.index, line=line, max_lines=n, before=before).lines
    except FileNotFoundError:
        raise NotFoundError(
            f"the stored log {s.name!r} ({s.sha256[:12]}…) is missing from the blob store"
        ) from None


def _total(s: _Src) -> int | None:
    try:
        return int(s.index[-1][3]) if s.index else None
    except (TypeError, ValueError, IndexError):
        return None


def _year(ctx: ServiceContext, srcs: Iterable[_Src]) -> int | None:
    """The year the files' ISO dates say, for clocks printed without one (glog, syslog)."""
    for s in srcs:
        for ln in _window(ctx, s, 1, n=PROBE_LINES):
            y = year_of(ln.text)
            if y is not None:
                return y
    return None


def _has_clock(ctx: ServiceContext, s: _Src, year: int | None) -> bool:
    head = _window(ctx, s, 1, n=PROBE_LINES * 4)
    if any(parse_time(ln.text, year_hint=year) is not None for ln in head):
        return True
    total = _total(s)
    if total is None or total <= len(head):
        return False
    tail = _window(ctx, s, total, n=PROBE_LINES * 4, before=PROBE_LINES * 4 - 1)
    return any(parse_time(ln.text, year_hint=year) is not None for ln in tail)


def _probe(ctx: ServiceContext, s: _Src, line: int, year: int | None) -> float | None:
    """The time of ``line`` as the merge orders it: its own clock, else the last one before it."""
    return _time_before(ctx, s, line, year)


def _time_before(ctx: ServiceContext, s: _Src, line: int, year: int | None) -> float | None:
    """The last clock at or before ``line``: the time a line without one keeps (looked for in
    wider and wider windows back: a stretch of metric lines may print none). None when none of
    the few thousand lines before has one: such lines sort first."""
    for n in PROBE_WIDTHS:
        back = _window(ctx, s, line, n=n, before=n - 1)
        for ln in reversed(back):
            if ln.number <= line and (t := parse_time(ln.text, year_hint=year)) is not None:
                return t
        if not back or back[0].number <= 1:
            break
    return None


def _line_at(ctx: ServiceContext, s: _Src, t: float, year: int | None) -> int:
    """The first line whose time is at or after ``t`` (bisected: the file's clock goes forward;
    a line without a clock near it counts as earlier)."""
    lo, hi = 1, _total(s) or _count_lines(ctx, s)
    while lo < hi:
        mid = (lo + hi) // 2
        pt = _probe(ctx, s, mid, year)
        if pt is None or pt < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _count_lines(ctx: ServiceContext, s: _Src) -> int:
    # a blob stored before frame indexes: the reader finds the last line by reading to the end
    w = read_window(ctx.store, s.sha256, s.index, line=1 << 62, max_lines=1)
    return w.last_line or 1


def _timed(lines: list[Line], year: int | None, carry: float | None) -> list[tuple[float | None, Line]]:
    out = []
    t = carry
    for ln in lines:
        own = parse_time(ln.text, year_hint=year)
        if own is not None:
            t = own
        out.append((t, ln))
    return out


def _merge_forward(
    ctx: ServiceContext,
    srcs: list[_Src],
    start: dict[int, int],
    year: int | None,
    page_lines: int,
    result: Any,
    nfiles: int,
) -> tuple[list[MergedLine], dict[int, int] | None]:
    streams: list[list[tuple[float | None, int, int, Line]]] = []
    ended: dict[int, bool] = {}
    for s in srcs:
        first = start.get(s.position, 1)
        w = _window(ctx, s, first, n=page_lines)
        lines = [ln for ln in w if ln.number >= first]
        carry = _time_before(ctx, s, first - 1, year) if first > 1 else None
        streams.append([(t, s.position, ln.number, ln) for t, ln in _timed(lines, year, carry)])
        ended[s.position] = not lines or lines[-1].number >= (_total(s) or 0)

    def key(e: tuple[float | None, int, int, Line]) -> tuple[float, int, int]:
        return (float("-inf") if e[0] is None else e[0], e[1], e[2])

    merged = list(heapq.merge(*streams, key=key))[:page_lines]
    hits = {s.position: evidence_hits(result, s.name, nfiles == 1) for s in srcs}
    out = [MergedLine(p, t, view_line(ln, hits[p], None)) for t, p, _n, ln in merged]
    nxt = dict(start)
    for m in out:
        nxt[m.position] = m.line.number + 1
    # the page ends every file when nothing is left after what it showed
    done = all(
        ended[s.position] and nxt.get(s.position, 1) > (streams[i][-1][2] if streams[i] else 0)
        for i, s in enumerate(srcs)
    )
    return out, None if done else nxt


def _earlier(
    ctx: ServiceContext, srcs: list[_Src], before: dict[int, int], year: int | None, page_lines: int
) -> dict[int, int]:
    """Where the page that ends just before ``before`` starts: each file's lines before its
    cursor, merged, the latest ``page_lines`` kept."""
    streams: list[list[tuple[float | None, int, int]]] = []
    for s in srcs:
        end = before.get(s.position, 1) - 1
        if end < 1:
            streams.append([])
            continue
        w = _window(ctx, s, end, n=page_lines, before=page_lines - 1)
        lines = [ln for ln in w if ln.number <= end]
        first = lines[0].number if lines else 1
        carry = _time_before(ctx, s, first - 1, year) if first > 1 else None
        streams.append([(t, s.position, ln.number) for t, ln in _timed(lines, year, carry)])

    def key(e: tuple[float | None, int, int]) -> tuple[float, int, int]:
        return (float("-inf") if e[0] is None else e[0], e[1], e[2])

    merged = list(heapq.merge(*streams, key=key))[-page_lines:]
    start = {s.position: before.get(s.position, 1) for s in srcs}
    for _t, p, n in reversed(merged):
        start[p] = n
    return start


def _root(
    ctx: ServiceContext, result: Any, srcs: list[_Src], clocked: list[_Src], year: int | None
) -> tuple[tuple[int, int] | None, float | None]:
    """The root cause's first evidence line in a merged file, and its time."""
    root = (result or {}).get("root_cause") or {}
    names = {s.name: s for s in clocked}
    for e in root.get("evidence") or []:
        s = names.get(str(e.get("file"))) or (clocked[0] if len(srcs) == 1 and clocked else None)
        try:
            n = int(e.get("line"))
        except (TypeError, ValueError):
            continue
        if s is not None and n >= 1:
            return (s.position, n), _probe(ctx, s, n, year)
    return None, None


__all__ = [
    "MergedFile",
    "MergedLine",
    "MergedView",
    "format_cursor",
    "load_merged",
    "parse_at",
    "parse_cursor",
    "parse_positions",
]
