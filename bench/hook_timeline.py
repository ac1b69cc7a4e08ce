#!/usr/bin/env python3
"""Where one hook's time goes: a stage-by-stage timeline of `POST /api/v1/analyses` on the real
server, across its web process and its scan worker.

    python -P bench/hook_timeline.py [--n 40] [--workers 2] [--stages receive,...] [--db NAME]

Starts `logtriage serve --workers N` on PostgreSQL (its own database, dropped at the end) with a
`sitecustomize` on its PYTHONPATH that wraps the named functions of the service where their
modules are imported, in every process of the server (web processes and spawned scan workers
alike), and records each call's start and end (`time.perf_counter`, CLOCK_MONOTONIC: comparable
between processes on one host). Then posts `--n` distinct ~1 MB hooks (burst_bench's metric
log ending in a CUDA OOM, with an Idempotency-Key), one after the other, and prints for each
stage the median start, end and duration in ms from the start of its request's first stage
(`receive` by default; each hook is one request on its own connection, so a call belongs to the
request whose first stage started last before it), with the client's median latency. Nothing
of this runs in the service when the bench is not running it: the wrappers exist only in the
server this script starts.

A stage is `module:Qualified.name` (`--no-key`: post without an Idempotency-Key, so no
reservation runs beside the scan); a name that no longer exists is reported, not skipped
silently. Stages that do not run for every hook (a replay, a 202) show fewer calls.
"""

from __future__ import annotations

import argparse
import bisect
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import burst_bench  # noqa: E402  (its server runner, hook log and post)
import load_bench  # noqa: E402  (its PostgreSQL helper)

STAGES = (
    "app.http.upload:receive",
    "app.service.analyses:AnalysisService._begin",
    "app.service.pool:ScanPool.call",
    "app.service.worker:scan_upload",
    "app.engine.pipeline.triage:triage",
    "app.service.analyses:AnalysisService._persist_batch",
    "app.service.analyses:commit_blobs",
    "app.db.repo.completion:complete_analyses",
    "app.service.ops:settle",
)

# installed in the server's processes only (PYTHONPATH of the server this bench starts)
SITECUSTOMIZE = """
import atexit, functools, importlib.util, inspect, os, sys, threading, time

_spec = os.environ.get("LT_TIMELINE")
_dir = os.environ.get("LT_TIMELINE_DIR")
if _spec and _dir:
    _buf = []
    _lock = threading.Lock()

    def _dump():
        with _lock:
            # the wrappers append without the lock: take only what is there now
            n = len(_buf)
            lines = _buf[:n]
            del _buf[:n]
        if lines:
            with open(os.path.join(_dir, f"{os.getpid()}.txt"), "a") as f:
                f.write("".join(lines))

    atexit.register(_dump)

    def _flusher():
        while True:
            time.sleep(0.2)
            _dump()

    threading.Thread(target=_flusher, daemon=True, name="timeline-flush").start()

    def _wrap(fn, name):
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def awrapped(*a, **k):
                t = time.perf_counter()
                try:
                    return await fn(*a, **k)
                finally:
                    _buf.append(f"{name} {t:.6f} {time.perf_counter():.6f} {os.getpid()}\\n")
            return awrapped

        @functools.wraps(fn)
        def wrapped(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                _buf.append(f"{name} {t:.6f} {time.perf_counter():.6f} {os.getpid()}\\n")
        return wrapped

    _wanted = {}
    for item in _spec.split(","):
        mod, _, qual = item.partition(":")
        _wanted.setdefault(mod, []).append(qual)

    class _Finder:
        def find_spec(self, name, path=None, target=None):
            if name not in _wanted:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module, _run=run, _name=name):
                _run(module)
                for qual in _wanted[_name]:
                    *outer, last = qual.split(".")
                    obj = module
                    try:
                        for part in outer:
                            obj = getattr(obj, part)
                        setattr(obj, last, _wrap(getattr(obj, last), f"{_name}:{qual}"))
                    except AttributeError:
                        _buf.append(f"MISSING {_name}:{qual}\\n")

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())
"""


def read_events(trace: Path) -> tuple[list[tuple[float, float, str]], set[str]]:
    events: list[tuple[float, float, str]] = []
    missing: set[str] = set()
    for f in trace.glob("*.txt"):
        for line in f.read_text().splitlines():
            parts = line.split()
            if parts[0] == "MISSING":
                missing.add(parts[1])
            elif len(parts) == 4:
                events.append((float(parts[1]), float(parts[2]), parts[0]))
    events.sort()
    return events, missing


def timeline(
    events: list[tuple[float, float, str]], stages: list[str]
) -> list[tuple[str, int, float, float]]:
    """Per stage: (name, calls, median start, median end) in ms from its request's first stage;
    a call belongs to the request whose first stage started last before it (posts are
    sequential). `events` are sorted by start."""
    starts = [e[0] for e in events if e[2] == stages[0]]
    rows: dict[str, list[tuple[float, float]]] = {s: [] for s in stages}
    for i, t0 in enumerate(starts):
        t1 = starts[i + 1] if i + 1 < len(starts) else float("inf")
        seen: set[str] = set()
        for a, b, name in events[bisect.bisect_left(events, (t0,)) : bisect.bisect_left(events, (t1,))]:
            if name in rows and name not in seen:
                seen.add(name)
                rows[name].append(((a - t0) * 1e3, (b - t0) * 1e3))
    nan = float("nan")
    return [
        (
            name,
            len(v),
            statistics.median(x[0] for x in v) if v else nan,
            statistics.median(x[1] for x in v) if v else nan,
        )
        for name, v in rows.items()
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=40, help="sequential hooks (after a warm-up of 8)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--port", type=int, default=18491)
    p.add_argument("--db", default="logtriage_timeline")
    p.add_argument("--stages", default=",".join(STAGES), help="module:Qualified.name, comma-separated")
    p.add_argument("--no-key", action="store_true", help="post without an Idempotency-Key (no reservation)")
    args = p.parse_args()
    stages = [s for s in args.stages.split(",") if s]
    burst_bench.OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="logtriage-timeline-"))
    (work / "site").mkdir()
    (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trace = work / "trace"
    trace.mkdir()
    lt = shutil.which("logtriage", path=str(Path(sys.executable).parent)) or "logtriage"
    load_bench._psql(f"DROP DATABASE IF EXISTS {args.db}")
    load_bench._psql(f"CREATE DATABASE {args.db}")
    env = {
        **os.environ,
        "LOGTRIAGE_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.db}",
        "LOGTRIAGE_DATA_DIR": str(work / "lt"),
        "PYTHONPATH": os.pathsep.join(x for x in (str(work / "site"), os.environ.get("PYTHONPATH")) if x),
        "LT_TIMELINE": ",".join(stages),
        "LT_TIMELINE_DIR": str(trace),
    }
    base = burst_bench.metric_log(1_000_000 - len(burst_bench.OOM_TAIL) - 64, 7)
    srv = burst_bench.Server(
        "timeline",
        [lt, "serve", "--host", "127.0.0.1", "--port", str(args.port), "--workers", str(args.workers)],
        env,
        args.port,
        "/readyz",
    )
    latencies: list[float] = []
    try:
        srv.wait_ready()
        warm = 8
        for i in range(warm + args.n):
            body = (
                base
                + f"[rank0]: job timeline-{i} starting its last step\n".encode()
                + burst_bench.OOM_TAIL.encode()
            )
            key = "" if args.no_key else f"timeline-{i}"  # an empty header is no key
            status, took, _, _ = burst_bench.post(args.port, "/api/v1/analyses", body, key)
            if status not in (200, 201, 202):
                raise SystemExit(f"hook_timeline: HTTP {status}")
            if i == warm - 1:
                # the warm-up's calls are not counted: wait until they are written, then drop them
                _settle(trace, stages[0], warm)
                for f in trace.glob("*.txt"):
                    f.unlink()
            elif i >= warm:
                latencies.append(took * 1e3)
        _settle(trace, stages[0], args.n)
    finally:
        srv.stop()
        load_bench._psql(f"DROP DATABASE IF EXISTS {args.db}")
    events, missing = read_events(trace)
    shutil.rmtree(work, ignore_errors=True)
    median = statistics.median(latencies)
    print(f"{args.n} hooks, `serve --workers {args.workers}` on PostgreSQL; client median {median:.1f} ms")
    print(f"{'stage':55s} {'calls':>5s} {'start':>7s} {'end':>7s} {'took':>7s}  (ms from the first stage)")
    for name, calls, start, end in timeline(events, stages):
        print(f"{name:55s} {calls:5d} {start:7.1f} {end:7.1f} {end - start:7.1f}")
    for name in sorted(missing):
        print(f"not found in the code (renamed?): {name}")
    return 1 if missing else 0


def _settle(trace: Path, first: str, n: int, timeout: float = 30) -> None:
    """Wait until the server's processes have written `n` calls of the first stage and nothing
    more has come for a while (each process writes what it recorded every 0.2 s)."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        events, _ = read_events(trace)
        if sum(1 for e in events if e[2] == first) >= n and len(events) == last:
            return
        last = len(events)
        time.sleep(0.5)
    raise SystemExit(f"hook_timeline: the server wrote fewer than {n} calls of {first}")


if __name__ == "__main__":
    sys.exit(main())
