"""The timeline's data: phases, lines, collective rows, verdicts, rank states (app.engine.timeline.builder
builds them). Pure: no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from app.engine.timeline.clock import iso
from app.engine.timeline.forensics import CallSite, Progress
from app.engine.timeline.gate import gated

# --- phases and noise --------------------------------------------------------------------------

PHASES: list[tuple[str, re.Pattern[str]]] = [
    (
        "checkpoint",
        re.compile(r"checkpoint|\bsav(?:e|ing)\b|torch\.save|dist_checkpointing|save_state_dict", re.I),
    ),
    ("eval", re.compile(r"\beval(?:uat\w*)?\b|\bvalidat\w*|\btest(?:ing)? set\b", re.I)),
    ("rollout", re.compile(r"rollout|generat(?:e|ing|ion)|sampling|\bvllm\b|\bsglang\b|reward", re.I)),
    (
        "train",
        re.compile(r"\bstep\b|\bloss\b|backward|optimizer|grad_norm|\btrain(?:ing)?\b|iteration", re.I),
    ),
    (
        "launch",
        re.compile(
            # "starting" alone, not "Starting training step on epoch 3" (a training line)
            r"init_process_group|rendezvous|NCCL version|initiali[sz]|loading|Using network|"
            r"starting(?!\s+(?:train|step|epoch|iteration|rollout|generat|eval|validat))",
            re.I,
        ),
    ),
]
_NOISE = gated(
    r"GET /metrics|/health|heartbeat|\[repeated \d+x|it/s\]$|^\s*$|Waiting for|still alive|keepalive",
    (
        "get /metrics",
        "/health",
        "heartbeat",
        "[repeated ",
        "it/s]",
        "waiting for",
        "still alive",
        "keepalive",
    ),
    leading_space=True,
)
_FAILURE = gated(
    r"Traceback|Error|Exception|FAILED|Watchdog|timed out|\btime ?out\b(?![=:\s]*[\d.])|terminat|abort|"
    r"Signal \d+|exitcode|what\(\)|"
    r"frame #|SIGTERM|Sending process|Stack trace|dump|Some NCCL operations|To avoid data inconsistency|"
    r"PG status|Exception raised from|^\s+File \"|^\s+\S.*\^+$|Received a dump signal|preparing to dump",
    (
        "traceback", "error", "exception", "failed", "watchdog", "timed out", "time", "terminat", "abort",
        "signal ", "exitcode", "what()", "frame #", "sigterm", "sending process", "stack trace", "dump",
        "some nccl operations", "to avoid data inconsistency", "pg status",
    ),
    leading_space=True,
)  # fmt: skip


_PHASE_FIELD = re.compile(r"\bphase[=:]\s*['\"]?(?P<p>[A-Za-z_]+)")
_PHASE_WORDS = {
    "ckpt": "checkpoint",
    "checkpoint": "checkpoint",
    "save": "checkpoint",
    "eval": "eval",
    "evaluate": "eval",
    "validation": "eval",
    "rollout": "rollout",
    "generate": "rollout",
    "generation": "rollout",
    "train": "train",
    "training": "train",
    "update": "train",
    "init": "launch",
    "launch": "launch",
    "setup": "launch",
}


def phase_field(text: str) -> str | None:
    """The phase a `phase=` field names, when it is one of ours."""
    m = _PHASE_FIELD.search(text)
    return _PHASE_WORDS.get(m.group("p").lower()) if m else None


def phase_of(text: str) -> str | None:
    """The phase a line speaks of: a `phase=` field if it names one, else the phase whose
    keyword comes first ("step 10 loss ... rollout_time ..." is a training line)."""
    hinted = phase_field(text) if "phase" in text else None
    if hinted:
        return hinted
    best: tuple[int, str] | None = None
    for name, rx in PHASES:
        hit = rx.search(text)
        if hit and (best is None or hit.start() < best[0]):
            best = (hit.start(), name)
    return best[1] if best else None


# --- model -------------------------------------------------------------------------------------


@dataclass
class Line:
    file: str
    line: int
    text: str
    time: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text[:300], "time": iso(self.time)}


@dataclass
class CollectiveRow:
    rank: int
    pg: str = "0"
    # False when no line of this row named its process group (torch < 2.6 watchdog lines): then
    # rows of different groups (data, tensor, pipeline parallel) may sit under one key
    pg_known: bool = True
    # the rank the message names is its rank inside a subgroup, not the global rank of the
    # torchrun "[rankN]:" prefix (which `rank` holds then): other ranks' absence says nothing
    subgroup_rank: int | None = None
    seq: int | None = None
    op: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    time: float | None = None
    where: Line | None = None
    # the watchdog line carried Ray's dedup suffix ("[repeated 27x across cluster]"): it stands
    # for this many alike lines across the cluster, whose ranks the log does not show
    repeats: int = 1
    # the process group a PG status line of this rank named, when the watchdog's line named none
    # (torch 2.x: "[Rank 7] Watchdog caught ..." then "[PG ID 2 PG GUID 9 Rank 7] Exception ...")
    status_pg: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "pg": self.pg,
            "repeats": self.repeats,
            "seq": self.seq,
            "op": self.op,
            "numel_in": self.numel_in,
            "numel_out": self.numel_out,
            "timeout_ms": self.timeout_ms,
            "last_enqueued": self.last_enqueued,
            "last_completed": self.last_completed,
            "time": iso(self.time),
        }


@dataclass
class Verdict:
    kind: str  # mismatch | desync | first_collective | uniform | straggler | silent_rank | fail_slow
    summary: str
    ranks: list[int] = field(default_factory=list)  # the ranks a correct diagnosis names
    failure_class: str | None = None  # a class this verdict establishes on its own (a desync)
    seq: int | None = None
    phase: str | None = None
    evidence: list[Line] = field(default_factory=list)
    trigger: str | None = None  # the trigger of the rule that carries that class into the findings
    behind: list[int] = field(default_factory=list)  # in a desync: the ranks left waiting

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "summary": self.summary,
            "ranks": self.ranks,
            "failure_class": self.failure_class,
            "seq": self.seq,
            "phase": self.phase,
        }


@dataclass
class RankState:
    rank: int
    files: list[str] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)
    first_time: float | None = None
    last_time: float | None = None
    last_activity: Line | None = None  # last line that was progress, not noise nor failure
    last_line: Line | None = None
    phase: str | None = None
    last_step: int | None = None
    failure_time: float | None = None  # its first error / timeout line
    failed: bool = False  # it printed an error, a timeout or a traceback
    progress: Progress = field(default_factory=Progress)
    site: CallSite | None = None  # where it stopped (its last traceback or watchdog stack)
    phase_hint: str | None = None  # the phase its last `phase=` field named (heartbeats)
    stall: Line | None = None  # the activity line before its longest silence between two lines
    stall_s: float = 0.0
    stalled_at: str | None = None  # the phase of that silence, when it began before the others failed

    def as_dict(self, job_end: float | None) -> dict[str, Any]:
        silent = None
        if job_end is not None and self.last_activity is not None and self.last_activity.time is not None:
            silent = round(job_end - self.last_activity.time, 3)
        return {
            "rank": self.rank,
            "hosts": sorted(self.hosts),
            "files": self.files,
            "first_time": iso(self.first_time),
            "last_time": iso(self.last_time),
            "last_activity": self.last_activity.as_dict() if self.last_activity else None,
            "phase": self.phase,
            "last_step": self.last_step,
            "failure_time": iso(self.failure_time),
            "silent_before_end_s": silent,
            "stopped_in": self.site.describe() if self.site else None,
            "error": self.site.error if self.site else None,
        }


@dataclass
class Timeline:
    ranks: dict[int, RankState] = field(default_factory=dict)
    collectives: list[CollectiveRow] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    series: dict[str, list[tuple[int | None, float, float | None, int | None]]] = field(default_factory=dict)
    slowdown: dict[str, Any] | None = None
    stacks: dict[str, Any] | None = None
    year: int | None = None
    # host -> {"seconds": its clock minus the reference host's, "steps": shared steps, "reference"}
    clock_offsets: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict | None:
        return self.verdicts[0] if self.verdicts else None

    def job_end(self) -> float | None:
        times = [r.last_time for r in self.ranks.values() if r.last_time is not None]
        return max(times) if times else None

    def as_dict(self) -> dict[str, Any]:
        end = self.job_end()
        return {
            "verdict": self.verdict.as_dict() if self.verdict else None,
            "verdicts": [v.as_dict() for v in self.verdicts],
            "ranks": [self.ranks[r].as_dict(end) for r in sorted(self.ranks)],
            "collectives": [c.as_dict() for c in sorted(self.collectives, key=lambda c: (c.pg, c.rank))],
            "metrics": {
                name: [[s, v, iso(t), r] for s, v, t, r in points[-200:]]
                for name, points in self.series.items()
            },
            "slowdown": self.slowdown,
            "stacks": self.stacks,
            "clock_offsets": self.clock_offsets,
        }
