"""The timeline as a compact per-rank table, shared by the text and Markdown reports (the web
report draws its own from the same rows)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from app.engine.pipeline.lines import parse_context

MAX_ROWS = 12  # the named ranks always show; the others fill up to this many rows
_LOG_HEAD = re.compile(r"^(?:[A-Z]+\s+)?(?:\[rank\d+\]\s+)?(?:[\w.-]+:\s)?")


@dataclass
class Row:
    rank: int
    named: bool  # the lead verdict names this rank
    hosts: str
    phase: str
    step: str
    last_seen: str  # HH:MM:SS of its last line
    gap: str  # how much earlier than the rank that went on longest it went quiet ("" when not)
    last_line: str
    stopped_in: str


def _clock(iso: str | None) -> str:
    return iso[11:19] if iso and len(iso) >= 19 else "-"


def iso_seconds(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _message(text: str) -> str:
    msg = parse_context(text).message.strip()
    return _LOG_HEAD.sub("", msg, count=1) or msg


def rows(timeline: dict[str, Any], *, limit: int = MAX_ROWS) -> tuple[list[Row], int]:
    """The rows to show (named ranks first, then by rank) and how many ranks were left out."""
    verdict = timeline.get("verdict") or {}
    named = set(verdict.get("ranks") or [])
    ranks = timeline.get("ranks") or []
    chosen = [r for r in ranks if r["rank"] in named]
    chosen += [r for r in ranks if r["rank"] not in named][: max(0, limit - len(chosen))]
    chosen.sort(key=lambda r: r["rank"])
    ends = {r["rank"]: t for r in ranks if (t := iso_seconds(r.get("last_time"))) is not None}
    latest = max(ends.values()) if ends else None
    out = []
    for r in chosen:
        act = r.get("last_activity") or {}
        gap = latest - ends[r["rank"]] if latest is not None and r["rank"] in ends else 0.0
        out.append(
            Row(
                rank=r["rank"],
                named=r["rank"] in named,
                hosts=", ".join(r.get("hosts") or []) or "-",
                phase=r.get("phase") or "-",
                step=str(r["last_step"]) if r.get("last_step") is not None else "-",
                last_seen=_clock(r.get("last_time")),
                gap=_span(gap) if gap >= 1 else "",
                last_line=_message(act.get("text", "")) if act else "",
                stopped_in=r.get("stopped_in") or (r.get("error") or "")[:80],
            )
        )
    return out, len(ranks) - len(chosen)


def clock_notes(timeline: dict[str, Any]) -> list[str]:
    """One sentence per host whose clock the timeline corrected, so a reader comparing raw log
    times knows why the table's times differ from them."""
    out = []
    for host, off in sorted((timeline.get("clock_offsets") or {}).items()):
        sec = off["seconds"]
        side = "ahead of" if sec > 0 else "behind"
        out.append(
            f"clock of {host} runs {_span(abs(sec))} {side} {off['reference']} "
            f"(from {off['steps']} steps both finished together); its times are corrected"
        )
    return out


def text_table(timeline: dict[str, Any], *, width: int = 100) -> list[str]:
    """Fixed-width lines; the named ranks are marked with `>`."""
    table, left = rows(timeline)
    if not table:
        return []
    head: tuple[str, ...] = (
        "",
        "rank",
        "host",
        "phase",
        "step",
        "last line",
        "quiet first",
        "stopped in / last progress",
    )
    cells: list[tuple[str, ...]] = [
        (
            ">" if r.named else "",
            str(r.rank),
            r.hosts[:16],
            r.phase,
            r.step,
            r.last_seen,
            r.gap,
            r.stopped_in or r.last_line,
        )
        for r in table
    ]
    if all(r.hosts == "-" for r in table):  # a column of dashes says nothing
        head = head[:2] + head[3:]
        cells = [c[:2] + c[3:] for c in cells]
    widths = [max(len(head[i]), *(len(c[i]) for c in cells)) for i in range(len(head) - 1)]
    used = sum(widths) + 2 * len(widths)
    room = max(30, width - used)

    def line(c: tuple[str, ...]) -> str:
        last = c[-1] if len(c[-1]) <= room else c[-1][: room - 1] + "…"
        return "  ".join(c[i].ljust(widths[i]) for i in range(len(widths))) + "  " + last

    out = [line(head).rstrip()] + [line(c).rstrip() for c in cells]
    if left:
        out.append(f"  … and {left} more rank(s) (all in the JSON report)")
    return out
