"""Stack autopsy: py-spy dumps uploaded as files of one analysis (one per rank), merged by where
each rank's main thread stopped; the odd group is named, and ranks stopped in different
collectives are a code desync. Pure: no I/O."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from app.engine.pipeline.tailmarks import marked
from app.engine.timeline.model import Verdict, phase_of

_PYSPY_THREAD = re.compile(
    r'^Thread (?:0x[0-9A-Fa-f]+|\d+) \((?P<state>active|idle)(?:\+gil)?\)(?:: "(?P<name>[^"]*)")?'
)
_PYSPY_FRAME = re.compile(r"^\s{4}(?P<func>\S.*?) \((?P<file>[^()]+?\.py):(?P<line>\d+)\)$")
COLLECTIVES = re.compile(
    r"^(?:all_reduce|all_gather(?:_into_tensor|_object)?|reduce_scatter(?:_tensor)?|broadcast(?:_object_list)?|"
    r"gather(?:_object)?|scatter(?:_object_list)?|barrier|monitored_barrier|all_to_all(?:_single)?|send|recv|"
    r"reduce|wait)$"
)


def main_stack(lines: Sequence[str]) -> list[str] | None:
    """The Python frames (innermost first) of the main thread of a py-spy dump, or None."""
    frames: list[str] = []
    in_main = seen_thread = False
    for text in lines:
        if text.startswith("$ py-spy"):
            seen_thread = False  # the next dump (the file may hold several, e.g. with --native)
        th = _PYSPY_THREAD.match(text)
        if th:
            if frames:
                break  # the main thread's frames are complete
            # the main thread in any state (a rank blocked on a socket or a lock shows as idle);
            # unnamed, it is the first thread py-spy lists
            name = th.group("name")
            in_main = name == "MainThread" or (name is None and not seen_thread)
            seen_thread = True
            continue
        if in_main:
            fm = _PYSPY_FRAME.match(text)
            if fm:
                short = fm.group("file").rsplit("/", 2)
                frames.append(f"{fm.group('func')} ({'/'.join(short[-2:])}:{fm.group('line')})")
    return frames or None


def _leaf_call(frame: str) -> str:
    return frame.split(" (", 1)[0].rsplit(".", 1)[-1]


def stack_autopsy(scans: Sequence[Any]) -> tuple[dict[str, Any] | None, Verdict | None]:
    """Merge the ranks' stacks: groups of ranks stopped at the same place, the odd group named.
    Two groups blocked in different collectives are a code desync."""
    stacks: dict[int, list[str]] = {}
    for i, scan in enumerate(scans):
        if not any(text.startswith("Thread ") for _n, text in marked(scan, "pyspy_thread")):
            continue
        texts = [text for _n, text in scan.tail]
        frames = main_stack(texts)
        if frames:
            rank = scan.rank_hint if scan.rank_hint is not None else i
            stacks.setdefault(rank, frames)
    if len(stacks) < 2:
        return None, None
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for rank, frames in sorted(stacks.items()):
        groups[tuple(frames[:3])].append(rank)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    out_groups: list[dict[str, Any]] = [
        {"ranks": ranks, "where": list(key), "stack": stacks[ranks[0]]} for key, ranks in ordered
    ]
    result: dict[str, Any] = {"ranks": sorted(stacks), "groups": out_groups}
    if len(ordered) == 1:
        result["summary"] = f"all {len(stacks)} ranks stopped at the same place: {ordered[0][0][0]}"
        return result, None
    # the odd group: the smallest; between equal ones, the one without rank 0 (rank 0 usually
    # does the extra work - gathering, saving - that the others skipped)
    smallest = min(len(ranks) for _key, ranks in ordered)
    odd = [(key, ranks) for key, ranks in ordered if len(ranks) == smallest]
    _key, pick = next(((k, r) for k, r in odd if 0 not in r), odd[0])
    parts = "; ".join(f"rank(s) {', '.join(map(str, ranks))} in {key[0]}" for key, ranks in ordered)
    result["odd_ranks"] = pick
    result["summary"] = f"the ranks stopped in different places: {parts}"
    # where they were: the phase the odd ranks' own frames name (else the others')
    phase = phase_of(" ".join(stacks[pick[0]])) or next(
        (ph for _k, r in ordered if (ph := phase_of(" ".join(stacks[r[0]])))), None
    )
    in_collective = any(any(COLLECTIVES.match(_leaf_call(f)) for f in stacks[r[0]][:4]) for _k, r in ordered)
    if in_collective:
        summary = result["summary"] + ": they are not in the same collective, a code desync"
        return result, Verdict(
            "mismatch", summary, pick, "dist.collective_mismatch", phase=phase, trigger="collective_desync"
        )
    return result, Verdict("stacks", result["summary"], pick, phase=phase)
