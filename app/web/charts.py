"""Server-rendered SVG charts: no chart library, no script. Colours come from CSS classes, so
the dark theme applies; every mark that summarises analyses links to the history view of them.
Each chart also returns its data as rows for a table fallback (screen readers, no SVG)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

import markupsafe

PALETTE = 9  # CSS classes .series-0 .. .series-8 (the last is "other")


@dataclass
class Chart:
    svg: markupsafe.Markup
    legend: list[tuple[str, int, str]]  # (label, series index, history link)
    rows: list[list[str]]  # a table of the same data
    header: list[str]


def _e(text: object) -> str:
    return str(markupsafe.escape(str(text)))


def day_link(base: dict[str, str], day: str, **extra: str) -> str:
    start = dt.date.fromisoformat(day)
    end = start + dt.timedelta(days=1)
    query = {**base, **extra, "since": start.isoformat(), "until": end.isoformat()}
    return "/analyses?" + urlencode({k: v for k, v in query.items() if v})


def stacked_days(
    by_day_class: dict[str, dict[str, int]], days: Sequence[str], *, top: int = 8, title: str
) -> Chart:
    """Bars per day, stacked by class: the `top` classes overall, the rest as "other"."""
    totals: dict[str, int] = {}
    for per in by_day_class.values():
        for cls, n in per.items():
            totals[cls] = totals.get(cls, 0) + n
    ranked = sorted(totals, key=lambda c: (-totals[c], c))
    shown = ranked[:top]
    other = ranked[top:]
    series = shown + (["other"] if other else [])
    width, height, left, bottom, top_pad = 760, 240, 36, 30, 10
    n = max(1, len(days))
    slot = (width - left - 8) / n
    bar = max(2.0, slot * 0.75)
    tallest = max([sum(by_day_class.get(d, {}).values()) for d in days] + [1])
    tick = max(1, -(-tallest // 4))  # whole analyses per grid line
    peak = tick * 4
    scale = (height - bottom - top_pad) / peak
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="group" aria-labelledby="c-{id(series)}">',
        f'<title id="c-{id(series)}">{_e(title)}</title>',
    ]
    for i in range(5):  # grid and y labels
        v = peak * i / 4
        y = height - bottom - v * scale
        parts.append(f'<line class="grid" x1="{left}" x2="{width - 4}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{round(v)}</text>')
    rows: list[list[str]] = []
    for i, day in enumerate(days):
        per = by_day_class.get(day, {})
        x = left + i * slot + (slot - bar) / 2
        y = height - bottom
        for s_i, cls in enumerate(series):
            count = sum(per.get(c, 0) for c in other) if cls == "other" else per.get(cls, 0)
            if not count:
                continue
            h = count * scale
            y -= h
            link = day_link({}, day) if cls == "other" else day_link({"class": cls}, day)
            label = f"{day}: {count} {cls}"
            parts.append(
                f'<a href="{_e(link)}" aria-label="{_e(label)}"><rect class="series-{s_i}" x="{x:.1f}" '
                f'y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}"><title>{_e(label)}</title></rect></a>'
            )
        if n <= 31 and (i % max(1, n // 8) == 0 or i == n - 1):
            tx, ty = x + bar / 2, height - bottom + 16
            parts.append(f'<text x="{tx:.1f}" y="{ty}" text-anchor="middle">{_e(day[5:])}</text>')
        rows.append([day, str(sum(per.values()))] + [str(per.get(c, 0)) for c in shown])
    parts.append(
        f'<line class="axis" x1="{left}" x2="{width - 4}" y1="{height - bottom}" y2="{height - bottom}"/>'
    )
    parts.append("</svg>")
    legend = [
        (cls, i, "/analyses?" + urlencode({"class": cls}) if cls != "other" else "/analyses")
        for i, cls in enumerate(series)
    ]
    return Chart(markupsafe.Markup("".join(parts)), legend, rows, ["day", "total", *shown])


def rate_line(by_day: dict[str, dict[str, int]], days: Sequence[str], *, title: str) -> Chart:
    """The share of analyses with no known root cause, per day (a point per day with data)."""
    width, height, left, bottom, top_pad = 760, 180, 36, 30, 10
    n = max(1, len(days))
    step = (width - left - 16) / max(1, n - 1)
    scale = height - bottom - top_pad
    points = []
    rows: list[list[str]] = []
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="group" aria-labelledby="r-{id(days)}">',
        f'<title id="r-{id(days)}">{_e(title)}</title>',
    ]
    for i in range(5):
        y = height - bottom - scale * i / 4
        parts.append(f'<line class="grid" x1="{left}" x2="{width - 4}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{25 * i}%</text>')
    for i, day in enumerate(days):
        slot = by_day.get(day)
        x = left + 8 + i * step
        if not slot or not slot.get("total"):
            continue
        rate = slot.get("unknown", 0) / slot["total"]
        y = height - bottom - rate * scale
        points.append((x, y))
        label = f"{day}: {rate:.0%} unknown ({slot.get('unknown', 0)} of {slot['total']})"
        parts.append(
            f'<a href="{_e(day_link({"unknown": "1"}, day))}" aria-label="{_e(label)}">'
            f'<circle class="series-0" cx="{x:.1f}" cy="{y:.1f}" r="4">'
            f"<title>{_e(label)}</title></circle></a>"
        )
        rows.append([day, str(slot["total"]), str(slot.get("unknown", 0)), f"{rate:.0%}"])
        if n <= 31 and (i % max(1, n // 8) == 0 or i == n - 1):
            parts.append(
                f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle">{_e(day[5:])}</text>'
            )
    if len(points) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.insert(2, f'<polyline class="line-0" fill="none" points="{path}"/>')
    parts.append("</svg>")
    return Chart(markupsafe.Markup("".join(parts)), [], rows, ["day", "analyses", "unknown", "unknown rate"])


def metric_chart(
    series: dict[str, list[tuple[float, float]]], *, title: str, marker_x: float | None = None
) -> markupsafe.Markup:
    """Lines of metric values over steps (the report's loss / step-time history), each scaled to
    its own range; `marker_x` marks where the job failed."""
    width, height, left, bottom, top_pad = 760, 200, 12, 28, 10
    xs = [x for pts in series.values() for x, _ in pts]
    if not xs:
        return markupsafe.Markup("")
    x0, x1 = min(xs), max(xs)
    span = (x1 - x0) or 1.0
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-labelledby="m-{id(series)}">',
        f'<title id="m-{id(series)}">{_e(title)}</title>',
    ]

    def sx(x: float) -> float:
        return left + (x - x0) / span * (width - left - 16)

    for i, (_name, pts) in enumerate(series.items()):
        finite = [(x, y) for x, y in pts if y == y and abs(y) != float("inf")]
        if not finite:
            continue
        lo, hi = min(y for _, y in finite), max(y for _, y in finite)
        yspan = (hi - lo) or 1.0
        coords = " ".join(
            f"{sx(x):.1f},{height - bottom - (y - lo) / yspan * (height - bottom - top_pad):.1f}"
            for x, y in finite
        )
        parts.append(f'<polyline class="line-{i % PALETTE}" fill="none" points="{coords}"/>')
    if marker_x is not None:
        mx = sx(marker_x)
        parts.append(
            f'<line class="marker" x1="{mx:.1f}" x2="{mx:.1f}" y1="{top_pad}" y2="{height - bottom}"/>'
        )
        parts.append(f'<text x="{mx - 4:.1f}" y="{top_pad + 10}" text-anchor="end">failure</text>')
    parts.append(f'<text x="{left}" y="{height - 8}">step {x0:g}</text>')
    parts.append(f'<text x="{width - 16}" y="{height - 8}" text-anchor="end">step {x1:g}</text>')
    parts.append("</svg>")
    return markupsafe.Markup("".join(parts))
