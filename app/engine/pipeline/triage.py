"""The engine's one entry point: sources in, ``Analysis`` out.

ingest -> scan (parallel over byte ranges) -> evaluate rules -> rank -> remedies -> redact.
No web, database or Slack imports here: the CLI, the API, the Slack bot and batch re-triage all
call ``triage``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import regex

from app.engine.models import Analysis, Evidence, Fact, Finding, FrameworkInfo, PossibleCause, SignalLine
from app.engine.pipeline import triggers
from app.engine.pipeline.expr import ExprError, Missing, Scope, holds
from app.engine.pipeline.expr import evaluate as evaluate_expression
from app.engine.pipeline.findings import RuleMatch
from app.engine.pipeline.ingest import ByteBudget, Source, file_size, human_bytes, too_large
from app.engine.pipeline.library import DERIVED_FACTS, FRAMEWORKS, Library, Rule
from app.engine.pipeline.patches import (
    ConfigView,
    compute_patches,
    config_diff,
    for_detected,
    runs_on_ray,
    select_specs,
)
from app.engine.pipeline.rank import Ranked, rank
from app.engine.pipeline.redact import redact_text
from app.engine.pipeline.scan import (
    CompiledLibrary,
    FileScan,
    evaluate,
    scan_range,
    scan_source,
    split_points,
)
from app.engine.pipeline.tailmarks import marked, marked_indices
from app.engine.pipeline.verdict import decide
from app.engine.signals import find_signals
from app.engine.timeline.builder import build as build_timeline
from app.engine.timeline.clock import iso, parse_time

# RL frameworks first: the most specific name is the one whose dialect patches speak.
FRAMEWORK_ORDER = FRAMEWORKS
PARALLEL_MIN_BYTES = 32 << 20
SYMPTOM_CLASSES = {"nccl.collective_timeout", "ray.actor_died", "nccl.error"}

NEXT_STEPS_UNKNOWN = [
    "Attach the full traceback of the first rank that failed (usually rank 0's log, or the "
    "earliest timestamp across ranks), not only the driver's summary.",
    "On every node of the job: `dmesg -T | grep -iE 'xid|nvrm|ecc|oom'` and "
    "`nvidia-smi -q -d ECC,PAGE_RETIREMENT` to rule out hardware faults.",
    "Re-run with `NCCL_DEBUG=INFO` (and `TORCH_NCCL_ASYNC_ERROR_HANDLING=1`) so communication "
    "errors name the failing peer.",
    "Record versions: `pip list | grep -iE 'torch|ray|vllm|sglang|megatron|deepspeed|transformer'`, "
    "`nvidia-smi` driver and CUDA version.",
]
# A collective timeout is the one root class that is a symptom whatever the rule: the ranks that
# report it waited for a peer. Dead actors and NCCL errors are often local (a socket interface
# missing, the actor's own process killed), and their rules say where to look themselves.
WAITED_FOR_A_PEER = "nccl.collective_timeout"
NEXT_STEPS_WAITED = (
    "The ranks that report a timeout were waiting for a peer: collect the logs of all ranks{ray} "
    "and run logtriage on them together; the first failure in time is the one to fix."
)
# a job the log shows on Ray (patches.runs_on_ray): its workers' logs are in Ray's folders
RAY_WORKER_LOGS = " (every Ray worker's `*.err`/`*.out` under /tmp/ray/session_latest/logs)"
NEXT_STEPS_HARDWARE = "Check the nodes for hardware faults: `dmesg -T | grep -iE 'xid|nvrm|ecc'`."


NEXT_STEPS_NCCL_PRESENT = (
    "The log already has NCCL's INFO lines: read each rank's `NCCL WARN` lines and its last INFO "
    "lines before the failure (the transport and peer it was using)."
)


def _next_steps(
    root: Finding | None,
    findings: list[Finding],
    possible: list[PossibleCause],
    frameworks: list[str],
    facts: Mapping[str, Any],
) -> list[str]:
    """What to collect next, from what the log shows: a plain exception gets "read that frame",
    not a hardware checklist; a timeout gets "find the rank that failed first" (with Ray's log
    folders only for a job on Ray)."""
    if root is not None:
        if root.failure_class != WAITED_FOR_A_PEER:
            return []
        ray = RAY_WORKER_LOGS if runs_on_ray(frameworks) else ""
        return [NEXT_STEPS_WAITED.format(ray=ray), NEXT_STEPS_HARDWARE]
    steps = [f"To confirm {p.failure_class} ({p.title}): {p.confirm}" for p in possible]
    exc = next((f for f in findings if f.failure_class == "python.unhandled_exception"), None)
    if exc is not None and not possible:
        name = exc.captures.get("exception", "an exception")
        where = f"{exc.evidence[-1].file}:{exc.evidence[-1].line}" if exc.evidence else "the log"
        message = exc.captures.get("message")
        steps.append(
            f"The job ended in `{name}` ({where}), an ordinary Python exception no rule ties to a "
            "cluster, GPU or framework fault. Read its traceback from the bottom: the last frame "
            "in your own code is where to look."
        )
        if message:
            steps.append(
                f"If the last frame is inside a library (`site-packages/...`), search its issue "
                f"tracker for `{message[:120]}`."
            )
        steps.append(
            "If other ranks or workers failed too, run logtriage on all their logs together: the "
            "first failure in time is the one to fix."
        )
        return steps
    first, hardware, nccl, versions = NEXT_STEPS_UNKNOWN
    if "nccl_info_lines" in facts:
        nccl = NEXT_STEPS_NCCL_PRESENT  # asking for what the log has wastes the user's rerun
    if not any(p.failure_class != "unknown" for p in possible):
        return [*steps, first, hardware, nccl, versions]
    # with candidates named, only the generic checks that could decide between them
    steps.append(first)
    # symptom classes (timeouts, dead actors) are as often a hardware fault elsewhere
    if any(p.kind == "hardware" or p.failure_class in SYMPTOM_CLASSES for p in possible):
        steps.append(hardware)
    if any(p.failure_class.startswith(("nccl.", "dist.")) for p in possible):
        steps.append(nccl)
    return [*steps, versions]


@dataclass(frozen=True)
class TriageOptions:
    jobs: int = 0  # 0 = as many as cores for large plain files
    max_bytes: int = 0  # 0 = unlimited
    framework: str | None = None  # override detection
    exit_code: int | None = None  # the job's reported exit status, when known
    max_evidence: int = 4
    # the sources went through `redact_stream` (the service stores and scans only redacted
    # logs): their lines need no second redaction (~1 ms of a 200 KB upload's scan)
    input_redacted: bool = False


_WORKER_COMPILED: CompiledLibrary | None = None


def _scan_task(task: tuple[Source, int, int, bool, int]) -> FileScan:
    src, start, end, whole, max_bytes = task
    assert _WORKER_COMPILED is not None
    if whole:
        return scan_source(_WORKER_COMPILED, src, budget=ByteBudget(max_bytes))
    return scan_range(_WORKER_COMPILED, src, start, end)


def scan_all(
    compiled: CompiledLibrary, sources: list[Source], *, jobs: int, max_bytes: int
) -> list[FileScan]:
    """Scan every source; large plain files are cut into line-aligned ranges across processes."""
    sizes = [file_size(s) for s in sources]
    known = sum(s for s in sizes if s is not None)
    if max_bytes and known > max_bytes:
        raise too_large(f"input is {human_bytes(known)}, over the limit of {human_bytes(max_bytes)}")
    if jobs <= 0:
        # os.cpu_count() reads sysfs (~10 µs): only large inputs need it
        jobs = (os.cpu_count() or 1) if known >= PARALLEL_MIN_BYTES else 1
    if jobs == 1 or all(s.path is None for s in sources):
        budget = ByteBudget(max_bytes)
        return [scan_source(compiled, s, budget=budget) for s in sources]

    tasks: list[tuple[Source, int, int, bool, int]] = []
    owners: list[int] = []
    local: list[int] = []
    for i, s in enumerate(sources):
        if s.path is None:
            local.append(i)
        elif s.splittable:
            for a, b in split_points(s.path, jobs):
                tasks.append((s, a, b, False, max_bytes))
                owners.append(i)
        else:
            tasks.append((s, 0, 0, True, max_bytes))
            owners.append(i)
    global _WORKER_COMPILED
    _WORKER_COMPILED = compiled  # inherited by the forked workers: nothing to pickle
    try:
        import multiprocessing  # only for a parallel scan: most runs never need it
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
            parts = list(pool.map(_scan_task, tasks))
    finally:
        _WORKER_COMPILED = None
    results: list[FileScan | None] = [None] * len(sources)
    for owner, part in zip(owners, parts, strict=True):
        current = results[owner]
        if current is None:
            results[owner] = part
        else:
            current.merge(part)
    budget = ByteBudget(max_bytes)
    for i in local:
        results[i] = scan_source(compiled, sources[i], budget=budget)
    return [r for r in results if r is not None]


def _signatures_that_hold(matches: list[RuleMatch], facts: Mapping[str, Any]) -> list[RuleMatch]:
    """Drops the signatures whose `when` does not hold for this log's facts; a match left with
    none is dropped, one left with some takes the best remaining confidence."""
    out: list[RuleMatch] = []
    for m in matches:
        conditional = {s.name: s for s in m.rule.signatures if s.when is not None}
        if not conditional or not any(n in conditional for n in m.signatures):
            out.append(m)
            continue
        scope = Scope(captures=m.captures, facts=facts)

        def ok(name: str, scope: Scope = scope, conditional: dict[str, Any] = conditional) -> bool:
            if name not in conditional:
                return True
            try:
                return holds(conditional[name].when, scope)
            except ExprError:
                return False

        kept = [n for n in m.signatures if ok(n)]
        if not kept:
            # a `when` over the captures may hold on a later occurrence than the first (a second
            # engine's profile line after the first engine's): that occurrence's captures speak
            for _file, rec in m.evidence:
                later = Scope(captures=rec.groups, facts=facts)
                kept = [n for n in m.signatures if n in conditional and ok(n, later)]
                if kept:
                    m.captures = dict(rec.groups)
                    _keep_occurrences_where(m, kept, facts, ok)
                    break
        if not kept:
            continue
        if kept != m.signatures:
            conf = {s.name: s.confidence for s in m.rule.signatures} | {"main": m.rule.confidence}
            m.signatures = kept
            m.confidence = max(conf.get(n, m.rule.confidence) for n in kept)
        out.append(m)
    return out


def _keep_occurrences_where(
    m: RuleMatch,
    kept: list[str],
    facts: Mapping[str, Any],
    ok: Callable[[str, Scope], bool],
) -> None:
    """The evidence of a match kept on a later occurrence: only the occurrences where its
    signature holds (the first one, where it did not, is not the failure); in one file its first
    and last lines and its count follow them."""
    held = [(f, r) for f, r in m.evidence if any(ok(n, Scope(captures=r.groups, facts=facts)) for n in kept)]
    if not held:
        return
    m.evidence = held
    if len(m.files) == 1:
        m.first = (m.first[0], held[0][1].line)
        m.last = (m.last[0], held[-1][1].line)
        m.count = len(held)


# torchrun's failure table: "exitcode  : -7 (pid: 16615)",
# "traceback : Signal 7 (SIGBUS) received by PID 16615"
_SIGBUS_PID = re.compile(r"exitcode\s*: -7 \(pid: (\d+)\)|Signal 7 \(SIGBUS\) received by PID (\d+)")


def _sigbus_processes(scans: list[Any]) -> int:
    """How many processes the launcher's failure table reports killed by SIGBUS (by pid)."""
    pids: set[tuple[str, str]] = set()
    for s in scans:
        for _n, text in marked(s, "sigbus"):
            if "-7 (pid" in text or "SIGBUS" in text:
                m = _SIGBUS_PID.search(text)
                if m:
                    pids.add((s.name, m.group(1) or m.group(2)))
    return len(pids)


# torchelastic's agent stopping its workers (multiprocessing/api.py): "Sending process 46807
# closing signal SIGHUP"
_CLOSING = re.compile(r"Sending process (\d+) closing signal (SIG[A-Z]+)")


def _launcher_closed_pids(scans: list[Any]) -> tuple[str, str] | None:
    """The worker pids the launcher sent its closing signal, in the log's order ("46807, 46808"),
    and that signal: the last signal's pids among the log's last lines (at most 8 named, then a
    count)."""
    pids: list[str] = []
    signal = ""
    for s in scans:
        for _n, text in marked(s, "closing"):
            if "closing signal" in text:
                m = _CLOSING.search(text)
                if m:
                    if m.group(2) != signal:
                        pids, signal = [], m.group(2)
                    if m.group(1) not in pids:
                        pids.append(m.group(1))
    if not pids:
        return None
    shown = ", ".join(pids[:8])
    return (shown if len(pids) <= 8 else f"{shown} and {len(pids) - 8} more"), signal


# `ray status` (python/ray/autoscaler/_private/util.py): "Active:" then one line per node
# (v2: " 1 node_9a8e4a65...") or per node type (v1: " 2 ray.worker.default"); v2 lists idle
# nodes under "Idle:" the same way
_RAY_NODE_LINE = re.compile(r"^\s*(\d+) (?:node_[0-9a-f]{8,}|[\w.-]+)\s*$")


def _ray_active_nodes(scans: list[Any]) -> int | None:
    """The nodes the last `ray status` summary lists as active or idle; None without one."""
    total: int | None = None
    for s in scans:
        tail = s.tail
        # from each header on: its node lines up to the first line that is not one
        for i in marked_indices(s, "ray_status"):
            line = tail[i][1].strip()
            if line not in ("Active:", "Idle:"):
                continue
            if line == "Active:":
                total = 0
            if total is None:
                continue
            for j in range(i + 1, len(tail)):  # read on in place: a slice would copy the rest
                m = _RAY_NODE_LINE.match(tail[j][1])
                if m is None:
                    break
                total += int(m.group(1))
    return total or None


# NCCL's line prefix "host:pid:tid [cudaDev] file.cc:123 NCCL INFO|WARN ..."
_NCCL_PREFIX = re.compile(
    r"(?<![\w.-])([A-Za-z][\w.-]{0,252}):(\d+):\d+ \[(\d+)\] (?:[\w/.-]+:\d+ )?NCCL (?:INFO|WARN)"
)


def _nccl_shared_host(scans: list[Any]) -> tuple[str, str] | None:
    """The first host name that NCCL's line prefix shows for two or more processes (by pid) in
    the log's last lines, and those processes ("GPU [2] (pid 6897) and GPU [3] (pid 6898)")."""
    seen: dict[str, dict[str, str]] = {}  # host -> pid -> its local GPU
    for s in scans:
        for _n, text in marked(s, "nccl"):
            if "NCCL" not in text:
                continue
            m = _NCCL_PREFIX.search(text)
            if m:
                seen.setdefault(m.group(1), {}).setdefault(m.group(2), m.group(3))
    for host, procs in seen.items():
        if len(procs) >= 2:
            shown = [f"GPU [{dev}] (pid {pid})" for pid, dev in list(procs.items())[:4]]
            return host, ", ".join(shown[:-1]) + " and " + shown[-1]
    return None


# the kernel OOM killer's task table (mm/oom_kill.c dump_tasks), after dmesg's timestamp: "[ 202779]
# 1000 202779 274650088 243385180 1957441536     7930          -998 python"; the columns after rss
# differ by kernel (nr_ptes/nr_pmds, pgtables_bytes, rss_anon/rss_file/rss_shmem), rss is always the
# fifth number, in pages
_OOM_TASK_ROW = re.compile(r"\[ *(\d+)\] +\d+ +\d+ +\d+ +(\d+)(?: +-?\d+){3,6} +(\S+)\s*$")
# DeepSpeed's launcher (launcher/launch.py sigkill_handler): "Killing subprocess 230"
_DS_KILLING = re.compile(r"sigkill_handler\] Killing subprocess (\d+)")


# Lightning's start-up line per process (lightning/fabric/utilities/distributed.py), after srun's
# --label prefix when there is one: "0: Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/8"
_LIGHTNING_RANK = re.compile(
    r"^(?:(\d+): )?.*?Initializing distributed: GLOBAL_RANK: (\d+), MEMBER: \d+/(\d+)"
)


def _span(ranks: list[int]) -> str:
    """[4, 5, 6, 7] -> "4-7"; [1, 3] -> "1, 3"."""
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(str(r) for r in ranks)


def _duplicate_rank_facts(scans: list[Any]) -> tuple[dict[str, Any], list[Fact]]:
    """Global ranks that Lightning started more than once (each node numbering its processes as
    if it were node 0): the ranks, the world size, the ranks above the highest seen that nobody
    claimed, and srun's tasks (its --label prefixes) with processes per task."""
    seen: Counter[int] = Counter()
    tasks: set[str] = set()
    world = 0
    where: tuple[str, int] | None = None
    for s in scans:
        for n, text in marked(s, "global_rank"):
            if "GLOBAL_RANK: " not in text:
                continue
            m = _LIGHTNING_RANK.search(text)
            if m is None:
                continue
            rank, world = int(m.group(2)), int(m.group(3))
            seen[rank] += 1
            if m.group(1) is not None:
                tasks.add(m.group(1))
            if seen[rank] == 2 and where is None:
                where = (s.name, n)
    dups = sorted(r for r, c in seen.items() if c > 1)
    if not dups or where is None:
        return {}, []
    out: dict[str, Any] = {"dup_global_ranks": _span(dups), "dup_global_world": world}
    shown = [
        Fact(
            name="dup_global_ranks",
            value=out["dup_global_ranks"],
            text=out["dup_global_ranks"],
            type="str",
            file=where[0],
            line=where[1],
        ),
        Fact(name="dup_global_world", value=world, text=str(world), type="int", file=where[0], line=where[1]),
    ]
    top = max(seen)
    if top + 1 < world:
        out["dup_global_unclaimed"] = _span(list(range(top + 1, world)))
        shown.append(
            Fact(
                name="dup_global_unclaimed",
                value=out["dup_global_unclaimed"],
                text=out["dup_global_unclaimed"],
                type="str",
                expression=f"ranks {top + 1} .. {world - 1}: no line claims them",
            )
        )
    if len(tasks) >= 2 and world % len(tasks) == 0:
        out |= {"dup_global_tasks": len(tasks), "dup_global_per_task": world // len(tasks)}
        shown.append(
            Fact(
                name="dup_global_tasks",
                value=len(tasks),
                text=str(len(tasks)),
                type="int",
                expression="srun --label prefixes " + ", ".join(sorted(tasks)),
            )
        )
    return out, shown


def _tail_facts(scans: list[Any]) -> tuple[dict[str, Any], list[Fact]]:
    """Facts read from the logs' last lines as a whole: the kernel's OOM task table (its largest
    process against the others of that name) and the ranks DeepSpeed's launcher killed."""
    out: dict[str, Any] = {}
    shown: list[Fact] = []
    rows: list[tuple[int, int, str, str, int]] = []  # rss pages, pid, name, file, line
    killed: list[str] = []
    for s in scans:
        for n, text in marked(s, "oom_task_row", "ds_killing"):
            if "] " in text:
                m = _OOM_TASK_ROW.search(text)
                if m:
                    rows.append((int(m.group(2)), int(m.group(1)), m.group(3), s.name, n))
            if "Killing subprocess" in text:
                k = _DS_KILLING.search(text)
                if k and k.group(1) not in killed:
                    killed.append(k.group(1))
    if killed:
        out["launcher_killed_pids"] = pids = ", ".join(killed[:16])
        shown.append(
            Fact(
                name="launcher_killed_pids",
                value=pids,
                text=pids,
                type="str",
                expression="Killing subprocess PIDs",
            )
        )
    if len(rows) >= 2:
        rss, pid, name, file, line = max(rows)
        gib = round(rss * 4096 / (1 << 30), 1)
        out |= {
            "oom_table_rows": len(rows),
            "oom_table_top_pid": pid,
            "oom_table_top_name": name,
            "oom_table_top_rss_pages": rss,
            "oom_table_top_rss_gib": gib,
        }
        shown += [
            Fact(name="oom_table_top_pid", value=pid, text=str(pid), type="int", file=file, line=line),
            Fact(name="oom_table_top_rss_pages", value=rss, text=str(rss), type="int", file=file, line=line),
            Fact(
                name="oom_table_top_rss_gib",
                value=gib,
                text=f"{gib} GiB (4 KiB pages)",
                type="float",
                file=file,
                line=line,
            ),
        ]
        # the others of its name that are of the size of the largest of them (a launch's other
        # ranks, not its small launcher processes)
        same = sorted(((r[0], r[1]) for r in rows if r[2] == name and r[1] != pid), reverse=True)
        peers = [(r, p) for r, p in same if r * 2 >= same[0][0]] if same else []
        if peers:
            median = peers[len(peers) // 2][0]
            peer_gib = round(median * 4096 / (1 << 30), 1)
            pids = ", ".join(str(p) for _r, p in sorted(peers, key=lambda rp: rp[1])[:16])
            out |= {
                "oom_table_peers": len(peers),
                "oom_table_peer_rss_gib": peer_gib,
                "oom_table_peer_pids": pids,
            }
            shown.append(
                Fact(
                    name="oom_table_peer_pids",
                    value=pids,
                    text=pids,
                    type="str",
                    expression=f"{name} processes of at least half the rss of the largest of them",
                )
            )
            shown.append(
                Fact(
                    name="oom_table_peer_rss_gib",
                    value=peer_gib,
                    text=f"{peer_gib} GiB",
                    type="float",
                    expression=f"median rss of PIDs {pids} x 4 KiB",
                )
            )
    return out, shown


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]?)(i?)B\s*$", re.I)


def size_bytes(text: str) -> int | None:
    """ "21.06 MiB" -> 22083010; "1.5 GB" -> 1500000000; None when it is not a size."""
    m = _SIZE.match(text)
    if m is None:
        return None
    power = "KMGTPE".find(m.group(2).upper()) + 1 if m.group(2) else 0
    base = 1024 if m.group(3) else 1000
    # exact for any size a log prints, 10^400 GiB included (a float would overflow)
    return int(Decimal(m.group(1)) * base**power)


def _one_value_per_key(findings: list[Finding]) -> None:
    """A setting is patched once per report: by the highest-ranked finding that patches it (the
    root cause before its symptoms). A symptom's rule asking for another value of the same key
    (NCCL_DEBUG=WARN under a root cause that needs INFO) would contradict the fix."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for f in findings:
        kept = []
        for p in f.patches:
            key = (p.target, tuple(p.path))
            if key not in seen:
                seen.add(key)
                kept.append(p)
        f.patches = kept


def _typed_fact(value: str, ftype: str) -> Any:
    if ftype == "size":
        size = size_bytes(value)
        return value if size is None else size
    try:
        if ftype == "int":
            return int(float(value))
        if ftype == "float":
            return float(value)
        if ftype == "bool":
            return value.strip().lower() in ("true", "1", "yes", "on")
    except ValueError:
        return value
    return value


def _detect_framework(scans: list[FileScan], override: str | None) -> tuple[FrameworkInfo | None, list[str]]:
    seen: dict[str, str | None] = {}
    for s in scans:
        for name, ver in s.frameworks.items():
            if seen.get(name) is None:
                seen[name] = ver
    detected = [f for f in FRAMEWORK_ORDER if f in seen]
    if override:
        return FrameworkInfo(name=override, version=seen.get(override)), [override, *detected]
    if not detected:
        return None, []
    return FrameworkInfo(name=detected[0], version=seen[detected[0]]), detected


_MD_SPECIAL = regex.compile(r"([\\`*\[\]])")


def md_literal(value: str) -> str:
    """A value from the log as literal Markdown: a capture holding `[text](https://...)` or
    `**...**` is shown as written, never as a link or emphasis (the remediation is Markdown)."""
    return str(_MD_SPECIAL.sub(r"\\\1", value))


_PLACEHOLDER = regex.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # compiled once: regex.sub's cache is slow


def _remediation_text(rule: Rule, captures: Mapping[str, Any], facts: Mapping[str, Any] | None = None) -> str:
    """The rule's remediation with its placeholders filled from the captures, else from the facts
    the log states elsewhere. A line whose value neither holds is left out rather than shown
    with a hole in it (unless that would leave nothing)."""
    known: dict[str, Any] = {**(facts or {}), **captures}

    def fill(m: regex.Match[str]) -> str:
        return md_literal(str(known[m.group(1)]))

    text = rule.remediation.strip()
    kept = [
        _PLACEHOLDER.sub(fill, line)
        for line in text.splitlines()
        if all(name in known for name in _PLACEHOLDER.findall(line))
    ]
    if not any(line.strip() for line in kept):
        return str(
            _PLACEHOLDER.sub(lambda m: md_literal(str(known.get(m.group(1), f"<{m.group(1)}>"))), text)
        )
    return "\n".join(kept)


def _size_facts(library: Library) -> frozenset[str]:
    return frozenset(f.name for f in library.facts if f.type == "size")


def _shown(name: str, value: Any, sizes: frozenset[str]) -> str:
    """A fact as a step shows it: sizes as people read them (the engine keeps bytes)."""
    if name in sizes and isinstance(value, int):
        return human_bytes(value)
    return md_literal(str(value))


def _cited(name: str, value: Any, sizes: frozenset[str]) -> str:
    return f"{name} {_shown(name, value, sizes)}"


def _steps(
    rule: Rule, scope: Scope, frameworks: list[str], *, sizes: frozenset[str], problems: list[str]
) -> list[str]:
    """The rule's conditional steps that hold for this job, as Markdown list items: a step for a
    framework only when that framework is detected (another framework's keys cost the user more
    than no step), a step whose `when` is false or needs a value the log does not state left
    out, each with the facts it cites."""
    known: dict[str, Any] = {**scope.facts, **scope.captures}
    out: list[str] = []
    for step in rule.steps:
        if not for_detected(step.frameworks, frameworks):
            continue
        try:
            if not holds(step.when, scope):
                continue
        except ExprError as exc:
            problems.append(f"{rule.id}: step `when` failed: {exc}")
            continue
        if any(name not in known for name in _PLACEHOLDER.findall(step.do)):
            continue
        text = _PLACEHOLDER.sub(lambda m: _shown(m.group(1), known[m.group(1)], sizes), step.do.strip())
        cited = [_cited(n, known[n], sizes) for n in step.because if n in known]
        if cited:
            text += f" (the log: {'; '.join(cited)})"
        lines = text.splitlines()
        out.append("\n".join(["- " + lines[0], *("  " + ln.strip() for ln in lines[1:])]))
    return out


def _derived(rule: Rule, captures: Mapping[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    """The rule's `derived` values over this finding's captures and the facts, in order (a later
    one may use an earlier); one that needs a value the log does not state, or yields None, is
    left out like a missing capture."""
    out: dict[str, Any] = {}
    for name, source in rule.derived.items():
        try:
            value = evaluate_expression(source, Scope(captures={**captures, **out}, facts=facts))
        except (Missing, ExprError, TypeError, ValueError, ZeroDivisionError):
            continue
        if value is not None:
            out[name] = value
    return out


def _with_steps(text: str, steps: list[str]) -> str:
    return text if not steps else text.rstrip() + "\n" + "\n".join(steps)


def _finding(
    r: Ranked,
    *,
    library: Library,
    scope_base: Scope,
    frameworks: list[str],
    config: ConfigView | None,
    redactions: Counter[str] | None,
    problems: list[str],
    sizes: frozenset[str],
) -> Finding:
    """`redactions` None: the text is redacted already (`TriageOptions.input_redacted`)."""
    m: RuleMatch = r.match
    rule = m.rule

    def clean(text: str) -> str:
        return text if redactions is None else redact_text(text, redactions)

    captures = {k: clean(v) for k, v in m.captures.items()}
    scope = Scope(
        captures={**captures, **_derived(rule, captures, scope_base.facts)},
        facts=scope_base.facts,
        config=config,
    )
    patches, issues = compute_patches(select_specs(rule.patches, frameworks), scope=scope, config=config)
    problems.extend(f"{rule.id}: {p}" for p in issues)
    return Finding(
        rule_id=rule.id,
        rule_version=rule.version,
        failure_class=rule.failure_class,
        kind=library.kind_of(rule.failure_class),
        severity=rule.severity.value,
        title=rule.title,
        confidence=round(r.confidence, 2),
        role=r.role,  # type: ignore[arg-type]
        count=m.count,
        first_line=m.first[1],
        last_line=m.last[1],
        evidence=[Evidence(file=f, line=h.line, text=clean(h.text)) for f, h in m.evidence],
        captures=captures,
        ranks=sorted(m.ranks),
        hosts=sorted(m.hosts),
        ranks_folded=m.folded,
        remediation=_with_steps(
            _remediation_text(rule, dict(scope.captures), scope_base.facts),
            _steps(rule, scope, frameworks, sizes=sizes, problems=problems),
        ),
        patches=patches,
        explained_by=r.explained_by if r.role == "symptom" else None,
        files=m.files,
        signatures=m.signatures,
        first_time=iso(m.first_time),
    )


CONFIRM_BY_KIND = {
    "hardware": "On the node: `dmesg -T | grep -iE 'xid|nvrm|ecc'` and "
    "`nvidia-smi -q -d ECC,PAGE_RETIREMENT`; "
    "a matching kernel line confirms a hardware fault.",
    "infra": "The scheduler's and the cluster's own record of the job (pod events, `sacct -j`, `ray status`, "
    "the raylet and GCS logs) for the same minute.",
    "config": "The job's config and launch command (attach them with --config): the values the rule names.",
    "code": "The full traceback of the first rank that failed, with the lines above it.",
    "numerics": "The loss and grad-norm lines before the failure: when did they first stop being finite?",
}


def _possible(r: Ranked, f: Finding, library: Library) -> PossibleCause:
    kind = library.kind_of(r.failure_class)
    confirm = r.match.rule.confirm or CONFIRM_BY_KIND.get(kind, CONFIRM_BY_KIND["code"])
    if r.match.implausible:
        confirm = (
            f"Doubtful as stated: {r.match.implausible} Compare what every rank was doing at that "
            "step (all ranks' logs together, or the flight recorder's dump)."
        )
    return PossibleCause(
        failure_class=f.failure_class,
        kind=kind,
        rule_id=f.rule_id,
        title=f.title,
        confidence=f.confidence,
        evidence=f.evidence,
        confirm=" ".join(confirm.split()),
    )


def _stamp_times(matches: list[RuleMatch], year: int | None) -> None:
    for m in matches:
        times = [t for _f, rec in m.evidence if (t := parse_time(rec.text, year_hint=year)) is not None]
        m.first_time = min(times) if times else None


IMPLAUSIBLE_FACTOR = 0.3


def _check_plausibility(matches: list[RuleMatch]) -> list[str]:
    """Demote findings whose captured values no real run produces; return why, as warnings."""
    notes: list[str] = []
    for m in matches:
        for check in m.rule.implausible:
            try:
                hit = holds(check.when, Scope(captures=m.captures))
            except ExprError:
                hit = False
            if hit:
                m.confidence = round(m.confidence * IMPLAUSIBLE_FACTOR, 2)
                m.implausible = " ".join(check.why.split())
                notes.append(f"{m.rule.id}: {m.implausible}")
                break
    return notes


def _masked_exit(ranked: list[Ranked], scans: list[FileScan], library: Library) -> None:
    """Exit status 0, yet the log ends in a fatal error: the job's status is masked.

    With no other root cause, the masked status itself is the root cause: it is what the user
    must fix first so that failures stop looking green."""
    rules = [lr.rule for lr in library.rules]
    first = next(
        (r for r in rules if r.status.value != "deprecated" and triggers.stage_of(r) == "exit_status"), None
    )
    if first is None:
        return
    found = triggers.fire([first], "exit_status", triggers.TriggerInput(scans=scans, ranked=ranked))
    if not found:
        return
    masked = found[0]
    if not any(r.role == "root_cause" for r in ranked):
        ranked.insert(0, Ranked(match=masked, role="root_cause", confidence=first.confidence))
    else:
        ranked.append(Ranked(match=masked, role="related", confidence=first.confidence))


def triage(
    *,
    sources: list[Source],
    compiled: CompiledLibrary,
    options: TriageOptions | None = None,
    config: ConfigView | None = None,
    warnings: list[str] | None = None,
) -> Analysis:
    opts = options or TriageOptions()
    library = compiled.library
    t0 = time.perf_counter()
    scans = scan_all(compiled, sources, jobs=opts.jobs, max_bytes=opts.max_bytes)
    t_scan = time.perf_counter() - t0
    matches = evaluate(compiled, scans, max_evidence=opts.max_evidence)
    rules = [lr.rule for lr in library.rules]
    seen = frozenset(m.rule.failure_class for m in matches)
    matches += triggers.fire(rules, "metrics", triggers.TriggerInput(scans=scans, seen=seen))
    implausible = _check_plausibility(matches)
    tl = build_timeline(scans)
    matches += triggers.fire(rules, "timeline", triggers.TriggerInput(scans=scans, timeline=tl))
    _stamp_times(matches, tl.year)
    framework, detected = _detect_framework(scans, opts.framework)

    redactions: Counter[str] = Counter()
    sizes = _size_facts(library)
    facts: dict[str, Any] = {}
    fact_list: list[Fact] = []
    fact_types = {f.name: f.type for f in library.facts}
    for s in scans:
        for name, (value, line) in sorted(s.facts.items(), key=lambda kv: kv[1][1]):
            if name in facts:
                continue
            if not opts.input_redacted:
                # a fact is log text: steps, patches and the facts list show it, like a capture
                value = redact_text(value, redactions)
            ftype = fact_types.get(name, "str")
            facts[name] = typed = _typed_fact(value, ftype)
            fact_list.append(Fact(name=name, value=typed, text=value, type=ftype, file=s.name, line=line))
    facts["metric_lines"] = sum(len(s.metrics) for s in scans)  # DERIVED_FACTS
    facts["sigbus_processes"] = _sigbus_processes(scans)
    closed = _launcher_closed_pids(scans)
    for name, derived, source in (
        ("launcher_closed_pids", closed[0] if closed else None, "the launcher's closing-signal lines"),
        ("launcher_closing_signal", closed[1] if closed else None, "the launcher's closing-signal lines"),
        ("ray_active_nodes", _ray_active_nodes(scans), "the nodes `ray status` lists"),
    ):
        if derived is not None:
            facts[name] = derived
            fact_list.append(
                Fact(name=name, value=derived, text=str(derived), type=DERIVED_FACTS[name], expression=source)
            )
    shared = _nccl_shared_host(scans)
    if shared is not None:
        host, procs = shared
        if not opts.input_redacted:
            host, procs = redact_text(host, redactions), redact_text(procs, redactions)
        facts["nccl_shared_host"], facts["nccl_shared_host_procs"] = host, procs
    for derive in (_tail_facts, _duplicate_rank_facts):
        tail_facts, tail_shown = derive(scans)
        facts |= tail_facts
        fact_list += tail_shown
    # the ranks the others waited for: named by the timeline's lead verdict and not among the
    # ranks that timed out themselves (those completed fewer of the same collectives: blocked, not absent)
    lead = tl.verdicts[0] if tl.verdicts else None
    timed_out = {r.rank for r in tl.collectives if r.seq is not None}
    if lead is not None and lead.kind in ("uniform", "straggler") and not lead.failure_class:
        absent = [r for r in lead.ranks if r not in timed_out]
        if absent:
            facts["lagging_ranks"] = ", ".join(str(r) for r in absent[:8])
    for spec in library.facts:
        if spec.value is not None:
            # a fact it needs is not in the log (or not a number): no value
            with contextlib.suppress(Missing, ExprError, TypeError, ValueError, ZeroDivisionError):
                if not spec.required <= facts.keys():
                    continue  # as its evaluation would end: Missing, or an error before it
                v = evaluate_expression(spec.value, Scope(facts=facts))
                if v is None:
                    # the expression's own "no value here" (a ratio offered only where it means
                    # something): absent, like a fact whose inputs the log lacks
                    continue
                facts[spec.name] = v
                if isinstance(v, str | int | float | bool):
                    shown = _shown(spec.name, v, sizes)
                    fact_list.append(
                        Fact(name=spec.name, value=v, text=shown, type=spec.type, expression=spec.value)
                    )

    matches = _signatures_that_hold(matches, facts)
    ranked = rank(matches, library)
    if opts.exit_code == 0:
        _masked_exit(ranked, scans, library)

    problems: list[str] = []
    scope = Scope(facts=facts, config=config)
    findings = [
        _finding(
            r,
            library=library,
            scope_base=scope,
            frameworks=detected,
            config=config,
            redactions=None if opts.input_redacted else redactions,
            problems=problems,
            sizes=sizes,
        )
        for r in ranked
    ]
    _one_value_per_key(findings)
    root_finding = findings[0] if findings and findings[0].role == "root_cause" else None
    possible = (
        [_possible(r, f, library) for r, f in zip(ranked, findings, strict=True) if r.possible]
        if root_finding is None
        else []
    )

    next_steps = _next_steps(root_finding, findings, possible, detected, facts)
    action = decide(library=library, root=root_finding, possible=possible, facts=facts)

    diff = None
    if config is not None:
        all_patches = [p for f in findings if f.role == "root_cause" for p in f.patches]
        diff = config_diff(config, all_patches)

    all_warnings = list(warnings or [])
    all_warnings.extend(implausible)
    for s in scans:
        all_warnings.extend(s.warnings)
    all_warnings.extend(problems)
    if redactions:
        all_warnings.append(
            "redacted secrets: " + ", ".join(f"{k} x{v}" for k, v in sorted(redactions.items()))
        )
    total_bytes = sum(s.bytes for s in scans)
    signals = find_signals(
        [(s.name, s.tail) for s in scans],
        # counted apart: the warning above counts the secrets in what the report quotes
        redact=None if opts.input_redacted else (lambda text: redact_text(text, Counter())),
    )
    return Analysis(
        library_version=library.version,
        framework=framework,
        root_cause=root_finding,
        findings=findings,
        next_steps=next_steps,
        warnings=all_warnings,
        config_diff=diff,
        possible_causes=possible,
        timeline=tl.as_dict() if (tl.ranks or tl.collectives or tl.verdicts or tl.series) else None,
        stats={
            "files": [s.name for s in scans],
            "bytes": total_bytes,
            "lines": sum(s.lines for s in scans),
            "scan_seconds": round(t_scan, 4),
            "mb_per_s": round(total_bytes / 1e6 / t_scan, 1) if t_scan > 0 else None,
            "engine": compiled.engine,
            "frameworks_detected": detected,
            "facts": {k: v for k, v in facts.items()},
        },
        facts=fact_list,
        action=action,
        signals=[SignalLine(**sig.as_dict()) for sig in signals],  # type: ignore[arg-type]
    )


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "logtriage"
