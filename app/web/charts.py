"""Server-rendered SVG charts: no chart library, no script. Colours come from CSS classes, so
the dark theme applies; every mark that summarises analyses links to the history view of them.
Each chart also returns its data as rows for a table fallback (screen readers, no SVG).

A chart is drawn in CSS pixels, not in a viewBox scaled to its box: scaled, its text shrank
with the chart (6 px on a laptop, 4 px on a phone). Heights and text are pixels; horizontal
positions are percentages of the plot's width (`_x`); lines, whose points cannot be
percentages, sit in a nested SVG stretched to the plot with strokes that do not scale. The
y labels get a gutter of their own (a second SVG beside the plot) so they never meet it."""

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


PLOT_W = 1000.0  # user units across a plot: a position u is drawn at u / PLOT_W of its width


def _x(u: float) -> str:
    return f"{u / PLOT_W * 100:.2f}%"


def framed(
    *,
    plot: Sequence[str],
    gutter: Sequence[str] = (),
    gutter_w: int = 0,
    height: int,
    title: str,
    label_id: str,
    role: str = "group",
    cls: str = "",
) -> markupsafe.Markup:
    """The chart's markup: a gutter SVG for the y labels (decoration: the table has the data)
    and the plot SVG, side by side in a grid (app.css `.chart`)."""
    out = [f'<div class="chart{" " + cls if cls else ""}">']
    if gutter_w:
        out.append(f'<svg class="chart-y" width="{gutter_w}" height="{height}" aria-hidden="true">')
        out += gutter
        out.append("</svg>")
    out.append(
        f'<svg class="chart-plot" width="100%" height="{height}" role="{role}" aria-labelledby="{label_id}">'
        f'<title id="{label_id}">{_e(title)}</title>'
    )
    out += plot
    out.append("</svg></div>")
    return markupsafe.Markup("".join(out))


def polyline(points: Sequence[tuple[float, float]], cls: str, height: int) -> str:
    """A line through (u, y px) points, stretched across the plot's width."""
    path = " ".join(f"{u:.1f},{y:.1f}" for u, y in points)
    return (
        f'<svg width="100%" height="{height}" viewBox="0 0 {PLOT_W:.0f} {height}" preserveAspectRatio="none" '
        f'aria-hidden="true"><polyline class="{cls}" fill="none" vector-effect="non-scaling-stroke" '
        f'points="{path}"/></svg>'
    )


def x_label(u: float, y: float, text: str, *, cls: str = "") -> str:
    """A label under the axis at u, anchored so that it stays inside the plot at either end."""
    anchor = "start" if u < PLOT_W * 0.06 else "end" if u > PLOT_W * 0.94 else "middle"
    klass = f' class="{cls}"' if cls else ""
    return f'<text{klass} x="{_x(u)}" y="{y}" text-anchor="{anchor}">{_e(text)}</text>'


def day_ticks(n: int) -> dict[int, str]:
    """Which days get a label (index -> "" or "minor"): about 8 across a laptop, every other one
    of them ("minor", hidden by app.css) on a phone; the last day always, without a neighbour
    close enough to overlap it."""
    step = max(1, n // 8)
    out: dict[int, str] = {}
    for i in range(0, n, step):
        if i != n - 1 and n - 1 - i < max(1, step) * 0.75:
            continue
        out[i] = "" if (i // step) % 2 == 0 else "minor"
    out[n - 1] = ""
    # on a phone the last day and the last major label must not meet either
    majors = sorted(i for i, c in out.items() if not c and i != n - 1)
    if n > 8 and majors and n - 1 - majors[-1] < 1.5 * step:
        out[majors[-1]] = "minor"
    return out


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
    height, bottom, top_pad, gutter = 240, 30, 10, 40
    n = max(1, len(days))
    slot = PLOT_W / n
    bar = slot * 0.75
    tallest = max([sum(by_day_class.get(d, {}).values()) for d in days] + [1])
    tick = max(1, -(-tallest // 4))  # whole analyses per grid line
    peak = tick * 4
    scale = (height - bottom - top_pad) / peak
    plot: list[str] = []
    ys: list[str] = []
    for i in range(5):  # grid and y labels
        v = peak * i / 4
        y = height - bottom - v * scale
        plot.append(f'<line class="grid" x1="0" x2="100%" y1="{y:.1f}" y2="{y:.1f}"/>')
        ys.append(f'<text x="{gutter - 6}" y="{y + 4:.1f}" text-anchor="end">{round(v)}</text>')
    rows: list[list[str]] = []
    ticks = day_ticks(len(days)) if days else {}
    for i, day in enumerate(days):
        per = by_day_class.get(day, {})
        x = i * slot + (slot - bar) / 2
        y = height - bottom
        for s_i, cls in enumerate(series):
            count = sum(per.get(c, 0) for c in other) if cls == "other" else per.get(cls, 0)
            if not count:
                continue
            h = count * scale
            y -= h
            link = day_link({}, day) if cls == "other" else day_link({"class": cls}, day)
            label = f"{day}: {count} {cls}"
            plot.append(
                f'<a href="{_e(link)}" aria-label="{_e(label)}"><rect class="series-{s_i}" x="{_x(x)}" '
                f'y="{y:.1f}" width="{_x(bar)}" height="{h:.1f}"><title>{_e(label)}</title></rect></a>'
            )
        if i in ticks:
            plot.append(x_label(x + bar / 2, height - bottom + 18, day[5:], cls=ticks[i]))
        rows.append([day, str(sum(per.values()))] + [str(per.get(c, 0)) for c in shown])
    plot.append(f'<line class="axis" x1="0" x2="100%" y1="{height - bottom}" y2="{height - bottom}"/>')
    legend = [
        (cls, i, "/analyses?" + urlencode({"class": cls}) if cls != "other" else "/analyses")
        for i, cls in enumerate(series)
    ]
    svg = framed(
        plot=plot, gutter=ys, gutter_w=gutter, height=height, title=title, label_id=f"c-{id(series)}"
    )
    return Chart(svg, legend, rows, ["day", "total", *shown])


def rate_line(by_day: dict[str, dict[str, int]], days: Sequence[str], *, title: str) -> Chart:
    """The share of analyses with no known root cause, per day (a point per day with data)."""
    height, bottom, top_pad, gutter, pad = 180, 30, 10, 44, 12.0
    n = max(1, len(days))
    step = (PLOT_W - 2 * pad) / max(1, n - 1)
    scale = height - bottom - top_pad
    points: list[tuple[float, float]] = []
    rows: list[list[str]] = []
    plot: list[str] = []
    ys: list[str] = []
    for i in range(5):
        y = height - bottom - scale * i / 4
        plot.append(f'<line class="grid" x1="0" x2="100%" y1="{y:.1f}" y2="{y:.1f}"/>')
        ys.append(f'<text x="{gutter - 6}" y="{y + 4:.1f}" text-anchor="end">{25 * i}%</text>')
    marks: list[str] = []
    ticks = day_ticks(len(days)) if days else {}
    for i, day in enumerate(days):
        slot = by_day.get(day)
        x = pad + i * step
        if i in ticks:
            marks.append(x_label(x, height - bottom + 18, day[5:], cls=ticks[i]))
        if not slot or not slot.get("total"):
            continue
        rate = slot.get("unknown", 0) / slot["total"]
        y = height - bottom - rate * scale
        points.append((x, y))
        label = f"{day}: {rate:.0%} unknown ({slot.get('unknown', 0)} of {slot['total']})"
        marks.append(
            f'<a href="{_e(day_link({"unknown": "1"}, day))}" aria-label="{_e(label)}">'
            f'<circle class="series-0" cx="{_x(x)}" cy="{y:.1f}" r="4">'
            f"<title>{_e(label)}</title></circle></a>"
        )
        rows.append([day, str(slot["total"]), str(slot.get("unknown", 0)), f"{rate:.0%}"])
    if len(points) > 1:
        plot.append(polyline(points, "line-0", height))
    plot += marks
    svg = framed(plot=plot, gutter=ys, gutter_w=gutter, height=height, title=title, label_id=f"r-{id(days)}")
    return Chart(svg, [], rows, ["day", "analyses", "unknown", "unknown rate"])


def metric_chart(
    series: dict[str, list[tuple[float, float]]], *, title: str, marker_x: float | None = None
) -> markupsafe.Markup:
    """Lines of metric values over steps (the report's loss / step-time history), each scaled to
    its own range; `marker_x` marks where the job failed."""
    height, bottom, top_pad = 200, 28, 10
    xs = [x for pts in series.values() for x, _ in pts]
    if not xs:
        return markupsafe.Markup("")
    x0, x1 = min(xs), max(xs)
    span = (x1 - x0) or 1.0
    plot: list[str] = []

    def sx(x: float) -> float:
        return (x - x0) / span * PLOT_W

    for i, (_name, pts) in enumerate(series.items()):
        finite = [(x, y) for x, y in pts if y == y and abs(y) != float("inf")]
        if not finite:
            continue
        lo, hi = min(y for _, y in finite), max(y for _, y in finite)
        yspan = (hi - lo) or 1.0
        coords = [
            (sx(x), height - bottom - (y - lo) / yspan * (height - bottom - top_pad)) for x, y in finite
        ]
        plot.append(polyline(coords, f"line-{i % PALETTE}", height))
    if marker_x is not None:
        mx = sx(marker_x)
        plot.append(
            f'<line class="marker" x1="{_x(mx)}" x2="{_x(mx)}" y1="{top_pad}" y2="{height - bottom}"/>'
        )
        # the word on the side of the marker that has room
        anchor, dx = ("start", 4) if mx < PLOT_W * 0.25 else ("end", -4)
        plot.append(f'<text x="{_x(mx)}" dx="{dx}" y="{top_pad + 12}" text-anchor="{anchor}">failure</text>')
    plot.append(f'<text x="0" y="{height - 8}">step {x0:g}</text>')
    plot.append(f'<text x="100%" y="{height - 8}" text-anchor="end">step {x1:g}</text>')
    return framed(plot=plot, height=height, title=title, label_id=f"m-{id(series)}", role="img")
