#!/usr/bin/env python3
"""Retry policies on a simulated GPU fleet (issue 24, "Policy simulation").

    python bench/verdict_sim.py [--seed 1] [--seeds 5] [--reps 5] [--nodes 512] [--days 14] [--json]
                                [--verdicts PATH] [--set KEY=VALUE]

A trace-driven discrete-event simulation of a fleet of N nodes x 8 GPUs, a few of them lemon
nodes, running a stream of jobs of various sizes and lengths. Jobs fail from hardware faults (a
per-node fault stream, the same for every policy) and from faults of their own (a bug, a config
error, a full disk: repeats until a person fixes it). Each failure is handled by one policy:

  always-retry      run it again at once, up to 3 attempts in all (the hook's default), same nodes
                    possible; then a person takes it (notice + investigate + fix)
  never-retry       a person takes every failure: notice + investigate (+ fix), then the right thing
  logtriage         the decision of rules/verdicts.yaml for the failure's class (read from the YAML,
                    so the simulation follows the table as it is), done as docs/hooks/logtriage-retry.sh
                    does it: retry / retry_excluding run again at once (the named hosts left out),
                    anything else goes to a person; unknown class -> investigate
  logtriage+history the same, through app.engine.pipeline.verdict.with_history with the outcomes of
                    earlier retries on this (simulated) service: fingerprint scope = (job, class),
                    falling back to the class over the whole fleet
  oracle            knows the true nature: transient -> retry, node fault -> exclude the node,
                    repeating -> a person fixes it (notice + fix, no investigation)

The published figures every rate comes from, and the assumptions where none was found, are in
PUBLISHED and ASSUMED below and in bench/README.md ("verdict_sim.py: retry policies on a
simulated fleet"). Pure stdlib (plus PyYAML to read the table, and the project's `with_history`).
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine.models import Action  # noqa: E402
from app.engine.pipeline.verdict import with_history  # noqa: E402

VERDICTS = ROOT / "rules" / "verdicts.yaml"

# ---------------------------------------------------------------------------------------------
# Published figures (source: title, year, the figure)
# ---------------------------------------------------------------------------------------------
PUBLISHED = {
    # Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research Clusters",
    # HPCA 2025 (arXiv 2410.21680), as summarised by Crusoe's "AutoClusters" post: job MTTF from
    # hardware/system failures ~47 days at 8 GPUs (one node), ~8 h at 1,024 GPUs, ~1.8 h at 16,384.
    "node_mttf_days": 47.0,
    # Same paper: the clusters run at ~80%+ utilisation (the load offered here).
    "utilisation": 0.8,
    # "The Llama 3 Herd of Models", Meta 2024, Table 5: 419 unexpected interruptions in 54 days
    # on 16,384 H100. Counts by component (hardware and host side; software bugs are left to the
    # job-fault stream below): GPU 148 + GSP 17 + thermal 6 + SDC 6, HBM3 72 + SRAM 19,
    # network switch/cable 35 + NIC 7, host maintenance 32, other host parts 14, NCCL watchdog 7.
    "llama3_infra_counts": {
        "gpu": 148 + 17 + 6 + 6,
        "gpu_memory": 72 + 19,
        "network": 35 + 7,
        "host_maintenance": 32,
        "host_hw": 3 + 3 + 2 + 2 + 2 + 2,
        "nccl_watchdog": 7,
    },
    # Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
    # Workloads" (Microsoft Philly), USENIX ATC 2019: ~30% of jobs end unsuccessfully, mostly
    # from user errors (programming and configuration), not infrastructure.
    "philly_failed_job_share": 0.30,
}

# Which project class a published category shows up as in a log, its true nature, and how
# often the log names the host (assumed). nature: transient (passes on a plain retry), node
# (repeats on that node until it is repaired, passes elsewhere), repeat (config/code: repeats
# until fixed), stop (full disk: repeats until someone acts).
INFRA = {
    "gpu": ("hardware.gpu_xid_error", "node", 0.7),
    "gpu_memory": ("hardware.gpu_ecc_error", "node", 0.7),
    "network": ("hardware.network_ib_error", "node", 0.5),
    "host_maintenance": ("nccl.error", "transient", 0.0),
    "host_hw": ("nccl.error", "node", 0.0),
    "nccl_watchdog": ("nccl.collective_timeout", "transient", 0.0),
}

# ---------------------------------------------------------------------------------------------
# Assumptions (no published figure found; change them on the command line or here)
# ---------------------------------------------------------------------------------------------
ASSUMED = {
    "job_fault_share": 0.25,  # jobs that carry a fault of their own (Philly's ~30% failed, minus infra)
    # the mix of those faults by class (no published per-class split was found)
    "job_fault_mix": {
        "python.unhandled_exception": ("repeat", 0.30),
        "cuda.out_of_memory": ("repeat", 0.25),
        "config.batch_not_divisible": ("repeat", 0.08),
        "python.import_abi_mismatch": ("repeat", 0.08),
        "host.oom_killed": ("repeat", 0.05),
        "dist.address_in_use": ("repeat", 0.04),
        "nccl.collective_timeout": ("repeat", 0.10),  # a hang in the code: an ambiguous class
        "ray.actor_died": ("repeat", 0.05),  # a crash in an actor's code: ambiguous
        "host.disk_full": ("stop", 0.05),
    },
    "job_fault_at_h": 1.0,  # mean progress (h) at which a job's own fault fires (exponential)
    "lemon_share": 0.01,  # share of nodes that are lemons
    "lemon_factor": 20.0,  # their fault rate against a healthy node's
    "persist": 0.8,  # a node fault leaves the node broken (else it was a one-off)
    "broken_fail_h": 0.25,  # mean time to fail a job on a broken node
    "health_check_h": 2.0,  # mean time for the fleet's own health checks to drain a broken node
    "repair_h": 24.0,  # a drained node is back after this long
    "maintenance_h": 2.0,  # a node in unplanned maintenance is away this long
    "p_same_nodes": 0.5,  # a plain retry lands on the same (free) nodes
    "max_attempts": 3,  # automatic attempts in all, the first included (logtriage-retry.sh default)
    "restart_h": 0.1,  # start-up and checkpoint load per attempt
    "ckpt_h": 1.0,  # checkpoint interval (h of progress)
    "t_notice_h": 1.0,  # a person notices a failed job
    "t_investigate_h": 2.0,  # finding out what happened without a verdict
    "t_fix_h": 3.0,  # making the change once it is known
    "p_unknown": 0.15,  # logtriage leaves the class unknown (first-contact top-1 77-89%, precision ~100%)
    # job sizes in nodes of 8 GPUs (most jobs are small: Kokolis et al. 2025, shape assumed)
    "sizes": {1: 0.55, 2: 0.15, 4: 0.12, 8: 0.09, 16: 0.05, 32: 0.025, 64: 0.01, 128: 0.005},
    "length_median_h": 4.0,  # lognormal, sigma 1.0, clipped to [0.25, 72] h
}

POLICIES = ("always-retry", "never-retry", "logtriage", "logtriage+history", "oracle")


def load_table(path: Path) -> dict[str, tuple[str, bool]]:
    """class -> (decision, ambiguous), read from verdicts.yaml."""
    data = yaml.safe_load(path.read_text())
    return {c: (v["decision"], bool(v.get("ambiguous", False))) for c, v in data["classes"].items()}


# ---------------------------------------------------------------------------------------------
# Workload and fault trace (the same for every policy)
# ---------------------------------------------------------------------------------------------
@dataclass
class JobSpec:
    id: int
    submit: float
    nodes: int
    work: float  # hours of progress to finish
    fault_class: str | None
    fault_nature: str | None
    fault_at: float  # progress at which the job's own fault fires


@dataclass
class Trace:
    nodes: int
    horizon: float
    lemons: set[int]
    jobs: list[JobSpec]
    node_faults: list[tuple[float, int, str]]  # (time, node, category)


def make_trace(seed: int, nodes: int, days: float, a: dict[str, Any] = ASSUMED) -> Trace:
    rng = random.Random(seed)
    horizon = days * 24.0
    lemons = set(rng.sample(range(nodes), max(1, round(nodes * a["lemon_share"]))))
    sizes, sw = zip(*a["sizes"].items(), strict=True)
    fclasses = list(a["job_fault_mix"])
    fweights = [a["job_fault_mix"][c][1] for c in fclasses]
    mean_len = a["length_median_h"] * math.exp(0.5)
    mean_nodes = sum(s * w for s, w in zip(sizes, sw, strict=True)) / sum(sw)
    rate = PUBLISHED["utilisation"] * nodes / (mean_nodes * mean_len)  # jobs per hour
    jobs: list[JobSpec] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= horizon:
            break
        n = rng.choices(sizes, sw)[0]
        n = min(n, nodes // 2)
        work = min(72.0, max(0.25, rng.lognormvariate(math.log(a["length_median_h"]), 1.0)))
        fc = fn = None
        at = 0.0
        if rng.random() < a["job_fault_share"]:
            fc = rng.choices(fclasses, fweights)[0]
            fn = a["job_fault_mix"][fc][0]
            at = min(work * 0.95, rng.expovariate(1 / a["job_fault_at_h"]))
        jobs.append(JobSpec(len(jobs), t, n, work, fc, fn, at))
    counts = PUBLISHED["llama3_infra_counts"]
    cats, cw = list(counts), list(counts.values())
    lam = 1 / (PUBLISHED["node_mttf_days"] * 24.0)
    faults = []
    for node in range(nodes):
        r = lam * (a["lemon_factor"] if node in lemons else 1.0)
        ft = 0.0
        while True:
            ft += rng.expovariate(r)
            if ft >= horizon:
                break
            faults.append((ft, node, rng.choices(cats, cw)[0]))
    faults.sort()
    return Trace(nodes, horizon, lemons, jobs, faults)


# ---------------------------------------------------------------------------------------------
# Simulation
# ---------------------------------------------------------------------------------------------
@dataclass
class Job:
    spec: JobSpec
    progress: float = 0.0
    fixed: bool = False  # its own fault was fixed
    excluded: set[int] = field(default_factory=set)
    alloc: list[int] = field(default_factory=list)
    prev: list[int] = field(default_factory=list)
    seq: int = 0  # attempt number, to drop stale end events
    start: float = 0.0
    auto_left: int = 0  # automatic attempts left in this episode
    is_retry: bool = False  # the running attempt is an automatic rerun without a change
    after_fix: bool = False  # the running attempt follows a person's change
    last_class: str | None = None
    pending: list[tuple[float, str]] = field(default_factory=list)  # (failed at, class) to recover
    done: float | None = None


class Sim:
    def __init__(
        self,
        trace: Trace,
        policy: str,
        table: dict[str, tuple[str, bool]],
        seed: int,
        a: dict[str, Any] = ASSUMED,
        rep: int = 0,
    ):
        self.t, self.policy, self.table = trace, policy, table
        self.a = a
        self.rng = random.Random(seed * 7919 + POLICIES.index(policy) + 104729 * rep)
        self.ev: list[tuple[float, int, str, Any]] = []
        self.n = 0
        self.free: set[int] = set(range(trace.nodes))
        self.busy: dict[int, Job] = {}
        self.broken: dict[int, tuple[str, float]] = {}  # node -> (class, host-named prob)
        self.away: set[int] = set()  # repair or maintenance
        self.queue: list[tuple[float, int, Job]] = []
        self.last_decision = ""
        self.counts: dict[tuple[str, Any], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self.m = {
            "failures": 0,
            "auto_retries": 0,
            "failed_retries": 0,
            "gpu_h_failed_retries": 0.0,
            "gpu_h_failed_all": 0.0,
            "gpu_h_waiting": 0.0,
            "human": 0,
            "history_flips": 0,
            "recoveries": [],
            "decisions": defaultdict(int),
            "retry_loss_by_class": defaultdict(float),
        }

    def push(self, when: float, kind: str, obj: Any) -> None:
        self.n += 1
        heapq.heappush(self.ev, (when, self.n, kind, obj))

    def run(self) -> dict[str, Any]:
        tr, a = self.t, self.a
        jobs = [Job(s, auto_left=a["max_attempts"] - 1) for s in tr.jobs]
        for j in jobs:
            self.push(j.spec.submit, "ready", j)
        for ft, node, cat in tr.node_faults:
            self.push(ft, "fault", (node, cat))
        now = 0.0
        while self.ev:
            now, _, kind, obj = heapq.heappop(self.ev)
            if now > tr.horizon:
                break
            if kind == "ready":
                bisect.insort(self.queue, (now, obj.spec.id, obj))
            elif kind == "end":
                job, seq, outcome = obj
                if job.seq == seq and job.alloc:
                    self.end(job, now, outcome)
            elif kind == "fault":
                self.fault(now, *obj)
            elif kind == "drain":
                node = obj
                if node in self.broken and node not in self.away:
                    self.take_away(node, now, self.a["repair_h"], repair=True)
            elif kind == "back":
                node, repair = obj
                self.away.discard(node)
                if repair:
                    self.broken.pop(node, None)
                if node not in self.busy:
                    self.free.add(node)
            self.schedule(now)
        return self.report(jobs)

    # -- nodes --------------------------------------------------------------------------------
    def take_away(self, node: int, now: float, hours: float, repair: bool) -> None:
        self.away.add(node)
        self.free.discard(node)
        self.push(now + hours, "back", (node, repair))

    def fault(self, now: float, node: int, cat: str) -> None:
        cls, nature, named = INFRA[cat]
        job = self.busy.get(node)
        if nature == "node" and self.rng.random() < self.a["persist"]:
            self.broken[node] = (cls, named)
            self.push(now + self.rng.expovariate(1 / self.a["health_check_h"]), "drain", node)
        if job is not None:
            self.fail(job, now, cls, nature, node, named)
        if cat == "host_maintenance" and node not in self.away:
            self.take_away(node, now, self.a["maintenance_h"], repair=False)

    # -- scheduling -----------------------------------------------------------------------------
    def schedule(self, now: float) -> None:
        if not self.queue or not self.free:
            return
        started = []
        head_wait = now - self.queue[0][0]
        for i, (_, _, job) in enumerate(self.queue[:300]):
            if i > 0 and head_wait > 6.0:
                break  # the head has waited long: stop backfilling past it
            if not self.free:
                break
            nodes = self.place(job)
            if nodes is None:
                continue
            started.append(i)
            self.start(job, nodes, now)
        for i in reversed(started):
            del self.queue[i]

    def place(self, job: Job) -> list[int] | None:
        need = job.spec.nodes
        ok = self.free - job.excluded
        if len(ok) < need:
            return None
        same = job.is_retry and job.prev and all(n in ok for n in job.prev)
        if same and self.rng.random() < self.a["p_same_nodes"]:
            return list(job.prev)
        return self.rng.sample(sorted(ok), need)

    def start(self, job: Job, nodes: list[int], now: float) -> None:
        a = self.a
        job.alloc = nodes
        job.seq += 1
        job.start = now
        for n in nodes:
            self.free.discard(n)
            self.busy[n] = job
        remaining = job.spec.work - job.progress
        end, outcome = now + a["restart_h"] + remaining, ("ok",)
        sp = job.spec
        if sp.fault_class and not job.fixed and sp.fault_at >= job.progress:
            t = now + a["restart_h"] + (sp.fault_at - job.progress)
            if t < end:
                end, outcome = t, ("fail", sp.fault_class, sp.fault_nature, None, 1.0)
        for n in nodes:
            if n in self.broken:
                t = now + self.rng.expovariate(1 / a["broken_fail_h"])
                if t < end:
                    cls, named = self.broken[n]
                    end, outcome = t, ("fail", cls, "node", n, named)
        self.push(end, "end", (job, job.seq, outcome))

    def release(self, job: Job) -> None:
        for n in job.alloc:
            self.busy.pop(n, None)
            if n not in self.away:
                self.free.add(n)
        job.prev, job.alloc = job.alloc, []

    # -- outcomes ------------------------------------------------------------------------------
    def end(self, job: Job, now: float, outcome: tuple) -> None:
        if outcome[0] == "ok":
            self.note_outcome(job, None)
            for failed_at, _ in job.pending:
                self.m["recoveries"].append(job.start - failed_at)
            job.pending = []
            job.progress = job.spec.work
            job.done = now
            self.release(job)
            return
        _, cls, nature, node, named = outcome
        self.fail(job, now, cls, nature, node, named)

    def note_outcome(self, job: Job, cls: str | None) -> None:
        """An attempt ended: if it was a rerun of a failure, record whether it passed that failure."""
        prev = job.last_class
        if prev is None or not (job.is_retry or job.after_fix):
            return
        ok = cls != prev
        for key in (("fp", (job.spec.id, prev)), ("class", prev)):
            c = self.counts[key]
            if job.is_retry:
                c[0] += 1
                c[1] += ok
            else:
                c[2] += 1
                c[3] += ok

    def fail(self, job: Job, now: float, cls: str, nature: str, node: int | None, named: float) -> None:
        a, m = self.a, self.m
        gpus = job.spec.nodes * 8
        run = max(0.0, now - job.start - a["restart_h"])
        reached = job.progress + run
        kept = max(job.progress, math.floor(reached / a["ckpt_h"]) * a["ckpt_h"])
        lost = (now - job.start - (kept - job.progress)) * gpus
        m["failures"] += 1
        m["gpu_h_failed_all"] += lost
        if job.is_retry:
            m["failed_retries"] += 1
            m["gpu_h_failed_retries"] += lost
            m["retry_loss_by_class"][f"{cls} ({nature})"] += lost
        self.note_outcome(job, cls)
        # a rerun that did not get past the earlier failures: they stay pending
        keep = [(t0, c) for t0, c in job.pending if c == cls]
        for t0, _c in job.pending:
            if _c != cls:
                self.m["recoveries"].append(job.start - t0)
        job.pending = [*keep, (now, cls)]
        job.progress = kept
        job.last_class = cls
        job.seq += 1
        self.release(job)
        if node is None and nature == "node":
            node = job.prev[0] if job.prev else None
        delay, auto, fix, exclude = self.decide(job, cls, nature, node, named)
        m["decisions"][self.last_decision] += 1
        job.is_retry, job.after_fix = auto, not auto
        if auto:
            m["auto_retries"] += 1
            job.auto_left -= 1
        else:
            m["human"] += 1
            job.auto_left = a["max_attempts"] - 1
        if fix:
            job.fixed = True
        job.excluded |= exclude
        m["gpu_h_waiting"] += delay * gpus
        self.push(now + delay, "ready", job)

    # -- policies ------------------------------------------------------------------------------
    def person(self, nature: str, node: int | None, investigate: bool = True) -> tuple:
        """A person looks (notice, investigate unless told) and does the right thing."""
        a = self.a
        delay = a["t_notice_h"] + (a["t_investigate_h"] if investigate else 0.0)
        if nature in ("repeat", "stop"):
            return delay + a["t_fix_h"], False, True, set()
        return delay, False, False, {node} if nature == "node" and node is not None else set()

    def decide(self, job: Job, cls: str, nature: str, node: int | None, named: float) -> tuple:
        p, a = self.policy, self.a
        auto_ok = job.auto_left > 0
        if p == "never-retry":
            self.last_decision = "person"
            return self.person(nature, node)
        if p == "oracle":
            self.last_decision = {"repeat": "fix", "stop": "fix", "node": "exclude"}.get(nature, "retry")
            if nature in ("repeat", "stop"):
                return self.person(nature, node, investigate=False)
            return 0.0, True, False, {node} if nature == "node" and node is not None else set()
        if p == "always-retry":
            self.last_decision = "retry" if auto_ok else "person"
            return (0.0, True, False, set()) if auto_ok else self.person(nature, node)
        # logtriage: the table's decision for the class
        if cls not in self.table or self.rng.random() < a["p_unknown"]:
            decision, ambiguous = "investigate", False
        else:
            decision, ambiguous = self.table[cls]
        if p == "logtriage+history" and decision != "investigate":
            act = Action(decision=decision, why=[], ambiguous=ambiguous)  # type: ignore[arg-type]
            counts = {
                "fingerprint": tuple(self.counts[("fp", (job.spec.id, cls))]),
                "class": tuple(self.counts[("class", cls)]),
            }
            decided = with_history(act, counts).decision
            self.m["history_flips"] += decided != decision
            decision = decided  # type: ignore[assignment]
        self.last_decision = decision
        if decision in ("retry", "retry_excluding") and auto_ok:
            hosts: set[int] = set()
            if decision == "retry_excluding" and node is not None and self.rng.random() < named:
                hosts = {node}  # the log names the host; none named: the hook reruns as it is
            return 0.0, True, False, hosts
        if decision in ("fix_and_rerun", "stop") and nature in ("repeat", "stop"):
            return self.person(nature, node, investigate=False)
        return self.person(nature, node)  # investigate, a fix where nothing is broken, retries used up

    # -- report --------------------------------------------------------------------------------
    def report(self, jobs: list[Job]) -> dict[str, Any]:
        m = self.m
        rec = sorted(m["recoveries"])
        unrec = sum(len(j.pending) for j in jobs if j.spec.submit < self.t.horizon)
        return {
            "policy": self.policy,
            "jobs_submitted": len(jobs),
            "jobs_finished": sum(j.done is not None for j in jobs),
            "failures": m["failures"],
            "auto_retries": m["auto_retries"],
            "failed_retries": m["failed_retries"],
            "gpu_h_failed_retries": round(m["gpu_h_failed_retries"], 1),
            "gpu_h_failed_all": round(m["gpu_h_failed_all"], 1),
            "gpu_h_waiting": round(m["gpu_h_waiting"], 1),
            "human_interventions": m["human"],
            "history_flips": m["history_flips"],
            "recovery_h_median": round(statistics.median(rec), 2) if rec else None,
            "recovery_h_mean": round(statistics.fmean(rec), 2) if rec else None,
            "recovery_h_p90": round(rec[int(0.9 * (len(rec) - 1))], 2) if rec else None,
            "recovered": len(rec),
            "unrecovered_at_end": unrec,
            "decisions": dict(sorted(m["decisions"].items())),
            "gpu_h_failed_retries_by_class": {
                k: round(v, 1) for k, v in sorted(m["retry_loss_by_class"].items(), key=lambda kv: -kv[1])
            },
        }


def simulate(
    seed: int = 1,
    nodes: int = 512,
    days: float = 14.0,
    verdicts: Path = VERDICTS,
    policies: tuple[str, ...] = POLICIES,
    overrides: dict[str, float] | None = None,
    reps: int = 1,
) -> dict[str, Any]:
    """Every policy on the same trace; `overrides` replaces numeric entries of ASSUMED. With
    reps > 1 each policy runs that many times on the trace (other draws for placement, the
    unknown share, broken-node timing) and the figures are the means."""
    a = {**ASSUMED, **(overrides or {})}
    trace = make_trace(seed, nodes, days, a)
    table = load_table(verdicts)
    results = [mean_of([Sim(trace, p, table, seed, a, k).run() for k in range(reps)]) for p in policies]
    base = next((r for r in results if r["policy"] == "always-retry"), None)
    for r in results:
        if base and base["gpu_h_failed_retries"]:
            r["failed_retry_gpu_h_vs_always_retry"] = round(
                r["gpu_h_failed_retries"] / base["gpu_h_failed_retries"], 3
            )
    return {
        "seed": seed,
        "nodes": nodes,
        "gpus": nodes * 8,
        "days": days,
        "reps": reps,
        "lemons": len(trace.lemons),
        "jobs": len(trace.jobs),
        "node_faults": len(trace.node_faults),
        "jobs_with_own_fault": sum(j.fault_class is not None for j in trace.jobs),
        "verdicts": str(verdicts),
        "overrides": overrides or {},
        "results": results,
    }


def mean_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of each figure over repeated runs of one policy (one run: itself)."""
    if len(runs) == 1:
        return runs[0]
    out: dict[str, Any] = {"policy": runs[0]["policy"], "reps": len(runs)}
    for key, first in runs[0].items():
        if key == "policy":
            continue
        if isinstance(first, dict):
            keys = sorted({k for r in runs for k in r[key]})
            out[key] = {k: round(statistics.fmean(r[key].get(k, 0) for r in runs), 1) for k in keys}
        else:
            vals = [r[key] for r in runs if r[key] is not None]
            out[key] = round(statistics.fmean(vals), 2) if vals else None
    return out


def target(out: dict[str, Any], policy: str = "logtriage+history") -> dict[str, Any]:
    by = {r["policy"]: r for r in out["results"]}
    base, lt = by["always-retry"], by[policy]
    cut = 1 - lt["gpu_h_failed_retries"] / base["gpu_h_failed_retries"] if base["gpu_h_failed_retries"] else 0
    return {
        "policy": policy,
        "failed_retry_gpu_h_cut": round(cut, 3),
        "jobs_finished_delta": round(lt["jobs_finished"] - base["jobs_finished"], 2),
        "holds": cut >= 0.5 and lt["jobs_finished"] >= base["jobs_finished"],
    }


def markdown(out: dict[str, Any]) -> str:
    cols = [
        ("policy", "policy"),
        ("jobs_finished", "jobs finished"),
        ("failures", "failures"),
        ("auto_retries", "auto retries"),
        ("failed_retries", "failed retries"),
        ("gpu_h_failed_retries", "GPU-h lost to failed retries"),
        ("gpu_h_failed_all", "GPU-h lost, all failed attempts"),
        ("gpu_h_waiting", "job GPU-h waiting"),
        ("recovery_h_median", "recovery h (median)"),
        ("recovery_h_mean", "recovery h (mean)"),
        ("recovery_h_p90", "recovery h (p90)"),
        ("unrecovered_at_end", "unrecovered at end"),
        ("human_interventions", "human interventions"),
    ]
    reps = f", mean of {out['reps']} runs per policy" if out["reps"] > 1 else ""
    lines = [
        f"{out['gpus']} GPUs ({out['nodes']} nodes, {out['lemons']} lemons), {out['days']:g} days, "
        f"seed {out['seed']}{reps}: {out['jobs']} jobs ({out['jobs_with_own_fault']} with a fault of their "
        f"own), {out['node_faults']} node faults"
        + (f"; assumptions changed: {out['overrides']}" if out["overrides"] else ""),
        "",
        "| " + " | ".join(h for _, h in cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for r in out["results"]:
        lines.append("| " + " | ".join(str(r[k]) for k, _ in cols) + " |")
    for p in ("logtriage", "logtriage+history"):
        if any(r["policy"] == p for r in out["results"]):
            t = target(out, p)
            lines.append(
                f"\n{p} vs always-retry: {t['failed_retry_gpu_h_cut']:.0%} fewer GPU-h lost to failed "
                f"retries, {t['jobs_finished_delta']:+g} jobs finished; target holds: {t['holds']}"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=1, help="run seeds seed..seed+N-1 and show each")
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--verdicts", type=Path, default=VERDICTS)
    ap.add_argument("--reps", type=int, default=1, help="runs of each policy per trace, figures averaged")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a numeric assumption, e.g. --set health_check_h=24 --set p_unknown=0.25",
    )
    args = ap.parse_args()
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if not isinstance(ASSUMED.get(key), (int, float)):
            numeric = sorted(k for k, v in ASSUMED.items() if isinstance(v, (int, float)))
            ap.error(f"--set {item}: not a numeric assumption ({', '.join(numeric)})")
        overrides[key] = type(ASSUMED[key])(float(value))
    seeds = range(args.seed, args.seed + args.seeds)
    outs = [
        simulate(s, args.nodes, args.days, args.verdicts, overrides=overrides, reps=args.reps) for s in seeds
    ]
    if args.json:
        for o in outs:
            o["target"] = target(o)
        print(json.dumps(outs[0] if len(outs) == 1 else outs, indent=1))
    else:
        print("\n\n".join(markdown(o) for o in outs))


if __name__ == "__main__":
    main()
