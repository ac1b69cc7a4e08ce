#!/usr/bin/env python3
"""Scan throughput of `logtriage analyze` against ripgrep and GNU grep, on one log, in one run.

All tools get the same rule patterns (``logtriage rules export --format grep``) and the same file,
whose pages are read once first so every run is served from the page cache. Each command runs
``--runs`` times (rounds interleave the tools); the table reports the MEDIAN wall time, MB/s
(10^6 bytes of uncompressed log per second), the ratio to ripgrep's median on the same input,
the peak RSS of the largest process (wait4 ru_maxrss), the peak PSS summed over the process
tree (sampled every 50 ms: counts worker processes of ``--jobs 2``) and the CPU time.

    python bench/scan_bench.py [--size 1G | --file PATH] [--runs 3] [--gzip] [--rules-scale N]

Results: a table on stdout and ``bench/out/scan.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(BENCH))

import gen_log  # noqa: E402  (sibling module; bench/ is not a package)


class BenchError(SystemExit):
    def __init__(self, msg: str) -> None:
        super().__init__(f"scan_bench: error: {msg}")


# --- locating the tools ----------------------------------------------------------------------
def logtriage_command(override: str | None) -> list[str]:
    """The command that runs the logtriage CLI."""
    if override:
        return shlex.split(override)
    venv_bin = Path(sys.executable).parent / "logtriage"
    if venv_bin.exists():
        return [str(venv_bin)]
    on_path = shutil.which("logtriage")
    if on_path:
        return [on_path]
    if (REPO / "app" / "cli.py").exists():  # not installed: run the module from the checkout
        return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]
    raise BenchError(
        "the logtriage CLI was not found (no `logtriage` next to the Python interpreter or on "
        "PATH, and no app/cli.py). Install the project (`pip install -e .`) or pass "
        "--logtriage 'CMD'."
    )


def need(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise BenchError(f"`{tool}` not found; {hint}")
    return path


def version(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (p.stdout or p.stderr).strip().splitlines()
    return text[0] if p.returncode == 0 and text else "unknown"


def logtriage_version(lt: list[str]) -> str:
    v = version([*lt, "--version"])
    if v != "unknown":
        return v
    try:
        return importlib.metadata.version("logtriage")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def export_patterns(lt: list[str], rules_scale: int, dest: Path) -> int:
    cmd = [*lt, "rules", "export", "--format", "grep"]
    if rules_scale:
        cmd += ["--extra-synthetic-rules", str(rules_scale)]
    try:
        p = subprocess.run(cmd, capture_output=True, cwd=REPO, timeout=600)
    except OSError as exc:
        raise BenchError(f"cannot run {shlex.join(cmd)}: {exc}") from None
    if p.returncode != 0:
        raise BenchError(
            f"`{shlex.join(cmd)}` failed (exit {p.returncode}); the bench needs it to print one "
            f"ERE pattern per line.\n{p.stderr.decode(errors='replace').strip()[-2000:]}"
        )
    lines = [ln for ln in p.stdout.decode().splitlines() if ln.strip()]
    if not lines:
        raise BenchError(f"`{shlex.join(cmd)}` printed no patterns")
    dest.write_text("\n".join(lines) + "\n")
    return len(lines)


_WORD_BOUNDARY = re.compile(r"(?<!\\)((?:\\\\)*)\\([bB])")


def ascii_boundaries(patterns: Path) -> Path:
    """A copy for ripgrep with `\\b`/`\\B` made ASCII: `(?-u:\\b)`.

    ripgrep 13's lazy DFA gives up on Unicode word boundaries as soon as a line holds a
    non-ASCII byte (tqdm bars do), and the whole pattern set then runs in the slow NFA:
    about 40x slower on these logs. `grep -E` under LC_ALL=C treats `\\b` as ASCII too,
    so the rewrite keeps both tools on the same semantics.
    """
    dest = patterns.with_suffix(".rg")
    lines = patterns.read_text().splitlines()
    dest.write_text("".join(_WORD_BOUNDARY.sub(r"\1(?-u:\\\2)", ln) + "\n" for ln in lines))
    return dest


def check_patterns(patterns: Path, rg_patterns: Path) -> None:
    """Both grep -E and rg must accept every exported pattern."""
    for cmd in (
        ["grep", "-E", "-c", "-f", str(patterns), "/dev/null"],
        ["rg", "--no-config", "-c", "-f", str(rg_patterns), "/dev/null"],
    ):
        p = subprocess.run(cmd, capture_output=True, text=True, env=tool_env())
        if p.returncode not in (0, 1):
            raise BenchError(
                f"`{shlex.join(cmd)}` rejects the exported patterns:\n{p.stderr.strip()[-2000:]}"
            )


def tool_env() -> dict[str, str]:
    env = dict(os.environ, LC_ALL="C")
    env.pop("RIPGREP_CONFIG_PATH", None)
    env.pop("GREP_OPTIONS", None)
    return env


# --- the log ---------------------------------------------------------------------------------
def ensure_log(size: int, seed: int) -> Path:
    """Generate bench/out/log-<size>-s<seed>.log unless an identical one exists."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"log-{size}-s{seed}.log"
    manifest = Path(f"{path}.manifest.json")
    if path.exists() and manifest.exists():
        try:
            m = json.loads(manifest.read_text())
        except ValueError:
            m = {}
        if (
            m.get("gen_version") == gen_log.GEN_VERSION
            and m.get("size") == size
            and m.get("seed") == seed
            and m.get("failures") == "end"
            and not m.get("gzip")
            and path.stat().st_size == size
        ):
            print(f"reusing {path}", file=sys.stderr)
            return path
    print(f"generating {path} ({size:,} bytes) ...", file=sys.stderr)
    m = gen_log.generate(path, size, seed)
    print(f"  {m['seconds']:.1f}s, {m['mb_per_s']:.0f} MB/s", file=sys.stderr)
    return path


def ensure_gzip(src: Path) -> Path:
    dst = src.with_name(src.name + ".gz") if src.parent == OUT else OUT / (src.name + ".gz")
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
        print(f"reusing {dst}", file=sys.stderr)
        return dst
    print(f"compressing {src} -> {dst} ...", file=sys.stderr)
    gen_log.gzip_copy(src, dst)
    return dst


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(16 << 20):
            pass


# --- running and measuring -------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            continue
    return out


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak of the summed PSS of a process tree, sampled periodically."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total = sum(pss_kb(p) for p in descendants(self.pid))
            self.peak_kb = max(self.peak_kb, total)
            self.stop.wait(self.interval)


@dataclass
class Run:
    seconds: float
    exit_code: int
    max_rss_mb: float
    tree_pss_mb: float
    cpu_seconds: float
    timed_out: bool = False


GNU_TIME = "/usr/bin/time"


def run_once(cmd: list[str], stdout: Path, stderr: Path, timeout: float) -> Run:
    """Run `cmd` once; wall time, peak RSS, tree PSS and CPU time.

    Peak RSS and CPU come from GNU time when installed: wait4's ru_maxrss of a child forked
    from this (bigger) Python process would report this process's RSS for small tools.
    """
    usage = stdout.with_suffix(".time")
    use_time = os.access(GNU_TIME, os.X_OK)
    full = [GNU_TIME, "-f", "%M %U %S", "-o", str(usage), *cmd] if use_time else cmd
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            full, stdout=out, stderr=err, cwd=REPO, env=tool_env(), start_new_session=True
        )
        sampler = TreeSampler(proc.pid)
        sampler.start()
        killed = threading.Event()
        lock = threading.Lock()
        exited = False

        def kill() -> None:  # the session started for this run only, while not yet reaped
            with lock:
                if not exited:
                    killed.set()
                    os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        secs = time.perf_counter() - t0
        with lock:
            exited = True
        timer.cancel()
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
        sampler.stop.set()
        sampler.join()
    max_rss_kb, cpu = float(ru.ru_maxrss), ru.ru_utime + ru.ru_stime
    if use_time and not killed.is_set():
        try:  # the last line (GNU time may first say "Command exited with non-zero status")
            rss, user, sys_ = usage.read_text().strip().splitlines()[-1].split()
            max_rss_kb, cpu = float(rss), float(user) + float(sys_)
        except (OSError, ValueError, IndexError):
            pass
    return Run(
        seconds=secs,
        exit_code=proc.returncode,
        max_rss_mb=max_rss_kb / 1024,
        tree_pss_mb=sampler.peak_kb / 1024,
        cpu_seconds=cpu,
        timed_out=killed.is_set(),
    )


@dataclass
class Case:
    tool: str  # display name
    kind: str  # rg | grep | logtriage
    input: str  # plain | gzip
    cmd: list[str]
    runs: list[Run] = field(default_factory=list)
    output: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", f"{self.tool}-{self.input}".lower()).strip("-")


def summarize_output(case: Case, stdout: Path, planted: list[dict[str, Any]]) -> dict[str, Any]:
    text = stdout.read_text(errors="replace")
    if case.kind != "logtriage":
        try:
            return {"matching_lines": int(text.split()[0]) if text.strip() else 0}
        except ValueError:
            return {"raw": text[:200]}
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {"json_error": str(exc), "head": text[:300]}
    out: dict[str, Any] = {"json_bytes": len(text)}
    if isinstance(data, dict):
        out["keys"] = sorted(data)[:20]
        if "library_version" in data:
            out["library_version"] = data["library_version"]
        for key in ("findings", "results", "matches"):
            if isinstance(data.get(key), list):
                out[f"n_{key}"] = len(data[key])
    if planted:  # which planted failure classes the output mentions at all
        out["planted_classes_mentioned"] = {p["failure_class"]: p["failure_class"] in text for p in planted}
    return out


def check_run(case: Case, r: Run, stderr: Path, stdout: Path) -> str:
    if r.timed_out:
        return f"timed out after {r.seconds:.0f}s"
    if case.kind in ("rg", "grep"):
        if r.exit_code not in (0, 1):
            return f"exit {r.exit_code}: {stderr.read_text(errors='replace')[-1500:]}"
        return ""
    try:
        json.loads(stdout.read_bytes())
    except ValueError:
        return f"exit {r.exit_code}, stdout is not JSON: {stderr.read_text(errors='replace')[-1500:]}"
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument(
        "--size",
        type=gen_log.parse_size,
        default=gen_log.parse_size("1G"),
        help="generate a log of this size into bench/out/ (default 1G = 2^30 B)",
    )
    src.add_argument("--file", type=Path, help="bench an existing (uncompressed) log instead")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3, help="runs per command (median reported)")
    ap.add_argument(
        "--gzip", action="store_true", help="also bench a gzip copy: logtriage on .gz vs `rg -z` and zgrep"
    )
    ap.add_argument(
        "--rules-scale",
        type=int,
        default=0,
        metavar="N",
        help="pass --extra-synthetic-rules N to `logtriage rules export` and `logtriage analyze`",
    )
    ap.add_argument("--jobs", default="1,2", help="logtriage --jobs values (default 1,2)")
    ap.add_argument("--tools", default="rg,grep,logtriage", help="subset of rg,grep,logtriage to run")
    ap.add_argument("--timeout", type=float, default=1800, help="per-run limit, seconds")
    ap.add_argument(
        "--logtriage", metavar="CMD", help="command for the CLI (default: the installed `logtriage`)"
    )
    ap.add_argument(
        "--baseline",
        metavar="CMD",
        help="a second logtriage command (an older checkout, say) benched in the same rounds: "
        "a before/after figure on one machine state",
    )
    ap.add_argument(
        "--rg-unicode-boundaries",
        action="store_true",
        help="give ripgrep the patterns unchanged (by default \\b becomes (?-u:\\b) for rg)",
    )
    ap.add_argument(
        "--logtriage-args",
        default="",
        metavar="ARGS",
        help="extra arguments for `logtriage analyze`, e.g. '--engine regex'",
    )
    ap.add_argument("--json", type=Path, default=OUT / "scan.json", help="result file")
    args = ap.parse_args(argv)
    tools = {t.strip() for t in args.tools.split(",") if t.strip()}
    if not tools <= {"rg", "grep", "logtriage"}:
        ap.error(f"--tools: unknown {sorted(tools - {'rg', 'grep', 'logtriage'})}")
    if "rg" not in tools:
        print("note: ripgrep not run, the `x rg` column stays empty", file=sys.stderr)
    jobs = [int(j) for j in args.jobs.split(",") if j.strip()]

    # Fail fast, before generating a GB of log.
    need("rg", "install ripgrep (apt-get install -y ripgrep)")
    need("grep", "install GNU grep")
    if args.gzip:
        need("zgrep", "install gzip (provides zgrep)")
    lt = logtriage_command(args.logtriage)
    OUT.mkdir(parents=True, exist_ok=True)
    patterns = OUT / (f"patterns-x{args.rules_scale}.grep" if args.rules_scale else "patterns.grep")
    n_patterns = export_patterns(lt, args.rules_scale, patterns)
    rg_patterns = patterns if args.rg_unicode_boundaries else ascii_boundaries(patterns)
    check_patterns(patterns, rg_patterns)

    if args.file:
        log = args.file.resolve()
        if not log.is_file():
            raise BenchError(f"--file {log}: no such file")
    else:
        log = ensure_log(args.size, args.seed)
    manifest_path = Path(f"{log}.manifest.json")
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    planted = manifest.get("planted", [])
    inputs = {"plain": log}
    if args.gzip:
        inputs["gzip"] = ensure_gzip(log)
    nbytes = log.stat().st_size
    for path in inputs.values():
        warm(path)

    extra = ["--extra-synthetic-rules", str(args.rules_scale)] if args.rules_scale else []
    extra += shlex.split(args.logtriage_args)
    cases: list[Case] = []
    for kind, path in inputs.items():
        gz = kind == "gzip"
        if "rg" in tools:
            cases.append(
                Case(
                    "ripgrep",
                    "rg",
                    kind,
                    ["rg", "--no-config", *(["-z"] if gz else []), "-c", "-f", str(rg_patterns), str(path)],
                )
            )
        if "grep" in tools:
            cases.append(
                Case(
                    "zgrep -E" if gz else "grep -E",
                    "grep",
                    kind,
                    ["zgrep" if gz else "grep", "-E", "-c", "-f", str(patterns), str(path)],
                )
            )
        if "logtriage" in tools:
            for j in jobs:
                cases.append(
                    Case(
                        f"logtriage --jobs {j}",
                        "logtriage",
                        kind,
                        [*lt, "analyze", str(path), "--format", "json", "--jobs", str(j), *extra],
                    )
                )
                if args.baseline:
                    base = shlex.split(args.baseline)
                    cases.append(
                        Case(
                            f"baseline --jobs {j}",
                            "logtriage",
                            kind,
                            [*base, "analyze", str(path), "--format", "json", "--jobs", str(j), *extra],
                        )
                    )

    runs_dir = OUT / "runs"
    runs_dir.mkdir(exist_ok=True)
    for rnd in range(args.runs):  # rounds interleave the tools, spreading any drift evenly
        for case in cases:
            if case.error:
                continue
            so, se = runs_dir / f"{case.slug}.out", runs_dir / f"{case.slug}.err"
            r = run_once(case.cmd, so, se, args.timeout)
            problem = check_run(case, r, se, so)
            print(
                f"[{rnd + 1}/{args.runs}] {case.tool:<20} {case.input:<5} {r.seconds:8.2f}s"
                + (f"  FAILED: {problem.splitlines()[0] if problem else ''}" if problem else ""),
                file=sys.stderr,
            )
            if problem:
                case.error = problem
                continue
            case.runs.append(r)
            if rnd == 0:
                case.output = summarize_output(case, so, planted)

    results = report(cases, nbytes)
    paired = paired_ratios(cases)
    for line in paired:
        print(line["text"])
    for kind in inputs:
        counts = {
            c.tool: c.output.get("matching_lines")
            for c in cases
            if c.input == kind and c.kind in ("rg", "grep") and c.runs
        }
        if len(set(counts.values())) > 1:
            print(
                f"warning: matching-line counts differ on {kind} input: {counts} "
                "(a pattern means different things to ERE and to ripgrep)",
                file=sys.stderr,
            )
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "cpu": cpu_model(),
            "python": platform.python_version(),
        },
        "versions": {
            "rg": version(["rg", "--version"]),
            "grep": version(["grep", "--version"]),
            "logtriage": version([*lt, "--version"]),
        },
        "file": str(log),
        "bytes": nbytes,
        "lines": manifest.get("lines"),
        "gzip_file": str(inputs["gzip"]) if "gzip" in inputs else None,
        "gzip_bytes": inputs["gzip"].stat().st_size if "gzip" in inputs else None,
        "patterns_file": str(patterns),
        "rg_patterns_file": str(rg_patterns),
        "patterns": n_patterns,
        "rules_scale": args.rules_scale,
        "logtriage_args": args.logtriage_args,
        "runs": args.runs,
        "statistic": "median of runs (seconds_min and all times also given)",
        "mb": "10^6 bytes of uncompressed log",
        "planted": [{k: p[k] for k in ("id", "failure_class", "line")} for p in planted],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "results": results, "paired": paired}, indent=2) + "\n")
    print(f"\nwrote {args.json}", file=sys.stderr)
    return 1 if any(c.error for c in cases) else 0


def paired_ratios(cases: list[Case]) -> list[dict[str, object]]:
    """logtriage's time over the baseline's, round by round (the two run back to back): on a
    shared host whose speed drifts by a quarter from minute to minute, the median of these
    ratios moves far less than the ratio of the two medians."""
    out: list[dict[str, object]] = []
    by_name = {(c.tool, c.input): c for c in cases}
    for (tool, kind), case in by_name.items():
        if not tool.startswith("logtriage "):
            continue
        base = by_name.get((tool.replace("logtriage", "baseline", 1), kind))
        if base is None or not case.runs or len(case.runs) != len(base.runs):
            continue
        ratios = sorted(a.seconds / b.seconds for a, b in zip(case.runs, base.runs, strict=True))
        med = statistics.median(ratios)
        out.append(
            {
                "tool": tool,
                "input": kind,
                "ratios": [round(r, 4) for r in ratios],
                "median_ratio": round(med, 4),
                "text": (
                    f"{tool} {kind}: time / baseline's, median of {len(ratios)} back-to-back rounds "
                    f"{med:.3f} (range {ratios[0]:.3f}-{ratios[-1]:.3f}): throughput "
                    f"{(1 / med - 1) * 100:+.1f}%"
                ),
            }
        )
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def report(cases: list[Case], nbytes: int) -> list[dict[str, Any]]:
    rg_median = {
        c.input: statistics.median(r.seconds for r in c.runs) for c in cases if c.kind == "rg" and c.runs
    }
    rows: list[dict[str, Any]] = []
    for c in cases:
        row: dict[str, Any] = {"tool": c.tool, "input": c.input, "cmd": c.cmd}
        if c.runs:
            med = statistics.median(r.seconds for r in c.runs)
            base = rg_median.get(c.input)
            row |= {
                "seconds": round(med, 3),
                "seconds_min": round(min(r.seconds for r in c.runs), 3),
                "times": [round(r.seconds, 3) for r in c.runs],
                "mb_per_s": round(nbytes / med / 1e6, 1),
                "ratio_vs_rg": round(med / base, 2) if base else None,
                "max_rss_mb": round(max(r.max_rss_mb for r in c.runs), 1),
                "tree_pss_mb": round(max(r.tree_pss_mb for r in c.runs), 1),
                "cpu_seconds": round(statistics.median(r.cpu_seconds for r in c.runs), 2),
                "exit_codes": sorted({r.exit_code for r in c.runs}),
                "output": c.output,
                "runs": [asdict(r) for r in c.runs],
            }
        if c.error:
            row["error"] = c.error
        rows.append(row)

    head = (
        f"{'tool':<22} {'input':<6} {'seconds':>8} {'MB/s':>8} {'x rg':>6} "
        f"{'maxRSS MB':>9} {'treePSS MB':>10} {'CPU s':>7}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        error = row.get("error", "")
        first = error.splitlines()[0][:60] if error else ""
        if "seconds" not in row:
            print(f"{row['tool']:<22} {row['input']:<6} FAILED: {first}")
            continue
        ratio = f"{row['ratio_vs_rg']:.2f}" if row["ratio_vs_rg"] is not None else "-"
        print(
            f"{row['tool']:<22} {row['input']:<6} {row['seconds']:>8.2f} "
            f"{row['mb_per_s']:>8.1f} {ratio:>6} {row['max_rss_mb']:>9.0f} "
            f"{row['tree_pss_mb']:>10.0f} {row['cpu_seconds']:>7.2f}"
            + (f"  FAILED after {len(row['times'])} run(s): {first}" if error else "")
        )
    print(
        "seconds = median wall time; x rg = seconds / ripgrep's seconds on the same input "
        "(>1 is slower); MB/s over the uncompressed size"
    )
    return rows


if __name__ == "__main__":
    sys.exit(main())
