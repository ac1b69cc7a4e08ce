"""Fail-slow: a step-time slowdown dated by its onset and traced to the rank (and phase) it comes
from, from the training metrics the scan parsed. Pure: no I/O."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from app.engine.timeline.model import phase_of

STEP_TIME_NAMES = (
    "step_time",
    "time_per_step",
    "elapsed time per iteration (ms)",
    "iteration_time",
    "timing_s/step",
)
SLOWDOWN_FACTOR = 1.8  # after the change point, step time is at least this many times what it was
MIN_POINTS = 12


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def change_point(values: Sequence[float]) -> tuple[int, float] | None:
    """The split that best separates a lower level from a higher one (least squared error of two
    means), with the ratio of the medians after/before; None when there is no clear step up."""
    n = len(values)
    if n < MIN_POINTS:
        return None
    best, best_i = math.inf, -1
    total = sum(values)
    total_sq = sum(v * v for v in values)
    left, left_sq = 0.0, 0.0
    for i in range(1, n):
        left += values[i - 1]
        left_sq += values[i - 1] ** 2
        right, right_sq = total - left, total_sq - left_sq
        sse = (left_sq - left * left / i) + (right_sq - right * right / (n - i))
        if sse < best and 4 <= i <= n - 4:
            best, best_i = sse, i
    if best_i < 0:
        return None
    before, after = _median(values[:best_i]), _median(values[best_i:])
    if before <= 0 or after / before < SLOWDOWN_FACTOR:
        return None
    return best_i, after / before


ONSET_FACTOR = 1.5  # the slowdown starts where the rolling median first exceeds this x baseline


def onset(points: Sequence[tuple[int | None, float]]) -> int | None:
    """The first step whose rolling median (5) is ONSET_FACTOR times the first fifth's median:
    where a gradual slowdown begins (a change point would put it in the middle of the ramp)."""
    values = [v for _s, v in points]
    if len(values) < MIN_POINTS:
        return None
    base = _median(values[: max(3, len(values) // 5)])
    if base <= 0:
        return None
    for i in range(2, len(values) - 2):
        if _median(values[i - 2 : i + 3]) >= ONSET_FACTOR * base:
            return points[i][0]
    return None


def _growth(values: Sequence[float]) -> float:
    n = max(3, len(values) // 5)
    before, after = _median(values[:n]), _median(values[-n:])
    return after / before if before > 0 else 0.0


def fail_slow(scans: Sequence[Any]) -> dict[str, Any] | None:
    """A slowdown of the step time, when it started, and the rank (and phase) it comes from.

    Ranks of a synchronous job wait for each other, so every rank's step time grows when one
    rank slows down. What differs is where the time goes: the slow rank's own phase (its
    rollout, its data loading) grows, the others' grows in the first phase holding a
    collective, where they wait. So the rank whose growing phase comes first in the step (the
    order the log line lists its timings in) is the one that slowed down."""
    step_times: dict[int | None, list[tuple[int | None, float]]] = defaultdict(list)
    parts: dict[tuple[int | None, str], list[float]] = defaultdict(list)
    order: list[str] = []
    name_used = None
    for scan in scans:
        for mp in scan.metrics:
            for name in STEP_TIME_NAMES:
                if name in mp.values and math.isfinite(mp.values[name]):
                    step_times[mp.rank].append((mp.step, mp.values[name]))
                    name_used = name
                    break
            for key, v in mp.values.items():
                if (
                    key.endswith(("_time", "_time_s", "/time"))
                    and key not in STEP_TIME_NAMES
                    and math.isfinite(v)
                ):
                    parts[(mp.rank, key)].append(v)
                    if key not in order:
                        order.append(key)
    if not step_times:
        return None
    grown = []
    for rank, pts in step_times.items():
        cp = change_point([v for _s, v in pts])
        if cp is not None:
            grown.append((cp[1], rank, pts))
    if not grown:
        return None
    grown.sort(key=lambda g: -g[0])
    factor, rank, pts = grown[0]
    start = onset(pts) or pts[change_point([v for _s, v in pts])[0]][0]  # type: ignore[index]
    slowest, phase, why = rank, None, ""
    growing = [
        (order.index(key), -_growth(vals), r, key)
        for (r, key), vals in parts.items()
        if len(vals) >= MIN_POINTS and _growth(vals) >= SLOWDOWN_FACTOR
    ]
    if growing:
        _pos, neg, slowest, key = min(growing)
        phase = phase_of(key.replace("_", " ")) or key
        why = f"; rank {slowest}'s {key} grew x{-neg:.1f} (the others waited for it)"
    summary = f"{name_used} grew x{factor:.1f}, starting at step {start}{why}"
    return {
        "metric": name_used,
        "from_step": start,
        "factor": round(factor, 2),
        "slowest_rank": slowest,
        "phase": phase,
        "summary": summary,
    }
