"""The stored-log viewer's data: one file of an analysis, a page of its lines, and where the
analysis' findings are in it. Blocking (database and blob store): call it in a thread.

The page comes from `app.blobstore.window.read_window`, which enters the compressed blob at the
frame holding the wanted line (`blobs.line_index`), so a page at the end of a multi-GB log costs
what a page at its start does. The lines are the stored, redacted bytes, decoded as UTF-8 (bad
bytes replaced); ANSI colour codes are dropped and other control characters shown as symbols, so
the text is readable and stays text (the template escapes it).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

from app.blobstore.window import Line, Window, read_window
from app.db import repo
from app.db.repo.completion import blob_line_index
from app.errors import AnalysisNotReadyError, NotFoundError, ValidationFailedError
from app.service.access import Principal, check_can_read
from app.service.context import ServiceContext

MAX_LINE = 1 << 62  # a line or offset asked for beyond this is past any log: the last page
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def shown(text: str) -> str:
    """A log line as the viewer shows it: colour codes dropped, control characters as symbols
    (a lone CR from a progress bar would otherwise break the line in the browser)."""
    text = _ANSI.sub("", text)
    return _CONTROLS.sub(lambda m: "␡" if m.group() == "\x7f" else chr(0x2400 + ord(m.group())), text)


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
    text: str
    cut: int
    hits: list[Hit] = field(default_factory=list)


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

    @property
    def total_lines(self) -> int | None:
        return self.window.total_lines


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


def load_view(
    ctx: ServiceContext,
    *,
    analysis_id: str,
    position: int,
    principal: Principal,
    line: int | None = None,
    offset: int | None = None,
    max_lines: int | None = None,
) -> LogView:
    """A page of file ``position`` of an analysis the principal may read (the API's rule)."""
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
        result = row.result
        aid, name, size, sha = row.id, f.name, f.size, f.blob_sha256
        names = [x.name for x in files]
    hits = evidence_hits(result, name, len(files) == 1)
    kwargs: dict[str, Any] = {} if max_lines is None else {"max_lines": max_lines}
    try:
        window = read_window(ctx.store, sha, index, line=line, offset=offset, **kwargs)
    except FileNotFoundError:
        raise NotFoundError(
            f"analysis {aid}: the stored log {name!r} ({sha[:12]}…) is missing from the blob store"
        ) from None
    hit_lines = sorted(hits)
    if window.target is not None:  # around the line asked for
        prev_hit = _before(hit_lines, window.target)
        next_hit = _after(hit_lines, window.target)
    else:  # a page: the finding above it, or the first one on it or below
        prev_hit = _before(hit_lines, window.first_line)
        next_hit = _after(hit_lines, window.first_line - 1)
    root = (result or {}).get("root_cause") or {}
    return LogView(
        analysis_id=aid,
        position=position,
        name=name,
        size=size,
        files=names,
        title=root.get("title"),
        window=window,
        lines=[_view_line(ln, hits) for ln in window.lines],
        hit_lines=hit_lines,
        prev_hit=prev_hit,
        next_hit=next_hit,
    )


def _before(lines: list[int], n: int) -> int | None:
    i = bisect.bisect_left(lines, n)
    return lines[i - 1] if i > 0 else None


def _after(lines: list[int], n: int) -> int | None:
    i = bisect.bisect_right(lines, n)
    return lines[i] if i < len(lines) else None


def _view_line(ln: Line, hits: dict[int, list[Hit]]) -> ViewLine:
    return ViewLine(ln.number, ln.offset, shown(ln.text), ln.cut, hits.get(ln.number, []))
