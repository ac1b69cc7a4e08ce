"""The stored-log viewer's data: one file of an analysis, a page of its lines, and where the
analysis' findings are in it. Blocking (database and blob store): call it in a thread.

The page comes from `app.blobstore.window.read_window`, which enters the compressed blob at the
frame holding the wanted line (`blobs.line_index`), so a page at the end of a multi-GB log costs
what a page at its start does. The lines are the stored, redacted bytes, decoded as UTF-8 (bad
bytes replaced); ANSI colour codes become spans with classes (never markup from the log: the
template escapes every piece) and other control characters are shown as symbols, so the text is
readable and stays text, and copying it copies no escape codes.

Search (`find`) and the hit count (`count_hits`) read the blob with `app.blobstore.search`, each
within a time budget: a search that runs out says how far it got and the page offers to go on;
the count is kept per (blob, query) in this process and goes on where it stopped on the next
page, so it reads "at least N" until it has seen the whole log.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from app.blobstore.search import Count, Found, Matcher, count_more, find_next, find_prev
from app.blobstore.window import Line, Window, read_window
from app.db import repo
from app.db.repo.completion import blob_line_index
from app.engine import signals
from app.errors import AnalysisNotReadyError, NotFoundError, ValidationFailedError
from app.service.access import Principal, check_can_read
from app.service.context import ServiceContext

MAX_LINE = 1 << 62  # a line or offset asked for beyond this is past any log: the last page
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SGR = re.compile(r"\x1b\[([0-9;]*)m")
# a leading clock: ISO dates (T or space, fractions, zone), syslog's "Mon DD HH:MM:SS", a bare
# HH:MM:SS(.fff); bracketed or not, with the space after it
_TIMESTAMP = re.compile(
    r"\[?(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2}| ?UTC)?"
    r"|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?:\.\d+)?"
    r"|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\]?[ \t]*"
)
_DIGITS = re.compile(r"\d+")
# what reads as an error when no rule said so: one definition, the engine's (its signal lines
# are picked by it too), re-exported here for the viewer's "next error"
ERRORS = signals.ERRORS
ERROR_LITERALS = signals.ERROR_LITERALS
FOLD_MIN = 4  # a run of this many similar lines shows its first and folds the rest
SEARCH_BUDGET = 0.8  # seconds one search may read the log before it says how far it got
COUNT_BUDGET = 0.1  # seconds a page spends going on counting the hits
_counts: OrderedDict[tuple[str, str, bool, bool], Count] = OrderedDict()
_counts_lock = threading.Lock()
_error_matcher: Matcher | None = None


def shown(text: str) -> str:
    """A log line as plain text: colour codes dropped, control characters as symbols (a lone
    CR from a progress bar would otherwise break the line in the browser)."""
    return _controls(_ANSI.sub("", text))


def _controls(text: str) -> str:
    # one character for one: the positions of matches in the plain text stay where they were
    return _CONTROLS.sub(lambda m: "␡" if m.group() == "\x7f" else chr(0x2400 + ord(m.group())), text)


@dataclass(frozen=True)
class Part:
    """A run of a shown line with one look: ANSI classes (``a-fg1 a-b``...) and whether it is
    a search match."""

    text: str
    cls: str = ""
    mark: bool = False


def _sgr(params: str, state: dict[str, int]) -> None:
    codes = [int(c) if c else 0 for c in params.split(";")] if params else [0]
    i = 0
    while i < len(codes):
        c = codes[i]
        if c == 0:
            state.clear()
        elif c in (1, 2, 3, 4):
            state[("b", "dim", "it", "ul")[c - 1]] = 1
        elif c == 22:
            state.pop("b", None)
            state.pop("dim", None)
        elif c in (23, 24):
            state.pop("it" if c == 23 else "ul", None)
        elif 30 <= c <= 37 or 90 <= c <= 97:
            state["fg"] = c - 30 if c < 90 else c - 82
        elif 40 <= c <= 47 or 100 <= c <= 107:
            state["bg"] = c - 40 if c < 100 else c - 92
        elif c in (39, 49):
            state.pop("fg" if c == 39 else "bg", None)
        elif c in (38, 48) and i + 1 < len(codes):
            key = "fg" if c == 38 else "bg"
            if codes[i + 1] == 5 and i + 2 < len(codes):
                n = codes[i + 2]
                if n < 16:  # the 256-colour table's first 16 are the classic ones; others: default
                    state[key] = n
                else:
                    state.pop(key, None)
                i += 2
            elif codes[i + 1] == 2:  # true colour: shown in the default colour, not guessed
                state.pop(key, None)
                i += 4
        i += 1


def _classes(state: dict[str, int]) -> str:
    out = [f"a-{k}{v}" if k in ("fg", "bg") else f"a-{k}" for k, v in sorted(state.items())]
    return " ".join(out)


def ansi_parts(text: str) -> list[Part]:
    """The line's text in runs of one colour: SGR codes set the classes, other escapes are
    dropped, control characters shown as symbols. No part holds an escape character."""
    if "\x1b" not in text:
        return [Part(_controls(text))] if text else []
    parts: list[Part] = []
    state: dict[str, int] = {}
    pos = 0
    for m in _ANSI.finditer(text):
        if m.start() > pos:
            parts.append(Part(_controls(text[pos : m.start()]), _classes(state)))
        sgr = _SGR.fullmatch(m.group())
        if sgr:
            _sgr(sgr.group(1), state)
        pos = m.end()
    if pos < len(text):
        parts.append(Part(_controls(text[pos:]), _classes(state)))
    return parts


def cut_parts(parts: list[Part], at: int) -> tuple[list[Part], list[Part]]:
    """The parts before and after plain-text position ``at``."""
    head: list[Part] = []
    tail: list[Part] = []
    pos = 0
    for p in parts:
        end = pos + len(p.text)
        if end <= at:
            head.append(p)
        elif pos >= at:
            tail.append(p)
        else:
            head.append(Part(p.text[: at - pos], p.cls, p.mark))
            tail.append(Part(p.text[at - pos :], p.cls, p.mark))
        pos = end
    return head, tail


def mark_parts(parts: list[Part], spans: list[tuple[int, int]]) -> list[Part]:
    """The parts with the plain-text ``spans`` (sorted, not overlapping) marked."""
    if not spans:
        return parts
    out: list[Part] = []
    rest, done = parts, 0
    for a, b in spans:
        before, rest = cut_parts(rest, a - done)
        inside, rest = cut_parts(rest, b - a)
        out += before
        out += [Part(p.text, p.cls, True) for p in inside]
        done = b
    return out + rest


def fold_key(text: str) -> str:
    """Lines alike but for their numbers (a step counter, a clock) fold together."""
    return _DIGITS.sub("0", text)


@dataclass(frozen=True)
class Hit:
    """A finding with evidence on a line."""

    title: str
    rule_id: str
    role: str  # root_cause | symptom | related


@dataclass(frozen=True)
class ViewLine:
    number: int
    offset: int
    text: str  # the plain text (no ANSI codes)
    cut: int
    hits: list[Hit] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)  # the text after the timestamp, coloured
    ts: list[Part] = field(default_factory=list)  # a leading timestamp, when there is one
    marked: bool = False  # the search matches this line
    error: bool = False  # the line reads as an error


@dataclass(frozen=True)
class Block:
    """Lines shown as they are, or a run of lines like the one before them, folded."""

    lines: list[ViewLine]
    folded: bool = False


@dataclass(frozen=True)
class Query:
    """A search as the page asks it: the text, regex or plain, case-sensitive or not."""

    q: str
    regex: bool = False
    case: bool = False

    @property
    def key(self) -> tuple[str, bool, bool]:
        return (self.q, self.regex, self.case)


@dataclass(frozen=True)
class HitCount:
    lines: int
    reached: int  # counted from line 1 to here
    done: bool


@dataclass(frozen=True)
class LogView:
    analysis_id: str
    position: int
    name: str
    size: int
    files: list[str]  # every file of the analysis, by position
    title: str | None  # the root cause's title
    window: Window
    lines: list[ViewLine]
    hit_lines: list[int]  # where findings are in this file, in order
    prev_hit: int | None  # the finding line before this page (or the asked line)
    next_hit: int | None  # ... and after it
    blocks: list[Block] = field(default_factory=list)
    timestamps: bool = False  # some line on the page starts with a clock
    count: HitCount | None = None  # lines the search matches

    @property
    def total_lines(self) -> int | None:
        return self.window.total_lines


def compile_query(query: Query) -> Matcher:
    """The query compiled; a pattern the regex module refuses, or one that matches every line,
    is a `ValidationFailedError` that says why."""
    if len(query.q) > 1000:
        raise ValidationFailedError("the search is over 1,000 characters long")
    try:
        return Matcher.compile(query.q, is_regex=query.regex, case=query.case)
    except ValueError as exc:
        what = "regular expression" if query.regex else "search"
        raise ValidationFailedError(f"the {what} {query.q[:80]!r} cannot be used: {exc}") from None


def error_matcher() -> Matcher:
    global _error_matcher
    if _error_matcher is None:
        _error_matcher = Matcher.prefiltered(ERRORS, ERROR_LITERALS)
    return _error_matcher


def parse_number(value: str | None, what: str, *, least: int) -> int | None:
    """A query's line or offset: blank is None; else a whole number of at least ``least`` (one
    past any log is fine: the reader clamps it to the last page)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if not re.fullmatch(r"\d{1,30}", text) or int(text) < least:
        raise ValidationFailedError(
            f"{what} must be a whole number from {least} on, not {value[:40]!r}"
            + (" (lines are numbered from 1)" if what == "line" else "")
        )
    return min(int(text), MAX_LINE)


def evidence_hits(result: dict[str, Any] | None, name: str, only_file: bool) -> dict[int, list[Hit]]:
    """The lines of file ``name`` that findings cite as evidence (the root cause first)."""
    hits: dict[int, list[Hit]] = {}
    findings = list((result or {}).get("findings") or [])
    findings.sort(key=lambda f: f.get("role") != "root_cause")
    for f in findings:
        hit = Hit(
            str(f.get("title") or f.get("rule_id") or "finding"),
            str(f.get("rule_id") or ""),
            str(f.get("role") or ""),
        )
        for e in f.get("evidence") or []:
            if e.get("file") != name and not only_file:
                continue
            try:
                n = int(e.get("line"))
            except (TypeError, ValueError):
                continue
            if n >= 1 and hit not in hits.setdefault(n, []):
                hits[n].append(hit)
    return hits


@dataclass(frozen=True)
class _File:
    analysis_id: str
    name: str
    size: int
    sha256: str
    index: Any
    result: dict[str, Any] | None
    names: list[str]


def _file(ctx: ServiceContext, *, analysis_id: str, position: int, principal: Principal) -> _File:
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
        if not 0 <= position < len(files):
            raise NotFoundError(
                f"analysis {row.id} has {len(files)} file{'s' if len(files) > 1 else ''} "
                f"(0 to {len(files) - 1}); there is no file {position}"
            )
        f = files[position]
        index = blob_line_index(s, sha256=f.blob_sha256)
        return _File(row.id, f.name, f.size, f.blob_sha256, index, row.result, [x.name for x in files])


def _missing(f: _File) -> NotFoundError:
    return NotFoundError(
        f"analysis {f.analysis_id}: the stored log {f.name!r} ({f.sha256[:12]}…) "
        "is missing from the blob store"
    )


def find(
    ctx: ServiceContext,
    *,
    analysis_id: str,
    position: int,
    principal: Principal,
    matcher: Matcher,
    from_line: int,
    forward: bool,
    budget: float | None = None,
) -> Found:
    """The next line after ``from_line`` (or the previous one before it) that ``matcher``
    matches, searched for at most ``budget`` seconds (then ``Found.reached`` says how far)."""
    f = _file(ctx, analysis_id=analysis_id, position=position, principal=principal)
    deadline = time.monotonic() + (SEARCH_BUDGET if budget is None else budget)
    try:
        if forward:
            return find_next(
                ctx.store, f.sha256, f.index, matcher, start_line=from_line + 1, deadline=deadline
            )
        return find_prev(ctx.store, f.sha256, f.index, matcher, before_line=from_line, deadline=deadline)
    except FileNotFoundError:
        raise _missing(f) from None


def search(
    ctx: ServiceContext,
    *,
    analysis_id: str,
    position: int,
    principal: Principal,
    query: Query | None,
    from_line: int,
    forward: bool,
) -> Found:
    """`find` for the REST API: the query (None: lines that read as errors) compiled once the
    principal is known to be allowed to read the log, so a refused read never says whether a
    pattern was good."""
    _file(ctx, analysis_id=analysis_id, position=position, principal=principal)
    matcher = error_matcher() if query is None else compile_query(query)
    return find(
        ctx,
        analysis_id=analysis_id,
        position=position,
        principal=principal,
        matcher=matcher,
        from_line=from_line,
        forward=forward,
    )


def count_hits(
    ctx: ServiceContext, sha256: str, index: Any, query: Query, matcher: Matcher, *, budget: float
) -> HitCount:
    """The lines the query matches, counted on from where the last page of this (blob, query)
    stopped, for at most ``budget`` seconds."""
    key = (sha256, *query.key)
    with _counts_lock:
        count = _counts.get(key) or Count()
    if not count.done:
        count = count_more(ctx.store, sha256, index, matcher, count, deadline=time.monotonic() + budget)
        with _counts_lock:
            old = _counts.get(key)
            if old is None or old.reached < count.reached or count.done:
                _counts[key] = count
            _counts.move_to_end(key)
            while len(_counts) > 256:
                _counts.popitem(last=False)
    return HitCount(count.lines, count.reached, count.done)


def load_view(
    ctx: ServiceContext,
    *,
    analysis_id: str,
    position: int,
    principal: Principal,
    line: int | None = None,
    offset: int | None = None,
    max_lines: int | None = None,
    query: Query | None = None,
    fold: bool = True,
    count_budget: float | None = None,
) -> LogView:
    """A page of file ``position`` of an analysis the principal may read (the API's rule);
    with a query, its matches marked and the lines it matches counted (see `count_hits`)."""
    f = _file(ctx, analysis_id=analysis_id, position=position, principal=principal)
    aid, name, result = f.analysis_id, f.name, f.result
    hits = evidence_hits(result, name, len(f.names) == 1)
    kwargs: dict[str, Any] = {} if max_lines is None else {"max_lines": max_lines}
    matcher = compile_query(query) if query is not None else None
    try:
        window = read_window(ctx.store, f.sha256, f.index, line=line, offset=offset, **kwargs)
        count = (
            count_hits(
                ctx,
                f.sha256,
                f.index,
                query,
                matcher,
                budget=COUNT_BUDGET if count_budget is None else count_budget,
            )
            if query is not None and matcher is not None
            else None
        )
    except FileNotFoundError:
        raise _missing(f) from None
    hit_lines = sorted(hits)
    if window.target is not None:  # around the line asked for
        prev_hit = _before(hit_lines, window.target)
        next_hit = _after(hit_lines, window.target)
    else:  # a page: the finding above it, or the first one on it or below
        prev_hit = _before(hit_lines, window.first_line)
        next_hit = _after(hit_lines, window.first_line - 1)
    root = (result or {}).get("root_cause") or {}
    lines = [view_line(ln, hits, matcher) for ln in window.lines]
    return LogView(
        analysis_id=aid,
        position=position,
        name=name,
        size=f.size,
        files=f.names,
        title=root.get("title"),
        window=window,
        lines=lines,
        hit_lines=hit_lines,
        prev_hit=prev_hit,
        next_hit=next_hit,
        blocks=fold_lines(lines, keep={window.target}) if fold else [Block(lines)],
        timestamps=any(ln.ts for ln in lines),
        count=count,
    )


def fold_lines(lines: list[ViewLine], *, keep: set[int | None]) -> list[Block]:
    """Runs of at least FOLD_MIN lines alike but for their numbers: the first shown, the rest
    folded. A line a finding, the search or the link points at is never folded (nor folds)."""
    blocks: list[Block] = []
    run: list[ViewLine] = []

    def close() -> None:
        if len(run) >= FOLD_MIN:
            blocks.append(Block([run[0]]))
            blocks.append(Block(run[1:], folded=True))
        elif run:
            blocks.append(Block(list(run)))
        run.clear()

    run_key = ""
    for ln in lines:
        if ln.hits or ln.marked or ln.number in keep:
            close()
            blocks.append(Block([ln]))
            continue
        key = fold_key("".join(p.text for p in ln.parts))  # the text after the clock
        if run and key != run_key:
            close()
        run_key = key
        run.append(ln)
    close()
    # neighbouring plain blocks read as one table
    merged: list[Block] = []
    for b in blocks:
        if merged and not b.folded and not merged[-1].folded:
            merged[-1] = Block(merged[-1].lines + b.lines)
        else:
            merged.append(b)
    return merged


def _before(lines: list[int], n: int) -> int | None:
    i = bisect.bisect_left(lines, n)
    return lines[i - 1] if i > 0 else None


def _after(lines: list[int], n: int) -> int | None:
    i = bisect.bisect_right(lines, n)
    return lines[i] if i < len(lines) else None


def view_line(ln: Line, hits: dict[int, list[Hit]], matcher: Matcher | None) -> ViewLine:
    parts = ansi_parts(ln.text)
    plain = "".join(p.text for p in parts)
    spans = matcher.spans(plain) if matcher is not None else []
    parts = mark_parts(parts, spans)
    m = _TIMESTAMP.match(plain)
    ts: list[Part] = []
    if m and m.end() < len(plain):
        ts, parts = cut_parts(parts, m.end())
    error = bool(error_matcher().spans(plain))
    return ViewLine(
        ln.number, ln.offset, plain, ln.cut, hits.get(ln.number, []), parts, ts, bool(spans), error
    )
