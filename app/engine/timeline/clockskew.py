"""Per-host clock offsets, inferred from steps every rank finishes together.

Hosts' clocks drift apart (NTP off, containers with their own time), and a silent-rank verdict
built on "rank 5 stopped 14 min before the others" is wrong if host 5's clock is 14 min behind.
Data-parallel training synchronises every step (the gradient all-reduce), so the line a rank
prints for step N comes at nearly the same true moment on every rank: the median difference of
those times between a host and the reference host (the host of the lowest rank) is that host's
clock offset. Only a consistent, large difference counts: stragglers shift single steps, not
the median, and differences under `MIN_OFFSET_S` are within what a step's own spread explains.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import replace
from typing import Any

MIN_OFFSET_S = 2.0  # below this, a difference is a step's own spread, not a clock
MIN_SHARED_STEPS = 3


def _host(st: Any) -> str | None:
    return next(iter(st.hosts)) if len(st.hosts) == 1 else None


def offsets(step_times: dict[int, dict[int, float]], states: dict[int, Any]) -> dict[str, dict[str, Any]]:
    """{host: {"seconds": offset, "steps": n}} for hosts whose clock is off the reference host's.
    `step_times`: rank -> step -> time (as read, on that rank's host clock)."""
    by_host: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rank, steps in step_times.items():
        host = _host(states[rank]) if rank in states else None
        if host is None:
            continue
        for step, t in steps.items():
            by_host[host][step].append(t)
    if len(by_host) < 2:
        return {}
    ranked = [r for r in sorted(step_times) if r in states and _host(states[r]) in by_host]
    ref = _host(states[ranked[0]])
    assert ref is not None
    ref_steps = {s: statistics.median(ts) for s, ts in by_host[ref].items()}
    found: dict[str, dict[str, Any]] = {}
    for host, host_steps in by_host.items():
        if host == ref:
            continue
        diffs = [statistics.median(ts) - ref_steps[s] for s, ts in host_steps.items() if s in ref_steps]
        if len(diffs) < MIN_SHARED_STEPS:
            continue
        off = statistics.median(diffs)
        # a clock offset is constant: most steps must agree with the median, or it is noise
        agree = sum(1 for d in diffs if abs(d - off) <= max(1.0, abs(off) / 4))
        if abs(off) >= MIN_OFFSET_S and agree * 2 > len(diffs):
            found[host] = {"seconds": round(off, 3), "steps": len(diffs), "reference": ref}
    return found


def _shift_line(line: Any, off: float) -> Any:
    return (
        replace(line, time=round(line.time - off, 6)) if line is not None and line.time is not None else line
    )


def apply(states: dict[int, Any], found: dict[str, dict[str, Any]]) -> None:
    """Move each rank of a skewed host onto the reference host's clock."""
    for st in states.values():
        host = _host(st)
        if host not in found:
            continue
        off = found[host]["seconds"]
        for name in ("first_time", "last_time", "failure_time"):
            value = getattr(st, name)
            if value is not None:
                setattr(st, name, round(value - off, 6))  # µs: keeps whole seconds whole
        st.last_activity = _shift_line(st.last_activity, off)
        st.last_line = _shift_line(st.last_line, off)
