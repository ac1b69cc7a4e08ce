#!/usr/bin/env python3
"""What one hook costs a web process's event loop: its main thread's CPU per hook, against the
trivial endpoint's, both on PostgreSQL in one run.

    python -P bench/loop_cpu.py [--n 100] [--async]

Each server runs as one process (`logtriage serve --workers 1`, bench/trivial_app.py under
uvicorn `--workers 1`), so its event loop is its main thread. After a warm-up of 20, `--n`
sequential posts of burst_bench's ~1 MB metric-line log ending in an OOM (each a distinct log,
with an Idempotency-Key, as `logtriage submit` sends it); the per-thread CPU counters (psutil) are
read before and after. Reported per server: the main thread's CPU per hook (`loop_ms`), the
other threads' (`threads_ms`: the thread pools, the database's and the scan pool's threads), the
median answer. `--async` posts with `Prefer: respond-async` (202 at once, the analysis in the
background: the path most hooks of a burst take). The scan workers, other processes, are not
counted. The loop is where a burst queues: its CPU per hook bounds how fast answers can go out.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import burst_bench  # noqa: E402
import load_bench  # noqa: E402

DB = "logtriage_loop_cpu"
WARM = 20


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of `pid`, by thread id (psutil, the dev extra,
    as burst_bench reads its servers' CPU)."""
    import psutil

    return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}


def measure(port: int, path: str, pid: int, body: bytes, n: int, prefer: str | None) -> dict[str, float]:
    headers = {"Content-Type": "text/plain", **({"Prefer": prefer} if prefer else {})}

    def post(tag: str) -> float:
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        try:
            conn.request(
                "POST", path, body=body + f"{tag}\n".encode(), headers={**headers, "Idempotency-Key": tag}
            )
            resp = conn.getresponse()
            resp.read()
        finally:
            conn.close()
        if resp.status not in (200, 201, 202):
            raise SystemExit(f"loop_cpu: {path} answered HTTP {resp.status}")
        return time.perf_counter() - t0

    for i in range(WARM):
        post(f"warm-{i}")
    before = thread_cpu(pid)
    took = [post(f"hook-{i}") for i in range(n)]
    after = thread_cpu(pid)
    used = {t: after[t] - before.get(t, 0.0) for t in after}
    return {
        "loop_ms": round(used.get(pid, 0.0) / n * 1000, 2),
        "threads_ms": round(sum(v for t, v in used.items() if t != pid) / n * 1000, 2),
        "median_ms": round(statistics.median(took) * 1000, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100, help="posts measured, after a warm-up of 20")
    p.add_argument("--async", dest="respond_async", action="store_true", help="Prefer: respond-async")
    p.add_argument("--port", type=int, default=18581)
    args = p.parse_args()
    body = (
        burst_bench.metric_log(1_000_000 - len(burst_bench.OOM_TAIL) - 64, 7) + burst_bench.OOM_TAIL.encode()
    )
    lt = shutil.which("logtriage", path=str(Path(sys.executable).parent)) or "logtriage"
    data = Path(tempfile.mkdtemp(prefix="logtriage-loop-cpu-"))
    env = {
        **os.environ,
        "LOGTRIAGE_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB}",
        "LOGTRIAGE_DATA_DIR": str(data / "lt"),
        "TRIVIAL_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{DB}",
        "TRIVIAL_DATA_DIR": str(data / "trivial"),
    }
    trivial_argv = [sys.executable, "-m", "uvicorn", "trivial_app:app", "--app-dir", str(BENCH)]
    servers = {
        "trivial": (
            [
                *trivial_argv,
                "--port",
                str(args.port + 1),
                "--workers",
                "1",
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            args.port + 1,
            "/ingest",
            "/healthz",
        ),
        "logtriage": (
            [lt, "serve", "--port", str(args.port), "--workers", "1"],
            args.port,
            "/api/v1/analyses",
            "/readyz",
        ),
    }
    burst_bench.OUT.mkdir(parents=True, exist_ok=True)
    load_bench._psql(f"DROP DATABASE IF EXISTS {DB}")
    load_bench._psql(f"CREATE DATABASE {DB}")
    report: dict[str, object] = {"n": args.n, "respond_async": args.respond_async}
    try:
        for name, (argv, port, path, ready) in servers.items():
            srv = burst_bench.Server(f"loop-cpu-{name}", [*argv, "--host", "127.0.0.1"], env, port, ready)
            try:
                srv.wait_ready()
                prefer = "respond-async" if args.respond_async and name == "logtriage" else None
                report[name] = measure(port, path, srv.proc.pid, body, args.n, prefer)
            finally:
                srv.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)
        load_bench._psql(f"DROP DATABASE IF EXISTS {DB}")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
