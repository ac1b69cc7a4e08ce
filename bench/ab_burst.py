#!/usr/bin/env python3
"""Two builds taking turns at burst_bench.py: is a change's effect on the burst larger than the
host's swings?

    python -P bench/ab_burst.py --base /tmp/base [--pairs 8] [--hooks 200] [--single-n 10]

`--base` is another checkout's tree (`git archive REF | tar -x -C /tmp/base`); this checkout is
the other build. A tree from before this script needs this checkout's `bench/burst_bench.py`
(and `bench/trivial_app.py`, `bench/load_bench.py`) copied in: the table reads what they
report. Each pair runs `burst_bench.py --rounds 1` from the base tree, then from this one (each
with PYTHONPATH set to its own tree, as the servers inherit it), and the table lists both runs'
POST p99 and p50, their ratio to the trivial endpoint's p99, the web processes' CPU to the last
answer and one hook alone. At the end: in how many pairs this build's p99 (and p50, web CPU,
one hook) was the lower, and the medians.

Why pairs and a count, not one run each: on a shared 2-vCPU host the same build's p99 moves
by a third between runs, in slow swings that can last several runs (bench/README.md, "Hashing a
burst's bodies beside the event loop": seven of eight pairs one way, then seven of eight the
other, for the same change). Read a result as real only when the count is lopsided over at least
eight pairs, and again in a second set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def run(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [
        sys.executable,
        "-P",
        str(tree / "bench" / "burst_bench.py"),
        "--hooks",
        str(args.hooks),
        "--rounds",
        "1",
        "--single-n",
        str(args.single_n),
    ]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"ab_burst: burst_bench failed in {tree}:\n{proc.stderr[-2000:]}")
    report = json.loads((tree / "bench" / "out" / "burst.json").read_text())
    r = report["rounds"][0]
    lt, tr = r["logtriage"], r["trivial"]
    return {
        "p99": lt["post_ms"]["p99"],
        "p50": lt["post_ms"]["p50"],
        "trivial_p99": tr["post_ms"]["p99"],
        "ratio": lt["post_ms"]["p99"] / tr["post_ms"]["p99"],
        "web_cpu": lt["cpu_s"]["web"],
        "single": r["logtriage_single_ms"],
        "trivial_single": r["trivial_single_ms"],
        "errors": lt["server_errors"],
        "done": lt["analyses"]["done"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, required=True, help="the other build's tree")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--hooks", type=int, default=200)
    p.add_argument("--single-n", type=int, default=10)
    args = p.parse_args()
    base = args.base.resolve()
    if not (base / "bench" / "burst_bench.py").is_file():
        raise SystemExit(f"ab_burst: {base} has no bench/burst_bench.py (copy it there)")
    rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
    print("pair | base p99 (ratio) p50, web CPU, one hook | this p99 (ratio) p50, web CPU, one hook")
    for i in range(args.pairs):
        a, b = run(base, args), run(HERE, args)
        rows.append((a, b))
        print(
            f"{i + 1:4d} | {a['p99']:7.0f} ({a['ratio']:.2f}x) {a['p50']:6.0f}, {a['web_cpu']:.2f} s, "
            f"{a['single']:.1f} ms | {b['p99']:7.0f} ({b['ratio']:.2f}x) {b['p50']:6.0f}, "
            f"{b['web_cpu']:.2f} s, {b['single']:.1f} ms",
            flush=True,
        )
        for r in (a, b):
            if r["errors"] or r["done"] != args.hooks:
                print(f"     ! {r['errors']} server errors, {r['done']} of {args.hooks} done")
    measures = (("p99", "POST p99"), ("p50", "POST p50"), ("web_cpu", "web CPU"), ("single", "one hook"))
    for key, label in measures:
        lower = sum(1 for a, b in rows if b[key] < a[key])
        med_a = statistics.median(a[key] for a, _ in rows)
        med_b = statistics.median(b[key] for _, b in rows)
        print(f"{label}: this build lower in {lower} of {len(rows)} pairs; medians {med_a:.2f}, {med_b:.2f}")
    within = sum(1 for _, b in rows if b["ratio"] <= 3)
    print(f"this build's p99 within 3x the trivial endpoint's in {within} of {len(rows)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
