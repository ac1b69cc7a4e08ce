#!/usr/bin/env python3
"""Upload latency and server memory of `POST /api/v1/analyses` (raw body) against `logtriage serve`.

Starts the real service (`python -m app.cli serve`, SQLite, a fresh data dir) on 127.0.0.1,
generates realistic logs with ``bench/gen_log.py`` (a failure cascade in the last ~1%), then posts
each log as a streamed raw body with ``Prefer: wait=600`` so the response (201) arrives once the
analysis is stored: the latency is end to end (upload + decompress/redact/compress + scan +
persist). A sampler thread records the resident memory of the server process and, separately,
of the server plus its scan worker processes.

    python bench/api_upload_bench.py                  # 1 MB (x5) and 200 MB (x2)
    python bench/api_upload_bench.py --sizes 1M 200M 1G --runs 3 --gzip

Results go to stdout and bench/out/api_upload.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
CHUNK = 1 << 20


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def make_log(size: int, *, compress: bool) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"api-bench-{size}.log"
    if not path.exists() or path.stat().st_size != size:
        gen = ROOT / "bench" / "gen_log.py"
        subprocess.run(
            [sys.executable, str(gen), str(path), "--size", str(size), "--fault", "ecc"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if not compress:
        return path
    gz = path.with_suffix(".log.gz")
    if not gz.exists():
        with path.open("rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
            while block := src.read(CHUNK):
                dst.write(block)
    return gz


def make_single_line(size: int) -> Path:
    """A log that is one line of `size` bytes (a tokenizer dump, a JSON blob on one line), then
    the failure: the case where a line-oriented scan cannot hold a line whole."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"api-bench-line-{size}.log"
    if not path.exists() or path.stat().st_size < size:
        word = b"tokens " + b"abcdefghij" * 100 + b" "
        with path.open("wb") as fh:
            fh.write(b"step 1 | loss=0.52\n")
            for _ in range(size // len(word)):
                fh.write(word)
            fh.write(b"\n(WorkerDict pid=7) RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


class RssSampler:
    """Peak RSS of the server process alone, of its largest child (the scan worker that analyses
    a big upload), and of the server with all its children; and the CPU seconds each of them
    spent (user + system, reaped children included) between `mark()` and `cpu()`: the scan
    workers live as long as the server, so two looks suffice."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.peak_server = 0
        self.peak_total = 0
        self.peak_child = 0
        self._cpu: dict[int, float] = {}  # last CPU seen per process
        self._base: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample_cpu(self) -> None:
        with self._lock:
            with contextlib.suppress(psutil.Error):
                self._cpu[self.proc.pid] = _cpu_s(self.proc)
            for child in self.proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self._cpu[child.pid] = _cpu_s(child)

    def mark(self) -> None:
        self._sample_cpu()
        with self._lock:
            self._base = dict(self._cpu)

    def cpu(self) -> tuple[float, float]:
        """(server, workers) CPU seconds since `mark()`."""
        self._sample_cpu()
        with self._lock:
            spent = {pid: t - self._base.get(pid, 0.0) for pid, t in self._cpu.items()}
        server = spent.pop(self.proc.pid, 0.0)
        return server, sum(spent.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                own = self.proc.memory_info().rss
                total = own
                for child in self.proc.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        rss = child.memory_info().rss
                        total += rss
                        self.peak_child = max(self.peak_child, rss)
            except psutil.Error:
                return
            self.peak_server = max(self.peak_server, own)
            self.peak_total = max(self.peak_total, total)
            time.sleep(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def stream(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            yield block


def upload(client: httpx.Client, path: Path, *, compressed: bool) -> tuple[float, dict[str, Any]]:
    headers = {"Content-Type": "text/plain", "Prefer": "wait=600", "Content-Length": str(path.stat().st_size)}
    if compressed:
        headers["Content-Encoding"] = "gzip"
    t0 = time.perf_counter()
    r = client.post("/api/v1/analyses", content=stream(path), headers=headers)
    elapsed = time.perf_counter() - t0
    if r.status_code != 201:
        raise SystemExit(f"upload of {path.name}: HTTP {r.status_code}: {r.text[:500]}")
    return elapsed, r.json()


def run_cli(path: Path) -> tuple[float, float]:
    """`logtriage analyze` on the file: wall seconds and CPU seconds (its forked scan processes
    included: they are reaped before it exits)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "app.cli", "analyze", str(path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1, 2):
        raise SystemExit(f"logtriage analyze {path.name}: exit {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "200M"])
    ap.add_argument("--runs", type=int, default=0, help="runs per size (default: 5 for <= 10 MB, else 2)")
    ap.add_argument("--gzip", action="store_true", help="send gzip bodies (Content-Encoding: gzip)")
    ap.add_argument("--analysis-workers", type=int, default=2)
    ap.add_argument(
        "--single-line", action="store_true", help="each log is one line of the given size (then the failure)"
    )
    ap.add_argument(
        "--cli",
        action="store_true",
        help="also run `logtriage analyze` on each log, taking turns with the uploads (same load)",
    )
    args = ap.parse_args()

    if args.single_line:
        logs = {s: make_single_line(parse_size(s)) for s in args.sizes}
    else:
        logs = {s: make_log(parse_size(s), compress=args.gzip) for s in args.sizes}
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="logtriage-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env.update(LOGTRIAGE_DATA_DIR=str(data), LOGTRIAGE_ANALYSIS_WORKERS=str(args.analysis_workers))
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    results: list[dict[str, Any]] = []
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("server did not become ready")
        idle = psutil.Process(server.pid).memory_info().rss
        with httpx.Client(base_url=base, timeout=httpx.Timeout(900, connect=10)) as client:
            upload(client, logs[args.sizes[0]], compressed=args.gzip)  # warm-up
            for size, path in logs.items():
                runs = args.runs or (5 if parse_size(size) <= 10 << 20 else 2)
                times: list[float] = []
                cpus: list[tuple[float, float, float]] = []  # server, workers, this client
                cli: list[tuple[float, float]] = []
                with RssSampler(server.pid) as rss:
                    for _ in range(runs):
                        if args.cli:
                            cli.append(run_cli(path))
                        rss.mark()
                        c0 = time.thread_time()  # the sampler thread's own CPU is not the upload's
                        seconds, body = upload(client, path, compressed=args.gzip)
                        times.append(seconds)
                        cpus.append((*rss.cpu(), time.thread_time() - c0))
                root = body.get("root_cause") or {}
                results.append(
                    {
                        "size": size,
                        "bytes_sent": path.stat().st_size,
                        "log_bytes": body["stats"]["bytes"],
                        "runs": runs,
                        "latency_s_median": round(statistics.median(times), 3),
                        "latency_s_all": [round(t, 3) for t in times],
                        "mb_per_s": round(body["stats"]["bytes"] / 1e6 / statistics.median(times), 1),
                        "peak_rss_server_mib": round(rss.peak_server / 2**20, 1),
                        "peak_rss_with_workers_mib": round(rss.peak_total / 2**20, 1),
                        "peak_rss_largest_worker_mib": round(rss.peak_child / 2**20, 1),
                        "root_cause": root.get("failure_class"),
                        "cpu_s_server_all": [round(c[0], 2) for c in cpus],
                        "cpu_s_workers_all": [round(c[1], 2) for c in cpus],
                        "cpu_s_client_all": [round(c[2], 2) for c in cpus],
                        "cpu_s_total_median": round(statistics.median(sum(c) for c in cpus), 2),
                        "cli_wall_s_all": [round(c[0], 3) for c in cli],
                        "cli_cpu_s_all": [round(c[1], 2) for c in cli],
                    }
                )
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    report = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "gzip": args.gzip,
        "idle_rss_server_mib": round(idle / 2**20, 1),
        "results": results,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "api_upload.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"server idle RSS {report['idle_rss_server_mib']} MiB · {os.cpu_count()} CPUs · gzip={args.gzip}")
    header = (
        f"{'size':>6} {'runs':>4} {'median s':>9} {'MB/s':>7} {'peak RSS server':>16} "
        f"{'largest worker':>15} {'all':>10}"
    )
    print(header + "  root cause")
    for r in results:
        print(
            f"{r['size']:>6} {r['runs']:>4} {r['latency_s_median']:>9} {r['mb_per_s']:>7} "
            f"{r['peak_rss_server_mib']:>12} MiB {r['peak_rss_largest_worker_mib']:>11} MiB "
            f"{r['peak_rss_with_workers_mib']:>6} MiB  {r['root_cause']}"
        )
        print(
            f"{'':>6} CPU s per upload: server {r['cpu_s_server_all']} workers {r['cpu_s_workers_all']} "
            f"client {r['cpu_s_client_all']} (total median {r['cpu_s_total_median']})"
        )
        if r["cli_wall_s_all"]:
            print(f"{'':>6} logtriage analyze: wall {r['cli_wall_s_all']} s, CPU {r['cli_cpu_s_all']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
