#!/usr/bin/env python3
"""Where an upload's CPU goes: each stage of `POST /api/v1/analyses`'s pass, alone, on one log.

    python -P bench/ingest_breakdown.py bench/out/api-bench-1073741824.log --mib 256

Reads the first `--mib` MiB of the log into memory (so no stage pays for the disk) and times,
in CPU seconds of this one thread (`time.thread_time`: other agents' load does not count), the
redaction (`redact_stream`, and its Hyperscan prefilter alone), the rule scan as the service
runs it (a stream, one process), zstd at several levels (4 MiB frames, one call each, as
`StagingWriter` writes them) with the stored size, sha256 and the whole `StagingWriter`.
Figures are scaled to seconds per GiB. Results go to stdout and bench/out/ingest_breakdown.json.

    python -P bench/ingest_breakdown.py LOG --floor [--levels 1]

`--floor` adds, in the same run, what the stages cannot go below together (issue 20's target:
the whole log through `POST /api/v1/analyses` within 1.5x of `logtriage analyze`): the CPU of
a bare loopback TCP transfer of the bytes (sender and receiver, nothing parsed), and `logtriage
analyze` on the whole LOG (wall and CPU of its processes, best of `--runs`). The floor adds the
CPU `analyze` spends (the scan on every core) to the receive, the redaction's prefilter, the
first zstd level of `--levels` and sha256, and divides by the cores: a lower bound on the API's
wall time however its stages are arranged, printed beside 1.5x `analyze`'s, with and without
the stored copy's compression and hash.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
CHUNK = 1 << 20
PREFILTER = "  of it: its Hyperscan prefilter"
LOOPBACK = "loopback TCP (client + receive)"


def cpu(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Best of `runs` CPU times of this thread (the least disturbed run) and the last result."""
    best = float("inf")
    result = None
    for _ in range(runs):
        t0 = time.thread_time()
        result = fn()
        best = min(best, time.thread_time() - t0)
    return best, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--levels", default="3,1,-1,-3,-5,-7")
    ap.add_argument("--floor", action="store_true", help="the loopback receive, `analyze`, and the floor")
    args = ap.parse_args()

    import zstandard

    from app.blobstore.base import FRAME_BYTES, StagingWriter
    from app.engine.pipeline.ingest import ByteBudget, Source
    from app.engine.pipeline.redact import _matcher, redact_stream
    from app.engine.pipeline.scan import scan_source
    from app.service.worker import build_compiled
    from app.settings import Settings

    with args.log.open("rb") as fh:
        data = fh.read(args.mib << 20)
    data = data[: data.rfind(b"\n") + 1]
    size = len(data)
    per_gib = (1 << 30) / size
    rows: list[dict[str, Any]] = []

    def row(stage: str, seconds: float, **extra: Any) -> None:
        rows.append({"stage": stage, "cpu_s_per_gib": round(seconds * per_gib, 3), **extra})
        more = "  ".join(f"{k}={v}" for k, v in extra.items())
        print(
            f"{stage:<34} {seconds * per_gib:7.3f} s/GiB  {size / seconds / 1e6:8.1f} MB/s  {more}",
            flush=True,
        )

    def chunks() -> list[memoryview]:
        view = memoryview(data)
        return [view[i : i + CHUNK] for i in range(0, size, CHUNK)]

    def copy_chunks() -> int:
        return sum(len(bytes(c)) for c in chunks())

    row("copy (bytes() of every MiB)", cpu(copy_chunks, args.runs)[0])

    def redact() -> int:
        return sum(len(c) for c in redact_stream(io.BytesIO(data)))

    row("redact_stream", cpu(redact, args.runs)[0])

    matcher = _matcher()

    def prefilter() -> int:
        hits: list[tuple[int, int]] = []
        lines = 0
        pos = 0
        while pos < size:
            end = data.rfind(b"\n", pos, pos + CHUNK) + 1 or min(size, pos + CHUNK)
            hits.clear()
            matcher.scan(memoryview(data)[pos:end], hits)
            lines += len({data.rfind(b"\n", pos, pos + e) for _, e in hits})
            pos = end
        return lines

    seconds, candidates = cpu(prefilter, args.runs)
    row(PREFILTER, seconds, candidate_lines=candidates)

    compiled = build_compiled(Settings())

    def scan() -> int:
        src = Source(name="x.log", stream=io.BytesIO(data))
        return scan_source(compiled, src, budget=ByteBudget(0)).lines

    row("scan (stream, one process)", cpu(scan, args.runs)[0])

    for level in [int(x) for x in args.levels.split(",")]:

        def compress(level: int = level) -> int:
            # one compress() a frame, as StagingWriter stores them
            cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
            view = memoryview(data)
            return sum(len(cctx.compress(view[i : i + FRAME_BYTES])) for i in range(0, size, FRAME_BYTES))

        seconds, stored = cpu(compress, args.runs)
        row(f"zstd level {level}", seconds, ratio=round(size / stored, 2))

    def sha() -> str:
        h = hashlib.sha256()
        for c in chunks():
            h.update(c)
        return h.hexdigest()

    row("sha256", cpu(sha, args.runs)[0])

    def staging() -> int:
        with tempfile.TemporaryDirectory() as d:
            w = StagingWriter(Path(d))
            for c in chunks():
                w.write(bytes(c))
            return w.finish().stored_size

    row("StagingWriter (zstd + sha256 + disk)", cpu(staging, args.runs)[0])

    floor = None
    if args.floor:
        row(LOOPBACK, min(loopback_cpu(args.log, size) for _ in range(args.runs)))
        per_gib = {r["stage"]: r["cpu_s_per_gib"] for r in rows}
        floor = api_floor(args.log, per_gib, args.runs, level=int(args.levels.split(",")[0]))
    OUT.mkdir(parents=True, exist_ok=True)
    report = {"log": str(args.log), "bytes": size, "rows": rows, "floor": floor}
    (OUT / "ingest_breakdown.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loopback_cpu(log: Path, size: int) -> float:
    """CPU seconds to move the log's first `size` bytes over a loopback TCP connection: a child
    reads them from the file and sends them, as a client would; this thread receives them into
    one reused buffer and nothing else, the least that receiving an upload costs. (The child's
    interpreter start counts too: ~0.03 s, ~0.1 s/GiB at 256 MiB; the floor is that much high.)"""
    srv = socket.create_server(("127.0.0.1", 0))
    send = (
        "import socket,sys\n"
        f"d=open(sys.argv[1],'rb').read({size})\n"
        f"s=socket.create_connection(('127.0.0.1',{srv.getsockname()[1]}))\n"
        "s.sendall(d)\ns.close()\n"
    )
    before = _children_cpu()
    child = subprocess.Popen([sys.executable, "-c", send, str(log)])
    conn, _ = srv.accept()
    buf = bytearray(1 << 20)
    t0 = time.thread_time()
    while conn.recv_into(buf):
        pass
    received = time.thread_time() - t0
    conn.close()
    srv.close()
    child.wait()
    return received + _children_cpu() - before


def api_floor(log: Path, per_gib: dict[str, float], runs: int, *, level: int) -> dict[str, Any]:
    """`analyze` on the whole log, and the least wall time the API's pass could take on this
    machine's cores, from the per-GiB CPU of the stages measured before it."""
    lt = shutil.which("logtriage", path=str(Path(sys.executable).parent)) or "logtriage"
    size = log.stat().st_size
    gib = size / (1 << 30)
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(runs):
        c0, t0 = _children_cpu(), time.perf_counter()
        subprocess.run([lt, "analyze", str(log), "--format", "json"], stdout=subprocess.DEVNULL, check=True)
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, _children_cpu() - c0)
    cores = os.cpu_count() or 1
    # the scan as `analyze` runs it, the body received, the redaction's prefilter: any design
    essential = best_cpu + gib * (per_gib[LOOPBACK] + per_gib[PREFILTER])
    stored_copy = gib * (per_gib[f"zstd level {level}"] + per_gib["sha256"])
    out = {
        "log_bytes": size,
        "cores": cores,
        "analyze_wall_s": round(best_wall, 2),
        "analyze_cpu_s": round(best_cpu, 2),
        "target_wall_s (1.5x analyze)": round(1.5 * best_wall, 2),
        "floor_wall_s (essential / cores)": round(essential / cores, 2),
        f"floor_wall_s (+ zstd {level}, sha256)": round((essential + stored_copy) / cores, 2),
    }
    for k, v in out.items():
        print(f"{k:<40} {v}")
    return out


if __name__ == "__main__":
    sys.exit(main())
