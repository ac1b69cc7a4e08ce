#!/usr/bin/env python3
"""The log viewer on a big stored log: framed (seekable) blobs against the old single frame.

    python bench/viewer_bench.py [--size 1G] [--runs 5] [--seed 0]

Stores the generated RL-job log (bench/gen_log.py, reused from bench/out/ when present) into a
directory blob store twice, as the service does (`StagingWriter`: sha256 + zstd level 1, in
1 MiB writes): once framed (a frame every ``FRAME_BYTES``, with its index) and once as one frame
(how blobs were stored before). Reports the framing cost (write MB/s, stored size, ratio), then
the time to read the viewer's window (`read_window`: 500 lines, as the page asks) at the first
line, the middle line and the last line of each, page cache warm (median of ``--runs``; the
single frame at the middle and end once per run too, it is slow), and the peak memory the read
allocates (tracemalloc). Results also go to bench/out/viewer.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import scan_bench  # noqa: E402  (sibling module; bench/ is not a package)

from app.blobstore import DirectoryBlobStore, PendingBlob, StagingWriter  # noqa: E402
from app.blobstore.base import FRAME_BYTES  # noqa: E402
from app.blobstore.window import read_window  # noqa: E402

OUT = BENCH / "out"
WRITE_CHUNK = 1 << 20


def store_log(
    store: DirectoryBlobStore, log: Path, frame_bytes: int, *, grams: bool = True
) -> tuple[PendingBlob, float]:
    """Stage and commit the log as one blob; (pending, seconds to stage it). ``grams``: with the
    search filters (app.blobstore.grams), as the service stores logs."""
    t = time.perf_counter()
    with (
        log.open("rb", buffering=0) as src,
        StagingWriter(store.tmp_dir, frame_bytes=frame_bytes, grams=grams) as w,
    ):
        while chunk := src.read(WRITE_CHUNK):
            w.write(chunk)
        pending = w.finish()
    seconds = time.perf_counter() - t
    store.commit(pending)
    return pending, seconds


def time_window(
    store: DirectoryBlobStore, pending: PendingBlob, index: object, line: int, runs: int
) -> dict[str, float]:
    walls = []
    for _ in range(runs):
        t = time.perf_counter()
        w = read_window(store, pending.sha256, index, line=line)  # type: ignore[arg-type]
        walls.append(time.perf_counter() - t)
        assert w.target == line and w.first_line <= line <= w.last_line, (line, w.first_line, w.last_line)
    tracemalloc.start()
    try:
        read_window(store, pending.sha256, index, line=line)  # type: ignore[arg-type]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"ms": statistics.median(walls) * 1000, "min_ms": min(walls) * 1000, "peak_mib": peak / (1 << 20)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="1G")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--frame-bytes", type=int, default=FRAME_BYTES, help="frame size to try")
    p.add_argument("--keep", action="store_true", help="keep the stored blobs in bench/out/viewer-store")
    args = p.parse_args()
    size = scan_bench.gen_log.parse_size(args.size)
    log = scan_bench.ensure_log(size, args.seed)
    scan_bench.warm(log)
    root = OUT / "viewer-store"
    shutil.rmtree(root, ignore_errors=True)
    results: dict[str, object] = {"size": size, "frame_bytes": args.frame_bytes, "runs": args.runs}
    try:
        stored: dict[str, tuple[PendingBlob, object]] = {}
        kinds = {"framed": args.frame_bytes, "single frame": 1 << 62}
        stores = {
            label: DirectoryBlobStore(root / label.replace(" ", "-") / "blobs", tmp_dir=root / "tmp")
            for label in kinds
        }
        times: dict[str, list[float]] = {label: [] for label in kinds}
        rounds = max(1, min(args.runs, 3))
        for r in range(rounds):  # the two kinds take turns; the fastest write of each counts
            for label, frame_bytes in kinds.items():
                pending, seconds = store_log(stores[label], log, frame_bytes)
                times[label].append(seconds)
                if r < rounds - 1:
                    stores[label].delete(pending.sha256)  # else the next commit finds it stored
                stored[label] = (pending, pending.frames if label == "framed" else None)
        print(f"{'blob':<14}{'write MB/s':>11}{'stored MB':>11}{'ratio':>8}{'frames':>8}")
        for label in kinds:
            pending = stored[label][0]
            frames = pending.frames or ()
            row = {
                "write_mb_s": size / 1e6 / min(times[label]),
                "stored_bytes": pending.stored_size,
                "ratio": size / pending.stored_size,
                "frames": len(frames) - 1,
            }
            results[label] = row
            print(
                f"{label:<14}{row['write_mb_s']:>11.0f}{pending.stored_size / 1e6:>11.2f}"
                f"{row['ratio']:>8.2f}{row['frames']:>8}"
            )
        framed, single = results["framed"], results["single frame"]
        assert isinstance(framed, dict) and isinstance(single, dict)
        print(
            f"framing cost: {100 * (framed['stored_bytes'] / single['stored_bytes'] - 1):+.2f}% stored size, "
            f"{100 * (framed['write_mb_s'] / single['write_mb_s'] - 1):+.1f}% write speed"
        )
        pending, _ = stored["framed"]
        assert pending.frames is not None
        total = pending.frames[-1][3]
        positions = {"first line": 1, "middle": (total + 1) // 2, "last line": total}
        print(f"\nviewer window (500 lines) of {total:,} lines: median of {args.runs} runs, peak allocated")
        print(f"{'at':<12}{'framed':>12}{'single frame':>15}{'speed-up':>10}")
        windows: dict[str, dict[str, dict[str, float]]] = {}
        for where, line in positions.items():
            got = {}
            for label in ("framed", "single frame"):
                blob, index = stored[label]
                store = stores[label]
                runs = args.runs if label == "framed" or line == 1 else max(1, min(args.runs, 3))
                got[label] = time_window(store, blob, index, line, runs)
            windows[where] = got
            f, s = got["framed"], got["single frame"]
            print(
                f"{where:<12}{f['ms']:>9.1f} ms{s['ms']:>12.1f} ms{s['ms'] / f['ms']:>9.0f}x"
                f"   (peak {f['peak_mib']:.1f} / {s['peak_mib']:.1f} MiB)"
            )
        results["windows"] = windows
        OUT.mkdir(exist_ok=True)
        (OUT / "viewer.json").write_text(json.dumps(results, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
