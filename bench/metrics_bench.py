#!/usr/bin/env python3
"""The metric parsing against the scan, on a log made of training-metric lines (its worst case).

    python bench/metrics_bench.py [--sizes 1M,64M] [--runs 5] [--baseline-path DIR] [--plant]

The log: Megatron iteration lines, verl `step:N - key:value` lines, DeepSpeed `step=N, skipped=0`
lines and HF Trainer dicts in turn, healthy throughout, ending in a CUDA OOM (what a hook
uploads when a run dies of memory). `--plant` puts a NaN loss at 40% of it and a loss spike at
60% (for 3% of the log, at least 64 KiB: a spike is seen in the sample, one line in ~2500x its
length), followed by healthy lines; the issues found are printed.

In this process, rounds interleaved (`--runs`), CPU time (`time.process_time`: less disturbed
than wall time by the other work of a shared machine):
- `scan+metrics`: `scan_source` on the file as `analyze` runs it (the scan, the metric gates in
  its Hyperscan pass, the metric stream, the exact parse of the last lines);
- `scan only`: the same library compiled without the metric gates, the stream a no-op and no
  exact tail: what the metrics add is the difference, and `metrics MB/s` is the file's size over it;
- `parse_lines` (before): the line-by-line parser on the first 2 MB, the rate at which the tail
  was parsed before (every line of the last MiB).
With `--baseline-path DIR` (a checkout of another commit: `git worktree add /tmp/base <commit>`),
`scan_source` on the file, as `analyze` runs it, in a child process of this checkout and one
of DIR (PYTHONPATH), taking turns, `--runs` times each per turn: the before/after of the whole
scan of the file, metrics included, without the CLI's start-up (whose `stats.scan_seconds`
holds numpy's first import, ~0.1 s, on a file of 1 MB).
Results also go to bench/out/metrics.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import scan_bench  # noqa: E402  (sibling module; bench/ is not a package)

OUT = scan_bench.OUT


def metric_line(rng: random.Random, i: int, loss: str | None = None) -> str:
    k = i % 4
    if k == 0:
        lm = loss if loss is not None else f"{rng.uniform(2, 3):.6E}"
        return (
            f" iteration {i:8d}/ 1000000 | consumed samples: {i * 64:12d} | elapsed time per iteration (ms): "
            f"{rng.uniform(600, 1500):.1f} | learning rate: 3.000000E-04 | global batch size:    64 | "
            f"lm loss: {lm} | loss scale: 65536.0 | grad norm: {rng.uniform(0.5, 1.5):.3f} | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
    if k == 1:
        return (
            f"(TaskRunner pid=21340) step:{i} - actor/pg_loss:{rng.uniform(-0.1, 0.1):.4f} - "
            f"actor/grad_norm:{rng.uniform(0.1, 1):.4f} - actor/kl:{rng.uniform(0, 0.01):.5f} - "
            f"critic/score/mean:{rng.random():.3f} - perf/throughput:{rng.uniform(1000, 2000):.1f}"
        )
    if k == 2:
        return (
            "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] "
            f"step={i}, skipped=0, lr=[0.001, 0.001], mom=[0.0, 0.0]"
        )
    return (
        f"{{'loss': {rng.uniform(0.4, 0.6):.4f}, 'grad_norm': {rng.uniform(0.5, 2):.4f}, "
        f"'learning_rate': 4.9e-05, 'epoch': {i / 1e5:.4f}}}"
    )


OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.21 GiB is free.\n"
)


def make_log(size: int, *, plant: bool) -> Path:
    path = OUT / f"metrics-{size}{'-planted' if plant else ''}.log"
    if path.exists() and path.stat().st_size >= size:
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    nan_at, spike_at = int(size * 0.4), int(size * 0.6)
    spike_end = spike_at + max(size * 3 // 100, 64 << 10)
    written, i = 0, 0
    with path.open("w") as fh:
        batch: list[str] = []
        while written < size:
            i += 1
            loss = None
            if plant and i % 4 == 0 and nan_at <= written and nan_at >= 0:
                loss, nan_at = "nan", -1
            elif plant and i % 4 == 0 and spike_at <= written < spike_end:
                loss = "4.500000E+01"  # ~18x the run's 2-3, for 3% of the log
            line = metric_line(rng, i, loss) + "\n"
            batch.append(line)
            written += len(line)
            if len(batch) >= 4096:
                fh.write("".join(batch))
                batch = []
        fh.write("".join(batch) + OOM)
    return path


def in_process(path: Path, runs: int) -> dict[str, object]:
    import app.engine.pipeline.scan as scan
    from app.engine.pipeline.ingest import ByteBudget, collect_sources
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.metrics import check, metric_text, parse_lines

    cache = OUT / "hs-cache"
    library = load_library()
    full = scan.CompiledLibrary(library, cache_dir=cache)
    gates = scan.METRIC_GATES
    scan.METRIC_GATES = ()
    bare = scan.CompiledLibrary(library, cache_dir=cache)
    scan.METRIC_GATES = gates
    real_stream = scan.MetricStream

    class NoStream(real_stream):  # type: ignore[misc, valid-type]
        exact_bytes = 0

        def feed(self, *args: object) -> None:
            return None

        def finish(self, *args: object, **kw: object) -> tuple[list[object], list[object]]:
            return [], []

    (src,), _ = collect_sources([str(path)])
    size = path.stat().st_size
    times: dict[str, list[float]] = {"scan+metrics": [], "scan only": []}
    scan.scan_source(full, src, budget=ByteBudget(0))  # warm-up: lazy imports and compiles
    scan.scan_source(bare, src, budget=ByteBudget(0))
    found: dict[str, object] = {}
    for _ in range(runs):
        t = time.process_time()
        res = scan.scan_source(full, src, budget=ByteBudget(0))
        times["scan+metrics"].append(time.process_time() - t)
        found = {
            "issues": [(i.kind, i.name, i.line) for i, _ in res.metric_issues],
            "points": len(res.metrics),
        }
        scan.MetricStream = NoStream
        try:
            t = time.process_time()
            scan.scan_source(bare, src, budget=ByteBudget(0))
            times["scan only"].append(time.process_time() - t)
        finally:
            scan.MetricStream = real_stream
    with path.open("rb") as fh:
        head = fh.read(2_000_000)
    head = head[: head.rfind(b"\n") + 1]
    lines = [(n, metric_text(raw)) for n, raw in enumerate(head.split(b"\n"), 1) if raw]
    t = time.process_time()
    check(parse_lines(lines))
    old = time.process_time() - t
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = max(med["scan+metrics"] - med["scan only"], 1e-9)
    return {
        "bytes": size,
        "seconds": med,
        "times": times,
        "scan_mb_s": size / 1e6 / med["scan only"],
        "scan_metrics_mb_s": size / 1e6 / med["scan+metrics"],
        "metrics_seconds": extra,
        "metrics_mb_s": size / 1e6 / extra,
        "parse_lines_mb_s": len(head) / 1e6 / old,
        **found,
    }


CHILD = """
import json, sys, time
from pathlib import Path
from app.engine.pipeline.ingest import ByteBudget, Source
from app.engine.pipeline.library import load_library
from app.engine.pipeline.scan import CompiledLibrary, scan_source
compiled = CompiledLibrary(load_library(), cache_dir=Path(sys.argv[3]))
src = Source(name="bench", path=Path(sys.argv[1]))
times = []
scan_source(compiled, src, budget=ByteBudget(0))  # warm-up: lazy imports and compiles
for _ in range(int(sys.argv[2])):
    t = time.process_time()
    res = scan_source(compiled, src, budget=ByteBudget(0))
    times.append(time.process_time() - t)
issues = [[i.kind, i.name, i.line] for i, _ in res.metric_issues]
print(json.dumps({"times": times, "issues": issues, "points": len(res.metrics)}))
"""


def against(path: Path, runs: int, base: Path) -> dict[str, dict[str, object]]:
    """scan_source's CPU time in a child of this checkout and of `base`, in turns."""
    import os

    trees = {"this": ROOT, "baseline": base}
    got: dict[str, dict[str, object]] = {k: {} for k in trees}
    times: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(3):
        for label, tree in trees.items():
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(path), str(runs), str(OUT / f"hs-cache-{label}")],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(tree)},
                cwd=tree,  # `-c` puts the working directory first on sys.path
                check=True,
            )
            row = json.loads(done.stdout)
            times[label].extend(row["times"])
            got[label].update(issues=row["issues"], points=row["points"])
    size = path.stat().st_size
    for label, row in got.items():
        row["times"] = times[label]
        row["median_s"] = med = statistics.median(times[label])
        row["mb_s"] = size / 1e6 / med
    return got


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1M,64M")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument(
        "--plant", action="store_true", help="a NaN at 40%% and a loss spike at 60%% (3%% of the log)"
    )
    p.add_argument("--baseline-path", type=Path, help="a checkout of another commit, e.g. /tmp/base")
    args = p.parse_args()
    result: dict[str, object] = {}
    for text in args.sizes.split(","):
        size = scan_bench.gen_log.parse_size(text)
        path = make_log(size, plant=args.plant)
        scan_bench.warm(path)
        row = in_process(path, args.runs)
        mb = size / 1e6
        print(
            f"{text:>5} ({mb:.1f} MB) scan only {row['scan_mb_s']:7.0f} MB/s   scan+metrics "
            f"{row['scan_metrics_mb_s']:7.0f} MB/s   metrics {row['metrics_mb_s']:7.0f} MB/s "
            f"({float(row['metrics_seconds']) * 1000:.1f} ms)   before: parse_lines "
            f"{row['parse_lines_mb_s']:.1f} MB/s   issues {row['issues']}"
        )
        if args.baseline_path:
            row["against"] = got = against(path, args.runs, args.baseline_path)
            for label, r in got.items():
                print(
                    f"      scan_source, {label:8} {float(r['median_s']) * 1000:8.1f} ms CPU "  # type: ignore[arg-type]
                    f"{float(r['mb_s']):7.1f} MB/s   points {r['points']}   issues {r['issues']}"  # type: ignore[arg-type]
                )
        result[text] = row
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "metrics.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
