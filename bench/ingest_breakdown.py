#!/usr/bin/env python3
"""Where an upload's CPU goes: each stage of `POST /api/v1/analyses`'s pass, alone, on one log.

    python -P bench/ingest_breakdown.py bench/out/api-bench-1073741824.log --mib 256

Reads the first `--mib` MiB of the log into memory (so no stage pays for the disk) and times,
in CPU seconds of this one thread (`time.thread_time`: other agents' load does not count), the
redaction (`redact_stream`, and its Hyperscan prefilter alone), the rule scan as the service
runs it (a stream, one process), zstd at several levels (4 MiB frames, as `StagingWriter`
writes them) with the stored size, sha256 and the whole `StagingWriter`. Figures are scaled to
seconds per GiB. Results go to stdout and bench/out/ingest_breakdown.json.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
CHUNK = 1 << 20


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
    row("  of it: its Hyperscan prefilter", seconds, candidate_lines=candidates)

    compiled = build_compiled(Settings())

    def scan() -> int:
        src = Source(name="x.log", stream=io.BytesIO(data))
        return scan_source(compiled, src, budget=ByteBudget(0)).lines

    row("scan (stream, one process)", cpu(scan, args.runs)[0])

    for level in [int(x) for x in args.levels.split(",")]:

        def compress(level: int = level) -> int:
            out = io.BytesIO()
            zw = zstandard.ZstdCompressor(level=level, write_checksum=True).stream_writer(out, closefd=False)
            for i in range(0, size, FRAME_BYTES):
                zw.write(data[i : i + FRAME_BYTES])
                zw.flush(zstandard.FLUSH_FRAME)
            zw.close()  # type: ignore[no-untyped-call]
            return out.tell()

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

    OUT.mkdir(parents=True, exist_ok=True)
    report = {"log": str(args.log), "bytes": size, "rows": rows}
    (OUT / "ingest_breakdown.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
