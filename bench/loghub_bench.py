"""Grouping accuracy of ``app.engine.templates`` on the 16 Loghub 2k sets, and its throughput.

    python bench/loghub_bench.py [--loghub GITDIR] [--throughput-mb 32] [--no-throughput]

Grouping accuracy (GA) as defined by Zhu et al., "Tools and Benchmarks for Automated Log
Parsing" (ICSE'19) and logpai/logparser's ``evaluator.get_accuracy``: a message is parsed
correctly iff the set of messages in its predicted group equals the set of messages in its
ground-truth group; GA = correctly parsed messages / all messages. The message is the
``Content`` column of ``<Set>/<Set>_2k.log_structured.csv``, the ground truth its ``EventId``.

Columns: ``ours`` (``mask`` + ``TemplateMiner``, defaults, one generic preprocessing for every
set), ``drain3`` (the drain3 package with its default config, no masking), ``drain3+mask``
(drain3 fed the lines after our ``mask``), when drain3 is importable, and ``Drain (pub.)``: the
published Drain GA of Zhu et al. 2019, Table II, as reproduced in logpai/logparser's
docs/benchmark.rst (per-set regexes and parameters tuned per set, so not a like-for-like
comparison with a generic preprocessing).

Throughput: ``mask`` + ``TemplateMiner.add`` over a synthetic training log written by
``bench/gen_log.py`` (git-ignored under bench/out/), timed beside ``grep -c .`` and ``wc -l`` on
the same file in the same run.

The Loghub data: https://github.com/logpai/loghub (free for research or academic work).
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.engine.templates import TemplateMiner, mask  # noqa: E402

DEFAULT_LOGHUB = "/work/.mirror/logpai+loghub/repo"
SETS = [
    "HDFS",
    "Hadoop",
    "Spark",
    "Zookeeper",
    "BGL",
    "HPC",
    "Thunderbird",
    "Windows",
    "Linux",
    "Android",
    "HealthApp",
    "Apache",
    "Proxifier",
    "OpenSSH",
    "OpenStack",
    "Mac",
]
# Zhu et al. 2019 (ICSE'19), Table II "Accuracy of log parsers on different datasets", Drain row,
# as reproduced in https://github.com/logpai/logparser/blob/main/docs/benchmark.rst. The
# 4-digit figures in logparser/Drain/README.md round to these (e.g. HDFS 0.9975, Hadoop 0.9475).
PUBLISHED_DRAIN = {
    "HDFS": 0.998,
    "Hadoop": 0.948,
    "Spark": 0.920,
    "Zookeeper": 0.967,
    "BGL": 0.963,
    "HPC": 0.887,
    "Thunderbird": 0.955,
    "Windows": 0.997,
    "Linux": 0.690,
    "Android": 0.911,
    "HealthApp": 0.780,
    "Apache": 1.000,
    "Proxifier": 0.527,
    "OpenSSH": 0.788,
    "OpenStack": 0.733,
    "Mac": 0.787,
}


def load_set(gitdir: str, name: str) -> tuple[list[str], list[str]]:
    """(messages, ground-truth event ids) of one Loghub 2k set, read from the git mirror."""
    blob = f"HEAD:{name}/{name}_2k.log_structured.csv"
    raw = subprocess.run(["git", "-C", gitdir, "show", blob], check=True, capture_output=True).stdout
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))
    # logparser's evaluator drops rows with no ground truth; none of the 2k sets has any
    rows = [r for r in rows if r["EventId"]]
    return [r["Content"] for r in rows], [r["EventId"] for r in rows]


def grouping_accuracy(truth: Sequence[Hashable], predicted: Sequence[Hashable]) -> float:
    """Share of messages whose predicted group is exactly their ground-truth group."""
    if len(truth) != len(predicted):
        raise ValueError("truth and predicted differ in length")
    if not truth:
        return 1.0
    truth_size: dict[Hashable, int] = defaultdict(int)
    for t in truth:
        truth_size[t] += 1
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, p in enumerate(predicted):
        members[p].append(i)
    correct = 0
    for idx in members.values():
        events = {truth[i] for i in idx}
        if len(events) == 1 and truth_size[next(iter(events))] == len(idx):
            correct += len(idx)
    return correct / len(truth)


def ours(lines: Sequence[str]) -> list[int]:
    miner = TemplateMiner()
    return [miner.add(line)[0] for line in lines]


def _drain3_factory() -> Callable[..., list[int]] | None:
    try:
        from drain3 import TemplateMiner as Drain3Miner  # type: ignore[import-not-found,unused-ignore]
        from drain3.template_miner_config import TemplateMinerConfig  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    logging.getLogger("drain3").setLevel(logging.WARNING)

    def run(lines: Iterable[str], sim_th: float | None = None) -> list[int]:
        cfg = TemplateMinerConfig()  # drain3 defaults: sim_th 0.4, depth 4, max_children 100
        cfg.profiling_enabled = False
        if sim_th is not None:
            cfg.drain_sim_th = sim_th
        miner = Drain3Miner(config=cfg)
        return [miner.add_log_message(line)["cluster_id"] for line in lines]

    return run


COLUMNS = ["ours", "drain3", "drain3+mask", "drain3+mask@0.7", "Drain (pub.)"]
Row = tuple[str, list[float | None]]


def accuracy_table(gitdir: str) -> list[Row]:
    drain3 = _drain3_factory()
    miner_defaults = TemplateMiner()
    rows: list[Row] = []
    for name in SETS:
        lines, truth = load_set(gitdir, name)
        cells: list[float | None] = [grouping_accuracy(truth, ours(lines)), None, None, None]
        if drain3 is not None:
            masked = [mask(x) for x in lines]
            cells[1] = grouping_accuracy(truth, drain3(lines))
            cells[2] = grouping_accuracy(truth, drain3(masked))
            # drain3 with our masking *and* our default threshold: isolates the implementations
            cells[3] = grouping_accuracy(truth, drain3(masked, sim_th=miner_defaults.sim_threshold))
        rows.append((name, [*cells, PUBLISHED_DRAIN[name]]))
    return rows


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def print_table(rows: list[Row]) -> None:
    print("| set | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(_fmt(c) for c in cells) + " |")
    avgs: list[float | None] = []
    for i in range(len(COLUMNS)):
        vals = [cells[i] for _, cells in rows]
        avgs.append(None if any(v is None for v in vals) else sum(v or 0.0 for v in vals) / len(vals))
    print("| **average** | " + " | ".join(_fmt(a) for a in avgs) + " |")


def _timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
    return time.perf_counter() - t0, out


def throughput(mb: int) -> None:
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"templates_{mb}M.log"
    if not path.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "bench" / "gen_log.py"), str(path), "--size", f"{mb}M"],
            check=True,
            capture_output=True,
        )
    size_mb = path.stat().st_size / 1e6
    # split on "\n" only, as grep and wc do (the synthetic log holds tqdm "\r" updates)
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    if lines and not lines[-1]:
        lines.pop()
    n = len(lines)

    t0 = time.perf_counter()
    for line in lines:
        mask(line)
    t_mask = time.perf_counter() - t0

    t0 = time.perf_counter()
    miner = TemplateMiner()
    for line in lines:
        miner.add(line)
    t_add = time.perf_counter() - t0

    env = {**os.environ, "LC_ALL": "C"}
    res: list[tuple[str, float, str]] = [
        ("mask", t_mask, f"{n} lines"),
        ("mask + TemplateMiner.add", t_add, f"{len(miner)} clusters"),
    ]
    drain3 = _drain3_factory()
    if drain3 is not None:
        t0 = time.perf_counter()
        ids = drain3(mask(x) for x in lines)
        res.append(("mask + drain3 add_log_message", time.perf_counter() - t0, f"{len(set(ids))} clusters"))
    for cmd in (["grep", "-c", "."], ["wc", "-l"], ["rg", "-c", "."]):
        if shutil.which(cmd[0]) is None:
            continue
        t0 = time.perf_counter()
        out = subprocess.run([*cmd, str(path)], capture_output=True, text=True, env=env).stdout.split()
        res.append((" ".join(cmd), time.perf_counter() - t0, f"{out[0] if out else '?'} lines"))
    print(f"\nthroughput on {path.relative_to(ROOT)} ({size_mb:.1f} MB, {n} lines), one run:")
    print("| what | seconds | lines/s | MB/s | note |")
    print("|---|---|---|---|---|")
    for what, secs, note in res:
        print(f"| {what} | {secs:.2f} | {n / secs:,.0f} | {size_mb / secs:.1f} | {note} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--loghub", default=DEFAULT_LOGHUB, help="git dir of a logpai/loghub mirror")
    ap.add_argument("--throughput-mb", type=int, default=32, help="size of the synthetic log (MiB)")
    ap.add_argument("--no-throughput", action="store_true")
    args = ap.parse_args(argv)
    print_table(accuracy_table(args.loghub))
    if not args.no_throughput:
        throughput(args.throughput_mb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
