#!/usr/bin/env python3
"""Load without loss: 200 hooks posting 1 MB logs at once while a 1 GB log streams in, against
`logtriage serve --workers 2` on PostgreSQL; afterwards every accepted request is counted in the
database.

    python bench/loss_bench.py [--hooks 200] [--hook-size 1M] [--big 1G] [--workers 2]

Each hook posts a distinct log (its job id in its last line: no duplicate short-cut) on its own
connection, all released together; the big upload starts at the same moment. Reported: how many
requests were accepted (201, or 202 then done), refused (4xx: which), failed (5xx, transport),
and how many analyses the database holds for the accepted ones, status `done`. The goal: stored
== accepted and no 5xx. The server binds 127.0.0.1, uses its own database `logtriage_loss`
(dropped at the end) and data directory. Results: bench/out/loss.json.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))

import gen_log  # noqa: E402
import load_bench  # noqa: E402  (its server helpers)

from app.http import memory  # noqa: E402

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/logtriage_loss"


def _post(port: int, body: bytes, job: str) -> tuple[int, str | None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    conn.request("POST", f"/api/v1/analyses?job_id={job}", body=body, headers={"Content-Type": "text/plain"})
    resp = conn.getresponse()
    data = resp.read()
    location = resp.getheader("Location")
    status = resp.status
    while status == 202 and location:  # accepted, still running: wait as `logtriage submit` does
        time.sleep(0.5)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", location.split(f":{port}", 1)[-1])
        r = conn.getresponse()
        data = r.read()
        if r.status == 200 and json.loads(data).get("status") != "pending":
            status = 201 if json.loads(data).get("status") == "done" else 500
    try:
        return status, json.loads(data).get("id")
    except ValueError:
        return status, None


def _count(jobs: list[str]) -> int:
    ids = ",".join(f"'{j}'" for j in jobs)
    out = subprocess.run(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "logtriage_loss",
            "-tAc",
            f"SELECT count(*) FROM analyses WHERE status = 'done' AND job_id IN ({ids})",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip() or 0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hooks", type=int, default=200)
    p.add_argument("--hook-size", default="1M")
    p.add_argument("--big", default="1G")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--port", type=int, default=18471)
    p.add_argument("--recycle-growth", type=float, default=0.08, help="as LOGTRIAGE_WORKER_RECYCLE_GROWTH")
    p.add_argument("--settle-s", type=float, default=240, help="how long to wait for the workers to be back")
    args = p.parse_args()
    lt = shutil.which("logtriage", path=str(Path(sys.executable).parent)) or "logtriage"
    OUT.mkdir(parents=True, exist_ok=True)
    hook_size = gen_log.parse_size(args.hook_size)
    base = OUT / f"loss-{hook_size}.log"
    if not base.exists() or base.stat().st_size < hook_size:
        gen_log.generate(base, max(hook_size, gen_log.MIN_SIZE), 11)
    head = base.read_bytes()[:hook_size]
    head = head[: head.rindex(b"\n") + 1]
    big = OUT / f"log-{gen_log.parse_size(args.big)}-s0.log"
    if args.big != "0" and (not big.exists() or big.stat().st_size != gen_log.parse_size(args.big)):
        gen_log.generate(big, gen_log.parse_size(args.big), 0)
    load_bench._psql("DROP DATABASE IF EXISTS logtriage_loss")
    load_bench._psql("CREATE DATABASE logtriage_loss")
    data = Path(tempfile.mkdtemp(prefix="logtriage-loss-"))
    env = {
        **os.environ,
        "LOGTRIAGE_DATABASE_URL": PG,
        "LOGTRIAGE_DATA_DIR": str(data),
        "LOGTRIAGE_WORKER_RECYCLE_GROWTH": str(args.recycle_growth),
    }
    server = subprocess.Popen(
        [lt, "serve", "--host", "127.0.0.1", "--port", str(args.port), "--workers", str(args.workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(OUT / "loss-server.log").open("w"),
        start_new_session=True,
    )
    results: dict[str, tuple[int, str | None]] = {}
    big_result: dict[str, object] = {}
    lock = threading.Lock()

    def web_rss() -> list[int]:
        """RSS (MiB) of each web worker: the server's direct children (their scan workers,
        grandchildren, are measured by api_upload_bench)."""
        return sorted(rss for _, rss in web_workers())

    def web_workers() -> list[tuple[int, int]]:
        """(pid, RSS MiB) of the supervisor's spawned workers (not multiprocessing's resource
        tracker, also its child)."""
        out = []
        for child in psutil.Process(server.pid).children():
            with contextlib.suppress(psutil.Error):
                if any("spawn_main" in part for part in child.cmdline()):
                    out.append((child.pid, child.memory_info().rss >> 20))
        return out

    try:
        load_bench._wait_ready(args.port)
        rss_started = web_rss()
        # start-up done: one of each kind of request has run in every worker (first-use imports,
        # statement caches), then a trim cycle; this is the size a burst should come back to
        for i in range(4 * args.workers):  # new connections: the kernel spreads them over workers
            _, aid = _post(
                args.port, head[:20_000] + b"RuntimeError: CUDA error: out of memory\n", f"warm-{i}"
            )
            for path in ("/", f"/analyses/{aid}", "/history"):
                conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
                conn.request("GET", path)
                conn.getresponse().read()
        time.sleep(memory.TRIM_EVERY_S + 2)
        rss_idle = web_rss()
        go = threading.Barrier(args.hooks + (1 if args.big != "0" else 0))

        def hook(i: int) -> None:
            job = f"loss-{i}"
            body = head + f"[rank0]: job {job} failed: RuntimeError: CUDA error: out of memory\n".encode()
            go.wait()
            try:
                res = _post(args.port, body, job)
            except OSError as exc:
                res = (-1, type(exc).__name__)
            with lock:
                results[job] = res

        def upload() -> None:
            go.wait()
            load_bench.upload(args.port, big, big_result)

        threads = [threading.Thread(target=hook, args=(i,)) for i in range(args.hooks)]
        if args.big != "0":
            threads.append(threading.Thread(target=upload))
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - t0
        rss_after = web_rss()
        pids_after = {pid for pid, _ in web_workers()}
        time.sleep(3 * memory.TRIM_EVERY_S + 2)  # idle: the trimmer runs three times
        rss_settled = web_rss()
        # then until every worker is back within the recycling threshold of its warm size,
        # given back by the allocator or recycled by the supervisor (LOGTRIAGE_WORKER_RECYCLE_*)
        limit = max(rss_idle) * (1 + args.recycle_growth)
        t_back = time.perf_counter()
        while time.perf_counter() - t_back < args.settle_s and max(web_rss() or [0]) > limit:
            time.sleep(1.0)
        rss_back = web_rss()
        back_s = round(time.perf_counter() - t_back + 3 * memory.TRIM_EVERY_S + 2, 1)
        recycled = len(pids_after - {pid for pid, _ in web_workers()})
        statuses = Counter(s for s, _ in results.values())
        accepted = [job for job, (s, _) in results.items() if s in (200, 201)]
        stored = _count(accepted) if accepted else 0
        report = {
            "hooks": args.hooks,
            "hook_bytes": len(head),
            "workers": args.workers,
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "accepted": len(accepted),
            "stored_done": stored,
            "server_errors": sum(v for k, v in statuses.items() if k >= 500 or k < 0),
            "seconds": round(took, 1),
            "big_upload": big_result,
            "web_worker_rss_mib": {
                "started": rss_started,
                "idle": rss_idle,
                "after": rss_after,
                "after_32s_idle": rss_settled,
                "back": rss_back,
                "back_after_s": back_s,
                "workers_recycled": recycled,
            },
        }
        mb = len(head) / 1e6
        print(f"{args.hooks} hooks x {mb:.1f} MB with a {args.big} upload, serve --workers {args.workers}:")
        print(f"  statuses {dict(statuses)}; accepted {len(accepted)}, stored (done) {stored}; {took:.1f} s")
        print(
            f"  web workers' RSS MiB: started {rss_started}, idle after warm-up {rss_idle}, "
            f"after the burst {rss_after}, 32 s later {rss_settled}, {back_s} s later {rss_back} "
            f"({recycled} worker(s) recycled)"
        )
        if big_result:
            done = float(big_result.get("done_seconds", 0))  # type: ignore[arg-type]
            print(f"  big upload: HTTP {big_result.get('status')}, analysed after {done:.1f} s")
            print(f"  its root cause: {big_result.get('root_cause')}")
        (OUT / "loss.json").write_text(json.dumps(report, indent=2))
        return 0 if stored == len(accepted) and not report["server_errors"] else 1
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)
        load_bench._psql("DROP DATABASE IF EXISTS logtriage_loss")


if __name__ == "__main__":
    sys.exit(main())
