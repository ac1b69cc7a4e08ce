"""One hook's scan in process: `scan_upload` of burst_bench's ~1 MB metric-line log (ending in an
OOM), median wall and CPU time over N runs, optionally with a cProfile of 20 more.

    python -P bench/hook_scan_bench.py [N] [--profile [tottime|cumulative]]

Before/after another commit: `git archive REF | tar -x -C /tmp/base`, then run this file from
/tmp/base (`cd /tmp/base && python -P /path/to/bench/hook_scan_bench.py`) and from the checkout,
taking turns: it imports the `app` of the directory it is run from.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LOGTRIAGE_DATA_DIR", tempfile.mkdtemp(prefix="hook-scan-bench-"))

from burst_bench import OOM_TAIL, metric_log

from app.service.jobs import InputFile, ScanJob
from app.service.worker import init_worker, scan_upload


def main() -> None:
    args = sys.argv[1:]
    n = int(args[0]) if args and args[0].isdigit() else 30
    init_worker({})
    body = metric_log(1_000_000 - len(OOM_TAIL) - 64, 7) + OOM_TAIL.encode()

    def once() -> None:
        scan_upload(ScanJob(files=(InputFile("hook.log", "", data=body),)))

    for _ in range(3):
        once()
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(n):
        w, c = time.perf_counter(), time.process_time()
        once()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    walls.sort()
    cpus.sort()
    print(
        f"scan_upload of {len(body):,} bytes, {n} runs: wall median {walls[n // 2] * 1000:.1f} ms, "
        f"CPU median {cpus[n // 2] * 1000:.1f} ms (both threads)"
    )
    if "--profile" in args:
        i = args.index("--profile")
        order = args[i + 1] if len(args) > i + 1 else "tottime"
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20):
            once()
        prof.disable()
        pstats.Stats(prof).sort_stats(order).print_stats(40)


if __name__ == "__main__":
    main()
