#!/usr/bin/env python3
"""The bad day: a burst of failed-job hooks at once, against a trivial endpoint in the same run.

    python bench/burst_bench.py [--hooks 200] [--hook-size 1M] [--workers 2] [--rounds 1]
    python bench/burst_bench.py --only-single [--single-n 20] [--rounds 3]   # one hook alone only
    python bench/burst_bench.py --only-single --floor ...   # and the analysis alone, in process
    python bench/burst_bench.py --seed 100000 ...   # on a database in use, not an empty one

Both servers run `--workers 2` on PostgreSQL, bound to 127.0.0.1:
- `logtriage serve` (its own database `logtriage_burst`, dropped at the end);
- bench/trivial_app.py: reads the body, writes and fsyncs it, inserts a row. Nothing else.

Each hook posts from its own loopback address (127.1.x.y: in an incident they come from as many
nodes) a distinct ~1 MB log of ordinary training-metric lines (Megatron iteration lines,
verl step lines) ending in a CUDA OOM, on its own connection; all are released together. A
hook does what `logtriage submit` does: on 429/503 it waits `Retry-After` and posts again (same
Idempotency-Key); on 202 it is accepted and the analysis finishes in the background.
Meanwhile a probe opens a new connection to `/healthz` every 20 ms, as a liveness probe would:
on the service port (`healthz_ms`) and, for logtriage, on the supervisor's health port
(`serve --health-port`, `health_port_healthz_ms`), where a kubelet's liveness probe points.

Reported per server: statuses, POST latency p50/p99/max (each attempt, and each hook end to end),
`/healthz` p50/p99/max during the burst, one hook alone (20 sequential posts, median), for
logtriage how many of the hooks' analyses ended `done` (polled until all finish), and the CPU
seconds each server's processes spent on the round (`cpu_s`: supervisor, web processes, scan
workers, up to the last answer; for logtriage also `cpu_s_to_done`, up to its last analysis
done, the polls that waited for them included). Targets
(issue 20): 0 5xx, all stored done, `/healthz` max < 100 ms, POST p99 within 3x the trivial
endpoint's, one hook within 5x. Results: bench/out/burst.json.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))

import load_bench  # noqa: E402  (its PostgreSQL helper)

PG_DB = "logtriage_burst"
OOM_TAIL = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/workspace/Megatron-LM/megatron/training/training.py", line 1204, in train_step\n'
    "[rank0]:     losses_reduced = forward_backward_func(\n"
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
    "capacity of 79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has "
    "78.07 GiB memory in use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.31 GiB is "
    "reserved by PyTorch but unallocated.\n"
)


def metric_log(size: int, seed: int) -> bytes:
    """~`size` bytes of healthy metric lines as Megatron and verl print them."""
    rng = random.Random(seed)
    out: list[str] = []
    n = 0
    it = 0
    loss = 2.9
    while n < size:
        it += 1
        loss = max(0.8, loss - rng.uniform(0, 0.002) + rng.uniform(-0.01, 0.01))
        if it % 4:
            line = (
                f"[2026-11-20 10:{it // 60 % 60:02d}:{it % 60:02d}] iteration {it:8d}/  500000 | "
                f"consumed samples: {it * 256:12d} | elapsed time per iteration (ms): "
                f"{rng.uniform(900, 1100):.1f} | learning rate: {3e-4 * (1 - it / 5e5):.6E} | "
                f"global batch size:   256 | lm loss: {loss:.6E} | loss scale: 1.0 | "
                f"grad norm: {rng.uniform(0.2, 1.5):.3f} | number of skipped iterations:   0 | "
                f"number of nan iterations:   0 |\n"
            )
        else:
            line = (
                f"(TaskRunner pid=4121) step:{it} - actor/pg_loss:{rng.uniform(-0.1, 0.1):.6f} - "
                f"actor/entropy:{rng.uniform(0.3, 0.6):.6f} - actor/grad_norm:{rng.uniform(0.1, 0.9):.6f} - "
                f"critic/score/mean:{rng.uniform(0, 1):.6f} - "
                f"response_length/mean:{rng.uniform(200, 900):.1f} - timing_s/gen:{rng.uniform(20, 40):.3f}"
                f" - timing_s/update_actor:{rng.uniform(10, 20):.3f}\n"
            )
        out.append(line)
        n += len(line)
    return "".join(out).encode()


def seed_store(url: str, n: int, oom: bytes) -> None:
    """A database that has been in use: `n` stored analyses over the last six days, half of them
    the burst's own OOM from as many jobs (the common failure an incident adds to), the rest the
    web bench's real samples over 2,000 jobs, on 600 hosts. Stored as completion stores them
    (backtest_bench's `seed`), 10,000 at a time, each lot ANALYZEd as autovacuum would (this
    machine's PostgreSQL runs with it off; without statistics the planner guesses, and 100,000
    took 1,206 s instead of ~90)."""
    import datetime as dt
    import importlib
    import io

    from app.db import repo
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.scan import CompiledLibrary, Source
    from app.engine.pipeline.triage import TriageOptions, triage
    from app.service.worker import _rule_texts

    # imported after `app`: both put this checkout first on sys.path, and a run against another
    # checkout (PYTHONPATH) must seed with that one's schema
    web_bench = importlib.import_module("web_bench")
    backtest_bench = importlib.import_module("backtest_bench")

    samples = web_bench.results()
    compiled = CompiledLibrary(load_library())
    oom_result = triage(
        sources=[Source(name="hook.log", stream=io.BytesIO(oom), rank_hint=None)],
        compiled=compiled,
        options=TriageOptions(jobs=1),
    ).model_dump(mode="json")
    oom_rules = list(_rule_texts(compiled, oom_result))
    rng = random.Random(20)
    now = dt.datetime.now(dt.UTC)
    items: list[tuple[dict[str, Any], list[Any], dt.datetime, Any]] = []
    for i in range(n):
        oom_one = i % 2 == 0
        analysis, rules = (oom_result, oom_rules) if oom_one else samples[i % len(samples)]
        meta = repo.JobMeta(
            source="api",
            job_id=f"seed-oom-{i}" if oom_one else f"seed-job-{rng.randrange(2000)}",
            host=f"gpu-node-{rng.randrange(600):03d}",
        )
        items.append((analysis, rules, now - dt.timedelta(seconds=rng.randrange(60, 6 * 86400)), meta))
        if len(items) == 10_000 or i == n - 1:
            backtest_bench.seed(url, items)
            items = []


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of a server's processes, by depth: the supervisor, its
    children (the web processes) and theirs (logtriage's scan workers). A process that ended
    takes its seconds with it: the figures are for processes alive at both readings."""
    import psutil  # the dev extra, as api_upload_bench and loss_bench use it

    def cpu(procs: list[psutil.Process]) -> float:
        total = 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    top = psutil.Process(pid)
    web = top.children()
    deeper = [c for w in web for c in w.children(recursive=True)]
    return {"supervisor": cpu([top]), "web": cpu(web), "scan": cpu(deeper)}


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 2) for k in before}


class Server:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int, ready: str) -> None:
        self.name, self.port, self.ready = name, port, ready
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(OUT / f"burst-{name}.log").open("w"),
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", self.ready)
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"burst_bench: {self.name} exited; see bench/out/burst-{self.name}.log")
            time.sleep(0.25)
        raise SystemExit(f"burst_bench: {self.name} did not become ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def post(
    port: int, path: str, body: bytes, key: str, source: str | None = None
) -> tuple[int, float, dict[str, str], bytes]:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=600, source_address=(source, 0) if source else None
    )
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "text/plain", "Idempotency-Key": key})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, time.perf_counter() - t0, dict(resp.getheaders()), data
    finally:
        conn.close()


def hook(port: int, path: str, body: bytes, key: str, deadline: float, source: str) -> dict[str, Any]:
    """One hook as `logtriage submit` runs it: retry 429/503 after Retry-After, same key."""
    attempts: list[tuple[int, float]] = []
    t0 = time.perf_counter()
    while True:
        try:
            status, took, headers, data = post(port, path, body, key, source)
        except OSError as exc:
            attempts.append((-1, 0.0))
            return {"status": -1, "error": type(exc).__name__, "attempts": attempts}
        attempts.append((status, took))
        if status in (429, 503) and time.monotonic() < deadline:
            time.sleep(float(headers.get("retry-after", headers.get("Retry-After", "1")) or 1))
            continue
        res: dict[str, Any] = {"status": status, "attempts": attempts, "total": time.perf_counter() - t0}
        with contextlib.suppress(ValueError):
            res["id"] = json.loads(data).get("id")
        return res


def _probe(port: int, stop: Any, out: Any) -> None:
    with contextlib.suppress(OSError):  # back to normal priority: the hooks' process runs niced
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    lat: list[float] = []
    slow: list[tuple[float, float]] = []
    failures = 0
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.connect()
            t1 = time.perf_counter()
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
        except OSError:
            ok = False
        if ok:
            lat.append(time.perf_counter() - t0)
            if lat[-1] > 0.1:  # where a slow one waited: the accept queue, or the answer
                slow.append((round(t1 - t0, 3), round(time.perf_counter() - t1, 3)))
        else:
            failures += 1
        stop.wait(0.02)
    out.put((lat, failures, slow))


class Probe:
    """/healthz on a new connection every 20 ms, as a liveness probe would, from its own process
    (in the hooks' process it would time the client's GIL, not the server)."""

    def __init__(self, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self._out = ctx.Queue()
        self._proc = ctx.Process(target=_probe, args=(port, self.stop, self._out), daemon=True)
        self.lat: list[float] = []
        self.failures = 0
        self.slow: list[tuple[float, float]] = []  # (connect s, answer s) of probes over 100 ms

    def start(self) -> None:
        self._proc.start()

    def join(self) -> None:
        self.lat, self.failures, self.slow = self._out.get(timeout=60)
        self._proc.join(10)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def ms(v: float) -> float:
    return round(v * 1000, 1)


def burst(
    port: int, path: str, bodies: list[bytes], tag: str, health_port: int | None = None
) -> dict[str, Any]:
    results: list[dict[str, Any] | None] = [None] * len(bodies)
    go = threading.Barrier(len(bodies))
    deadline = time.monotonic() + 600

    def run(i: int) -> None:
        go.wait()
        # each failed job's hook runs on its own node: its own address (all of 127/8 is loopback)
        results[i] = hook(port, path, bodies[i], f"{tag}-{i}", deadline, f"127.1.{i // 250}.{i % 250 + 1}")

    # the service port's /healthz always; the supervisor's health port (`serve --health-port`),
    # where a liveness probe should point, when there is one
    probes = {"healthz_ms": Probe(port)}
    if health_port is not None:
        probes["health_port_healthz_ms"] = Probe(health_port)
    for probe in probes.values():
        probe.start()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    for probe in probes.values():
        probe.stop.set()
    for probe in probes.values():
        probe.join()
    done = [r for r in results if r is not None]
    attempts = [a for r in done for a in r["attempts"]]
    post_lat = [t for s, t in attempts if s > 0]
    totals = [r["total"] for r in done if "total" in r]
    return {
        "seconds": round(took, 2),
        "final_statuses": dict(Counter(r["status"] for r in done)),
        "attempt_statuses": dict(Counter(s for s, _ in attempts)),
        "server_errors": sum(1 for s, _ in attempts if (s >= 500 and s != 503) or s < 0),
        "post_ms": {"p50": ms(pct(post_lat, 0.5)), "p99": ms(pct(post_lat, 0.99)), "max": ms(max(post_lat))},
        "hook_total_ms": {"p50": ms(pct(totals, 0.5)), "p99": ms(pct(totals, 0.99))},
        **{
            name: {
                "n": len(probe.lat),
                "p50": ms(pct(probe.lat, 0.5)),
                "p99": ms(pct(probe.lat, 0.99)),
                "max": ms(max(probe.lat or [float("nan")])),
                "failures": probe.failures,
                "slow_connect_answer_s": probe.slow,
            }
            for name, probe in probes.items()
        },
        "ids": [r.get("id") for r in done],
    }


def single(port: int, path: str, body: bytes, tag: str, n: int = 20) -> float:
    lat = []
    for i in range(n):
        status, took, _, _ = post(port, path, body + f"single {tag} {i}\n".encode(), f"{tag}-single-{i}")
        if status not in (200, 201, 202):
            raise SystemExit(f"burst_bench: single hook got HTTP {status}")
        lat.append(took)
    return statistics.median(lat)


def analysis_alone_ms(body: bytes, data_dir: Path, n: int = 20) -> float:
    """The median wall time of `scan_upload` of `body` in this process, after a warm-up: what the
    service does for a hook beyond what the trivial endpoint does (receive, write, insert), before
    it stores the result. (trivial + this) / trivial is a floor under one hook's ratio."""
    os.environ["LOGTRIAGE_DATA_DIR"] = str(data_dir)  # the servers have their environment already
    if str(BENCH.parent) not in sys.path:
        sys.path.insert(0, str(BENCH.parent))
    from app.service.jobs import InputFile, ScanJob
    from app.service.worker import init_worker, scan_upload

    init_worker({})
    walls: list[float] = []
    for i in range(n + 3):
        t0 = time.perf_counter()
        scan_upload(ScanJob(files=(InputFile("hook.log", "", data=body + f"alone {i}\n".encode()),)))
        if i >= 3:
            walls.append(time.perf_counter() - t0)
    return ms(statistics.median(walls))


def wait_done(port: int, ids: list[str], timeout: float) -> Counter[str]:
    """Poll each analysis until it is no longer pending (as the hook's submit would)."""
    left = set(ids)
    states: Counter[str] = Counter()
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for aid in list(left):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", f"/api/v1/analyses/{aid}")
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                continue
            status = json.loads(data).get("status")
            if status != "pending":
                states[status] += 1
                left.discard(aid)
        if left:
            time.sleep(0.5)
    states["still_pending"] = len(left)
    return states


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hooks", type=int, default=200)
    p.add_argument("--hook-size", type=int, default=1_000_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--port", type=int, default=18481)
    p.add_argument("--only", choices=("logtriage", "trivial"), default=None)
    p.add_argument("--client-nice", type=int, default=10, help="CPU niceness of the hooks (0: none)")
    p.add_argument(
        "--only-single",
        action="store_true",
        help="only the one-hook-alone figure (no burst): a quick before/after of one hook's latency",
    )
    p.add_argument("--single-n", type=int, default=20, help="sequential posts per one-hook-alone median")
    p.add_argument(
        "--floor",
        action="store_true",
        help="also time the analysis alone in this process after each round's one hook (`scan_upload` "
        "of the same log): one hook's floor, (trivial + analysis) / trivial, against the 5x target",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="store this many analyses first (half the burst's failure, from as many jobs): a "
        "database in use, not an empty one",
    )
    p.add_argument(
        "--db",
        default=PG_DB,
        help="PostgreSQL database to create and drop (another checkout may run the bench)",
    )
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    lt = shutil.which("logtriage", path=str(Path(sys.executable).parent)) or "logtriage"
    base = metric_log(args.hook_size - len(OOM_TAIL) - 64, 7)
    load_bench._psql(f"DROP DATABASE IF EXISTS {args.db}")
    load_bench._psql(f"CREATE DATABASE {args.db}")
    data = Path(tempfile.mkdtemp(prefix="logtriage-burst-"))
    env = {**os.environ, "LOGTRIAGE_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.db}"}
    env["LOGTRIAGE_DATA_DIR"] = str(data / "lt")
    env["TRIVIAL_DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:5432/{args.db}"
    env["TRIVIAL_DATA_DIR"] = str(data / "trivial")
    servers: dict[str, tuple[Server, str]] = {}
    report: dict[str, Any] = {
        "hooks": args.hooks,
        "hook_bytes": len(base) + len(OOM_TAIL),
        "seeded_analyses": args.seed,
        "rounds": [],
    }
    try:
        if args.seed:
            t0 = time.monotonic()
            seed_store(env["LOGTRIAGE_DATABASE_URL"], args.seed, base + OOM_TAIL.encode())
            print(f"burst_bench: {args.seed} analyses stored in {time.monotonic() - t0:.0f} s", flush=True)
        if args.only in (None, "trivial"):
            servers["trivial"] = (
                Server(
                    "trivial",
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "trivial_app:app",
                        "--app-dir",
                        str(BENCH),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(args.port + 1),
                        "--workers",
                        str(args.workers),
                        "--log-level",
                        "warning",
                        "--no-access-log",
                    ],
                    env,
                    args.port + 1,
                    "/healthz",
                ),
                "/ingest",
            )
        if args.only in (None, "logtriage"):
            servers["logtriage"] = (
                Server(
                    "logtriage",
                    [
                        lt,
                        "serve",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(args.port),
                        "--workers",
                        str(args.workers),
                        "--health-port",
                        str(args.port + 2),
                    ],
                    env,
                    args.port,
                    "/readyz",
                ),
                "/api/v1/analyses",
            )
        for srv, _ in servers.values():
            srv.wait_ready()
        # the hooks stand for 200 other machines: their client work must not take the servers'
        # cores (on 2 cores, 200 client threads pushing 200 MB slowed even the trivial endpoint's
        # /healthz to half a second); the probe (its own process) runs at normal priority
        if args.client_nice:
            os.nice(args.client_nice)
        for name, (srv, path) in servers.items():  # warm: first-use imports, statement caches
            for i in range(4 * args.workers):
                post(
                    srv.port,
                    path + f"?job_id=warm-{i}",
                    base[:50_000] + OOM_TAIL.encode(),
                    f"warm-{name}-{i}",
                )
        for rnd in range(args.rounds):
            row: dict[str, Any] = {}
            for name, (srv, path) in servers.items():
                tag = f"r{rnd}-{name}"
                row[f"{name}_single_ms"] = ms(
                    single(srv.port, path, base + OOM_TAIL.encode(), tag, n=args.single_n)
                )
                if args.floor and name == "logtriage" and "trivial_single_ms" in row:
                    alone = analysis_alone_ms(base + OOM_TAIL.encode(), data / "floor", n=args.single_n)
                    row["analysis_alone_ms"] = alone
                    trivial = row["trivial_single_ms"]
                    row["floor_ratio"] = round((trivial + alone) / trivial, 2)
                if args.only_single:
                    continue
                bodies = [
                    base + f"[rank0]: job {tag}-{i} starting its last step\n".encode() + OOM_TAIL.encode()
                    for i in range(args.hooks)
                ]
                hp = args.port + 2 if name == "logtriage" else None
                cpu0 = tree_cpu(srv.proc.pid)
                res = burst(srv.port, path + f"?job_id={tag}", bodies, tag, hp)
                res["cpu_s"] = cpu_used(cpu0, tree_cpu(srv.proc.pid))  # to the last answer
                ids = res.pop("ids")
                if name == "logtriage":
                    res["analyses"] = dict(wait_done(srv.port, [i for i in ids if i], 900))
                    # to the last analysis done, the polls that waited for it included
                    res["cpu_s_to_done"] = cpu_used(cpu0, tree_cpu(srv.proc.pid))
                row[name] = res
            report["rounds"].append(row)
            print(json.dumps(row, indent=1))
        if not args.only_single:  # a quick rerun leaves the last full report as it was
            (OUT / "burst.json").write_text(json.dumps(report, indent=2))
        return 0
    finally:
        for srv, _ in servers.values():
            srv.stop()
        shutil.rmtree(data, ignore_errors=True)
        load_bench._psql(f"DROP DATABASE IF EXISTS {args.db}")


if __name__ == "__main__":
    sys.exit(main())
