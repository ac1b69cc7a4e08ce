#!/usr/bin/env python3
"""The service under load: `logtriage serve --workers 2` on PostgreSQL, hooks posting 200 KB logs.

    python bench/load_bench.py [--connections 8,16,24,50] [--duration 30] [--big 1G] [--no-gzip]

0. One hook at a time (20 sequential posts): the latency of an analysis on an idle server.
1. wrk (Debian package `wrk`) posts 200 KB failed-job logs (each request a distinct log, so no
   request is answered from the duplicate check) with each of `--connections` concurrent
   connections in turn; reports requests/s, p50/p90/p99 latency and errors. Target: p99 < 300 ms
   at 50, no errors.
2. The same logs gzipped, as `logtriage submit` sends them (`Content-Encoding: gzip`), at the
   last `--connections` value.
3. The load of the last `--connections` value, at the same time as one 1 GB upload streamed
   over a separate connection: reports the small requests' latency meanwhile and the upload's
   own time. Target: the upload completes and the small requests keep their latency.
The server binds 127.0.0.1 only, uses its own database (`logtriage_bench`, dropped and created
fresh) and data directory, and is stopped at the end. Results: bench/out/load.json.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))

import gen_log  # noqa: E402  (sibling module; bench/ is not a package)

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/logtriage_bench"
# One script for both bodies. Plain: a distinct first line per request, then the 200 KB log.
# Gzipped, as `logtriage submit` sends them: a distinct first gzip member per request (a
# stored-block member of one fixed-width line, so every record has the same length, read from
# BENCH_PREFIXES), then the log gzipped once; concatenated members are one valid gzip stream.
LUA = r"""
local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  return data
end
local body = slurp(os.getenv("BENCH_BODY"))
local prefixes = os.getenv("BENCH_PREFIXES") and slurp(os.getenv("BENCH_PREFIXES"))
local width = tonumber(os.getenv("BENCH_PREFIX_WIDTH") or "1")
local per_thread = prefixes and math.floor(#prefixes / width / 2)
local headers = {["Content-Type"] = "text/plain"}
if prefixes then headers["Content-Encoding"] = "gzip" end
local n = 0
local thread_id = 0
setup = function(thread)
  thread:set("tid", thread_id)
  thread_id = thread_id + 1
end
request = function()
  local first
  if prefixes then
    local i = (tid or 0) * per_thread + n % per_thread
    first = prefixes:sub(i * width + 1, (i + 1) * width)
  else
    first = string.format("job %d-%d-%d starting\n", tid or 0, n, os.time())
  end
  n = n + 1
  return wrk.format("POST", "/api/v1/analyses?source=api&job_id=bench", headers, first .. body)
end
"""
GZIP_PREFIXES = 60_000  # distinct requests in a gzip run (2 wrk threads x 30,000)


def _gzip_bodies(body: Path) -> tuple[Path, Path, int]:
    """The gzipped log and the file of distinct per-request first members (fixed width)."""
    gz_body = OUT / "load-200k.log.gz"
    gz_body.write_bytes(gzip.compress(body.read_bytes(), mtime=0))
    tag = os.urandom(4).hex()
    members = [
        gzip.compress(f"job gz-{tag}-{i:08d} starting\n".encode(), compresslevel=0, mtime=0)
        for i in range(GZIP_PREFIXES)
    ]
    width = len(members[0])
    assert all(len(m) == width for m in members)
    prefixes = OUT / "load-gzip-prefixes.bin"
    prefixes.write_bytes(b"".join(members))
    return gz_body, prefixes, width


def _psql(sql: str) -> None:
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc", sql], check=True)


def _wait_ready(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise SystemExit("load_bench: the server did not become ready")


def _ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[m.group(2)]


def run_wrk(
    port: int, connections: int, duration: int, body: Path, script: Path, env: dict[str, str] | None = None
) -> dict[str, object]:
    out = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{connections}",
            f"-d{duration}s",
            "--latency",
            "--timeout",
            "10s",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "BENCH_BODY": str(body), **(env or {})},
        check=True,
    ).stdout
    pct = {p: _ms(v) for p, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M)}
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    total = re.search(r"(\d+) requests in", out)
    return {
        "requests": int(total.group(1)) if total else 0,
        "rps": float(rps.group(1)) if rps else 0.0,
        "p50_ms": pct.get("50"),
        "p90_ms": pct.get("90"),
        "p99_ms": pct.get("99"),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in sock.groups()) if sock else 0,
        "raw": out,
    }


def sequential(port: int, body: Path, n: int) -> dict[str, float]:
    data = body.read_bytes()
    times = []
    for i in range(n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t = time.perf_counter()
        conn.request(
            "POST",
            "/api/v1/analyses?source=api&job_id=seq",
            body=f"job seq-{i}-{time.time()}\n".encode() + data,
            headers={"Content-Type": "text/plain"},
        )
        resp = conn.getresponse()
        resp.read()
        times.append((time.perf_counter() - t) * 1000)
        conn.close()
        if resp.status != 201:
            raise SystemExit(f"load_bench: a sequential post got HTTP {resp.status}")
    times.sort()
    return {"p50_ms": times[len(times) // 2], "max_ms": times[-1]}


def upload(port: int, path: Path, result: dict[str, object]) -> None:
    size = path.stat().st_size
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    with path.open("rb") as fh:
        conn.request(
            "POST",
            "/api/v1/analyses?source=api&job_id=big",
            body=fh,
            headers={"Content-Type": "text/plain", "Content-Length": str(size)},
        )
        resp = conn.getresponse()
        body = resp.read()
    result.update(status=resp.status, seconds=time.perf_counter() - t, bytes=size)
    location = resp.getheader("Location")
    pending = resp.status == 202
    while pending and location:
        # still being analysed after the server's sync wait: poll, as `logtriage submit` does
        time.sleep(1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", location.split(f":{port}", 1)[-1])
        resp = conn.getresponse()
        body = resp.read()
        pending = resp.status == 200 and json.loads(body).get("status") == "pending"
    result["done_seconds"] = time.perf_counter() - t
    try:
        result["root_cause"] = (json.loads(body).get("root_cause") or {}).get("rule_id")
    except ValueError:
        result["root_cause"] = None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--connections", default="8,16,24,50", help="comma-separated wrk connection counts")
    p.add_argument("--duration", type=int, default=30)
    p.add_argument("--big", default="1G", help="size of the concurrent big upload (0 to skip)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--no-gzip",
        dest="gzip",
        action="store_false",
        help="skip the run that posts the logs gzipped (as `logtriage submit` sends them)",
    )
    args = p.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("load_bench: needs wrk (apt-get install wrk)")
    lt = shutil.which("logtriage", path=str(Path(sys.executable).parent)) or "logtriage"
    OUT.mkdir(parents=True, exist_ok=True)
    body = OUT / "load-200k.log"
    gen_log.generate(body, gen_log.MIN_SIZE, 7)  # a failed job's log, cut to 200 KB at a line end
    data_200k = body.read_bytes()[-200 * 1024 :]
    body.write_bytes(data_200k[data_200k.index(b"\n") + 1 :])
    script = OUT / "load-post.lua"
    script.write_text(LUA)
    _psql("DROP DATABASE IF EXISTS logtriage_bench")
    _psql("CREATE DATABASE logtriage_bench")
    data = Path(tempfile.mkdtemp(prefix="logtriage-load-"))
    env = {**os.environ, "LOGTRIAGE_DATABASE_URL": PG, "LOGTRIAGE_DATA_DIR": str(data)}
    server = subprocess.Popen(
        [lt, "serve", "--host", "127.0.0.1", "--port", str(args.port), "--workers", str(args.workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(OUT / "load-server.log").open("w"),
        start_new_session=True,
    )
    conns = [int(c) for c in str(args.connections).split(",") if c.strip()]
    report: dict[str, object] = {
        "connections": conns,
        "duration_s": args.duration,
        "workers": args.workers,
    }
    try:
        _wait_ready(args.port)
        run_wrk(args.port, 4, 3, body, script)  # warm-up: compiled library, DB pool
        idle = sequential(args.port, body, 20)
        report["one_at_a_time"] = idle
        print(f"{'one hook at a time':34} p50 {idle['p50_ms']:7.1f} ms  max {idle['max_ms']:7.1f} ms")
        for c in conns:
            alone = run_wrk(args.port, c, args.duration, body, script)
            report[f"small_alone_{c}"] = alone
            print(_row(f"200 KB posts, {c} connections", alone))
        if args.gzip:
            gz_body, prefixes, width = _gzip_bodies(body)
            gz_env = {"BENCH_PREFIXES": str(prefixes), "BENCH_PREFIX_WIDTH": str(width)}
            c = conns[-1]
            gz = run_wrk(args.port, c, args.duration, gz_body, script, gz_env)
            report[f"small_gzip_{c}"] = gz
            kb = gz_body.stat().st_size // 1024
            print(_row(f"same, gzipped ({kb} KB sent), {c} conn.", gz))
        size = gen_log.parse_size(args.big)
        if size:
            big = OUT / f"log-{size}-s0.log"
            if not big.exists() or big.stat().st_size != size:
                gen_log.generate(big, size, 0)
            up: dict[str, object] = {}
            th = threading.Thread(target=upload, args=(args.port, big, up))
            th.start()
            during = run_wrk(args.port, conns[-1], args.duration, body, script)
            th.join()
            report["small_during_big_upload"] = during
            report["big_upload"] = up
            print(_row(f"{conns[-1]} connections during 1 GB upload", during))
            mbs = int(up["bytes"]) / 1e6 / float(up["seconds"])  # type: ignore[call-overload]
            took = f"HTTP {up['status']} in {up['seconds']:.1f} s ({mbs:.0f} MB/s)"
            took += f", analysed after {up['done_seconds']:.1f} s"
            print(f"big upload: {took}, root cause {up['root_cause']}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
        _psql("DROP DATABASE IF EXISTS logtriage_bench")
    for v in report.values():
        if isinstance(v, dict):
            v.pop("raw", None)
    (OUT / "load.json").write_text(json.dumps(report, indent=2))
    return 0


def _row(label: str, r: dict[str, object]) -> str:
    return (
        f"{label:34} {r['rps']:8.1f} req/s  p50 {r['p50_ms']:7.1f} ms  p90 {r['p90_ms']:7.1f} ms  "
        f"p99 {r['p99_ms']:7.1f} ms  errors {int(r['non_2xx']) + int(r['socket_errors'])}"  # type: ignore[call-overload]
    )


if __name__ == "__main__":
    sys.exit(main())
