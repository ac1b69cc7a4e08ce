"""The report page's timeline: the verdict, one lane per rank on a shared clock (from its first
to its last line, its last progress line and its first error marked, the named ranks
highlighted; each mark opens that line in the log viewer), the per-rank table, and the loss /
step-time history with the failure marked. Server-rendered SVG, colours from CSS classes, no
script. Pure functions over the stored analysis."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

import markupsafe

from app.render.timeline_table import Row, clock_notes, iso_seconds, rows
from app.web.charts import PLOT_W, _e, _x, framed, metric_chart
from app.web.report_view import file_index, viewer_href

MAX_LANES = 32  # the named ranks always get one
PAD_S = 30.0  # seconds either side of a timeline whose lines all carry one time
LANE_H, LANE_GAP, TOP, BOTTOM = 16, 6, 8, 6  # BOTTOM: below the last label's baseline
GUTTER = 84  # px for the lane names ("▶ rank 31" at 13 px)
# metric names the history charts prefer, in order (loss first, then the step time)
CHART_METRICS = [
    ("loss", ("loss", "lm loss", "lm_loss", "train/loss", "actor/pg_loss", "policy_loss")),
    (
        "step time",
        ("step_time", "elapsed time per iteration (ms)", "time_per_step", "iteration_time", "timing_s/step"),
    ),
    ("grad norm", ("grad_norm", "grad-norm", "actor/grad_norm")),
]


@dataclass
class MetricChart:
    title: str
    svg: markupsafe.Markup
    header: list[str]
    rows: list[list[str]]


@dataclass
class TimelineView:
    verdict: dict[str, Any] | None
    verdicts: list[dict[str, Any]]  # the others
    table: list[Row]
    left_out: int
    lanes: markupsafe.Markup
    charts: list[MetricChart] = field(default_factory=list)
    slowdown: dict[str, Any] | None = None
    stacks: dict[str, Any] | None = None
    collectives: list[dict[str, Any]] = field(default_factory=list)
    clock_notes: list[str] = field(default_factory=list)

    @property
    def show_hosts(self) -> bool:
        return any(r.hosts != "-" for r in self.table)


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%H:%M:%S")


def lanes_svg(resource: dict[str, Any], timeline: dict[str, Any]) -> markupsafe.Markup:
    """One lane per rank on the time axis; empty when the ranks' lines carry no times."""
    named = set((timeline.get("verdict") or {}).get("ranks") or [])
    ranks = [r for r in timeline.get("ranks") or [] if iso_seconds(r.get("last_time")) is not None]
    if len(ranks) < 2:
        return markupsafe.Markup("")
    shown = [r for r in ranks if r["rank"] in named]
    shown += [r for r in ranks if r["rank"] not in named][: max(0, MAX_LANES - len(shown))]
    shown.sort(key=lambda r: r["rank"])
    starts = [t for r in shown if (t := iso_seconds(r.get("first_time"))) is not None]
    ends = [t for r in shown if (t := iso_seconds(r.get("last_time"))) is not None]
    t0, t1 = min(starts or ends), max(ends)
    real_span = t1 - t0
    if real_span < 1:
        # every line at one second: a window around it, or the lanes would span "0 s" from
        # a time to the same time
        t0, t1 = t0 - PAD_S, t1 + PAD_S
    span = t1 - t0
    axis_y = TOP + len(shown) * (LANE_H + LANE_GAP) + 14  # the two ends' times; the span below
    height = axis_y + 18 + BOTTOM
    files = file_index(resource)

    def sx(t: float) -> float:
        return (t - t0) / span * PLOT_W

    def link(line: dict[str, Any] | None) -> str | None:
        if not line:
            return None
        pos = files.get(line.get("file", ""))
        if pos is None and len(files) == 1:
            pos = 0
        return viewer_href(resource["id"], pos, int(line["line"])) if pos is not None else None

    title = "Each rank from its first to its last line; dot: last progress line; red tick: first error"
    plot: list[str] = []
    names: list[str] = []
    for i, r in enumerate(shown):
        y = TOP + i * (LANE_H + LANE_GAP)
        first = iso_seconds(r.get("first_time")) or t0
        last = iso_seconds(r.get("last_time")) or first
        cls = "lane named" if r["rank"] in named else "lane"
        names.append(
            f'<text x="{GUTTER - 8}" y="{y + LANE_H - 3}" text-anchor="end">'
            f"{'▶ ' if r['rank'] in named else ''}rank {r['rank']}</text>"
        )
        label = (
            f"rank {r['rank']}: {_clock(first)} to {_clock(last)}"
            if last - first >= 1
            else f"rank {r['rank']}: its timed lines all at {_clock(first)}"
        )
        if r.get("phase"):
            label += f", last phase {r['phase']}"
        # at least a sliver wide, so that a rank with one time still shows
        width = max(sx(last) - sx(first), PLOT_W * 0.006)
        plot.append(
            f'<rect class="{cls}" x="{_x(sx(first))}" y="{y}" width="{_x(width)}" '
            f'height="{LANE_H}" rx="3"><title>{_e(label)}</title></rect>'
        )
        act = r.get("last_activity") or {}
        ta = iso_seconds(act.get("time"))
        if ta is not None:
            tip = f"last progress at {_clock(ta)}: " + act.get("text", "")[:160]
            mark = (
                f'<circle class="progress" cx="{_x(sx(ta))}" cy="{y + LANE_H / 2}" r="5">'
                f"<title>{_e(tip)}</title></circle>"
            )
            href = link(act)
            plot.append(f'<a href="{_e(href)}">{mark}</a>' if href else mark)
        tf = iso_seconds(r.get("failure_time"))
        if tf is not None:
            plot.append(
                f'<line class="fail" x1="{_x(sx(tf))}" x2="{_x(sx(tf))}" y1="{y - 2}" y2="{y + LANE_H + 2}">'
                f"<title>{_e(f'first error line at {_clock(tf)}')}</title></line>"
            )
    # the times without " UTC" (the caption says so): on a phone both fit side by side
    plot.append(f'<text x="0" y="{axis_y}">{_clock(t0)}</text>')
    plot.append(f'<text x="100%" y="{axis_y}" text-anchor="end">{_clock(t1)}</text>')
    # under the two ends, not between them: on a phone the three would meet
    middle = f"{real_span:.0f} s" if real_span >= 1 else f"all at {_clock(t0 + PAD_S)}"
    plot.append(f'<text x="50%" y="{axis_y + 18}" text-anchor="middle">{_e(middle)}</text>')
    return framed(
        plot=plot,
        gutter=names,
        gutter_w=GUTTER,
        height=height,
        title=title,
        label_id=f"lanes-{resource['id']}",
        cls="lanes",
    )


def _series(points: list[list[Any]]) -> list[tuple[float, float]]:
    """One rank's points (the rank with the most of them), by step."""
    by_rank: dict[Any, list[tuple[float, float]]] = {}
    for p in points:
        step, value, _time, rank = (list(p) + [None] * 4)[:4]
        if step is None or not isinstance(value, (int, float)):
            continue
        by_rank.setdefault(rank, []).append((float(step), float(value)))
    if not by_rank:
        return []
    best = max(by_rank.values(), key=len)
    return sorted(best)


def metric_charts(timeline: dict[str, Any]) -> list[MetricChart]:
    metrics: dict[str, list[list[Any]]] = timeline.get("metrics") or {}
    named = (timeline.get("verdict") or {}).get("ranks") or []
    by_rank = {r["rank"]: r for r in timeline.get("ranks") or []}
    out = []
    for title, names in CHART_METRICS:
        name = next((n for n in names if n in metrics), None)
        if name is None:
            continue
        pts = _series(metrics[name])
        if len(pts) < 3:
            continue
        # the failure: the last step the named rank reached, else the last step logged
        fail = next(
            (by_rank[r]["last_step"] for r in named if by_rank.get(r, {}).get("last_step") is not None), None
        )
        marker = float(fail) if fail is not None else pts[-1][0]
        finite = [v for _s, v in pts if math.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
        svg = metric_chart({name: pts}, title=f"{name} by step, the failure marked", marker_x=marker)
        rows_ = [[f"{s:g}", f"{v:.6g}"] for s, v in pts]
        out.append(MetricChart(f"{title} ({name}: {lo:.4g} to {hi:.4g})", svg, ["step", name], rows_))
    return out


def timeline_view(resource: dict[str, Any]) -> TimelineView | None:
    tl = resource.get("timeline")
    if not tl:
        return None
    verdicts = tl.get("verdicts") or []
    table, left = rows(tl, limit=MAX_LANES)
    charts = metric_charts(tl)
    if not verdicts and len(tl.get("ranks") or []) < 2 and not charts:
        return None
    return TimelineView(
        verdict=tl.get("verdict"),
        verdicts=verdicts[1:],
        table=table if len(tl.get("ranks") or []) >= 2 else [],
        left_out=left,
        lanes=lanes_svg(resource, tl),
        charts=charts,
        slowdown=tl.get("slowdown"),
        stacks=tl.get("stacks"),
        collectives=tl.get("collectives") or [],
        clock_notes=clock_notes(tl),
    )
