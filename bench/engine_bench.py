#!/usr/bin/env python3
"""Rule-count growth and start-up time of `logtriage analyze`.

    python bench/engine_bench.py growth [--size 1G] [--runs 3]   # 73 / 200 / 1000 rules, one core
    python bench/engine_bench.py startup [--runs 20]              # a one-line log, warm caches
    python bench/engine_bench.py redact [--size 1G] [--runs 3]    # the service's stream redaction

growth: the library plus synthetic rules (`--extra-synthetic-rules`, distinct literals that never
match) brought to 200 and 1000 rules; reports the scan-only MB/s (`stats.scan_seconds` of the JSON
report), the wall time, and each figure's ratio to the library's own. Target: within 2x at 1000.
startup: median wall time of the whole command on a tiny log after one warm-up run (compiled
library cached). Target: under 0.3 s.
redact: `redact_stream` (what the service stores) over the generated log, plain and with every
line wrapped in ANSI colour codes (as Ray prints them to a terminal), next to `rg -P -c` with
the same secret patterns (PCRE2: they use look-arounds) on the same file.
Results also go to bench/out/engine-<mode>.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import scan_bench  # noqa: E402  (sibling module; bench/ is not a package)

ROOT = Path(__file__).resolve().parents[1]


def _analyze(lt: list[str], path: Path, extra: int) -> tuple[float, dict[str, object]]:
    cmd = [*lt, "analyze", str(path), "--jobs", "1", "--format", "json"]
    if extra:
        cmd += ["--extra-synthetic-rules", str(extra)]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, check=True, text=True)
    return time.perf_counter() - t, json.loads(out.stdout)


def growth(lt: list[str], size: int, runs: int) -> dict[str, object]:
    path = scan_bench.ensure_log(size, 0)
    scan_bench.warm(path)
    listing = subprocess.run([*lt, "rules", "list", "--json"], capture_output=True, check=True, text=True)
    base = len(json.loads(listing.stdout))
    rows = []
    for total in (base, 200, 1000):
        extra = max(0, total - base)
        _analyze(lt, path, extra)  # compile and cache the database once
        walls, scans, findings = [], [], None
        for _ in range(runs):
            wall, report = _analyze(lt, path, extra)
            stats = report["stats"]
            assert isinstance(stats, dict)
            walls.append(wall)
            scans.append(float(stats["scan_seconds"]))
            findings = [f["rule_id"] for f in report["findings"]]  # type: ignore[index, union-attr]
        rows.append(
            {
                "rules": base + extra,
                "scan_s": statistics.median(scans),
                "scan_mb_s": size / 1e6 / statistics.median(scans),
                "wall_s": statistics.median(walls),
                "findings": findings,
            }
        )
    first = rows[0]
    print(f"{'rules':>6} {'scan s':>8} {'scan MB/s':>10} {'wall s':>8} {'slowdown':>9}")
    for r in rows:
        r["slowdown"] = float(r["scan_s"]) / float(first["scan_s"])  # type: ignore[arg-type]
        cells = f"{r['rules']:>6} {r['scan_s']:>8.2f} {r['scan_mb_s']:>10.0f} {r['wall_s']:>8.2f}"
        print(f"{cells} {r['slowdown']:>8.2f}x")
    same = all(r["findings"] == first["findings"] for r in rows)
    print(f"findings identical at every scale: {same}")
    return {"size": size, "rows": rows, "findings_identical": same}


def _serve_ready_s(cmd: list[str], env: dict[str, str], data_dir: Path) -> float:
    """Seconds from starting `serve` (one worker, SQLite) to its first `/readyz` 200."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve_env = {**env, "LOGTRIAGE_DATA_DIR": str(data_dir), "LOGTRIAGE_HOST": "127.0.0.1"}
    t = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "serve", "--port", str(port), "--workers", "1"],
        env=serve_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"engine_bench: serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - t
            except OSError:
                time.sleep(0.01)  # polling a process start: the measured quantity itself
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def startup(lt: list[str], runs: int, baseline: list[str] | None = None) -> dict[str, object]:
    """Whole-process wall times: what a person waits for at the prompt. Bytecode is written
    first (a fresh checkout has none, and PYTHONDONTWRITEBYTECODE would make every run compile
    the sources), the rule cache is warm, each command runs once before timing. With
    `baseline` (an older checkout's CLI), each of its commands runs right after ours, round by
    round, so both see the same machine state; `serve` start-up (to the first `/readyz` 200) is
    timed for both too."""
    import os
    import shutil
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    roots = [ROOT / "app"]
    if baseline:
        # the baseline's sources: `env PYTHONPATH=DIR ...` names them
        roots += [Path(a.split("=", 1)[1]) / "app" for a in baseline if a.startswith("PYTHONPATH=")]
    for root in roots:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root)], check=True, env=env)
    example = ROOT / "examples" / "ecc-cascade"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "one.log"
        log.write_text(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. "
            "GPU 0 has a total capacity of 80.00 GiB of which 0 bytes is free.\n"
        )
        patterns = Path(tmp) / "patterns.txt"
        subprocess.run([*lt, "rules", "export", "--format", "grep"], stdout=patterns.open("w"), check=True)
        clis = {"": lt, **({"baseline ": baseline} if baseline else {})}
        commands: dict[str, list[str]] = {"python -c pass (bare interpreter)": [sys.executable, "-c", "pass"]}
        for prefix, cli in clis.items():
            commands[f"{prefix}logtriage --help"] = [*cli, "--help"]
        for prefix, cli in clis.items():
            commands[f"{prefix}logtriage analyze one-line log"] = [*cli, "analyze", str(log), "--jobs", "1"]
        for prefix, cli in clis.items():
            commands[f"{prefix}logtriage analyze examples/ecc-cascade"] = [*cli, "analyze", str(example)]
        if shutil.which("rg"):
            commands["rg -f patterns examples/ecc-cascade"] = ["rg", "-c", "-f", str(patterns), str(example)]
        if shutil.which("grep"):
            commands["grep -E -f patterns examples/ecc-cascade"] = [
                "grep",
                "-rEc",
                "-f",
                str(patterns),
                str(example),
            ]
        walls: dict[str, list[float]] = {label: [] for label in commands}
        for cmd in commands.values():
            subprocess.run(cmd, capture_output=True, env=env)  # warm-up
        for _ in range(runs):  # round by round: a load change hits every command alike
            for label, cmd in commands.items():
                t = time.perf_counter()
                subprocess.run(cmd, capture_output=True, env=env)
                walls[label].append(time.perf_counter() - t)
        if baseline:
            serves = {f"{p}logtriage serve to first /readyz": cli for p, cli in clis.items()}
            for label, cli in serves.items():  # warm-up: the database created, bytecode written
                _serve_ready_s(cli, env, Path(tmp) / label.split()[0])
                walls[label] = []
            for _ in range(max(5, runs // 2)):
                for label, cli in serves.items():
                    walls[label].append(_serve_ready_s(cli, env, Path(tmp) / label.split()[0]))
        out: dict[str, object] = {}
        for label, w in walls.items():
            med = statistics.median(w)
            out[label] = {"median_s": round(med, 4), "min_s": round(min(w), 4)}
            print(f"{label:48} median {med * 1000:6.0f} ms   min {min(w) * 1000:6.0f} ms")
    return {"runs": runs, "commands": out}


def redact(size: int, runs: int) -> dict[str, object]:
    from app.engine.pipeline.redact import RULES, redact_stream

    path = scan_bench.ensure_log(size, 0)
    coloured = path.with_name(path.stem + "-ansi.log")
    if not coloured.exists():
        with path.open("rb") as src, coloured.open("wb") as dst:
            for line in src:
                dst.write(b"\x1b[36m" + line.rstrip(b"\n") + b"\x1b[0m\n")
    patterns = path.with_name("redact-patterns.txt")
    # PCRE2 (`rg -P`): the rules use look-arounds; one name may not name several groups
    patterns.write_text("".join(p.replace("?P<secret>", "") + "\n" for _, p in RULES))
    out: dict[str, object] = {"size": size}
    for label, f in (("plain", path), ("ansi", coloured)):
        scan_bench.warm(f)
        n = f.stat().st_size
        walls = []
        for _ in range(runs):
            t = time.perf_counter()
            with f.open("rb") as fh:
                for _chunk in redact_stream(fh):
                    pass
            walls.append(time.perf_counter() - t)
        rg = []
        for _ in range(runs):
            t = time.perf_counter()
            done = subprocess.run(["rg", "-P", "-c", "-f", str(patterns), str(f)], capture_output=True)
            if done.returncode > 1:  # 1: no line matched
                raise SystemExit(f"engine_bench: rg failed: {done.stderr.decode()[:300]}")
            rg.append(time.perf_counter() - t)
        ours, theirs = n / 1e6 / statistics.median(walls), n / 1e6 / statistics.median(rg)
        print(f"{label:6} redact_stream {ours:7.0f} MB/s   rg -P -c (same patterns) {theirs:7.0f} MB/s")
        out[label] = {"redact_mb_s": ours, "rg_mb_s": theirs}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["growth", "startup", "redact"])
    p.add_argument("--size", default="1G")
    p.add_argument("--runs", type=int, default=0)
    p.add_argument("--logtriage", help="command for the CLI")
    p.add_argument(
        "--baseline",
        help='startup: an older checkout\'s CLI, e.g. "env PYTHONPATH=/tmp/base python -P -m app.cli"',
    )
    args = p.parse_args()
    lt = scan_bench.logtriage_command(args.logtriage)
    if args.mode == "growth":
        result = growth(lt, scan_bench.gen_log.parse_size(args.size), args.runs or 3)
    elif args.mode == "redact":
        result = redact(scan_bench.gen_log.parse_size(args.size), args.runs or 3)
    else:
        base = shlex.split(args.baseline) if args.baseline else None
        result = startup(lt, args.runs or 20, base)
    scan_bench.OUT.mkdir(parents=True, exist_ok=True)
    (scan_bench.OUT / f"engine-{args.mode}.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
