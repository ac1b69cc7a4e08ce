#!/usr/bin/env python3
"""Redaction measured against gitleaks' own examples, and its throughput.

    python bench/secrets_bench.py gitleaks GITLEAKS [--at REF] [--json OUT] [--show RULE]
    python bench/secrets_bench.py throughput LOG [--before REF] [--runs 3] [--mix N]

gitleaks: GITLEAKS is a gitleaks work tree, or its bare git directory (read with `git archive`
into a temporary directory). Every rule's true positives (`tps`) and false positives (`fps`) are
evaluated from its Go source (bench/gitleaks_samples.py) and given to `redact_stream` as a log
would be. A true positive counts as redacted when none of its generated secret parts survives (an
8-character piece of one is enough to count it leaked); an example written out literally in the
Go source, with no generated part, counts when its longest run of token characters is gone
(conservative: in `https://user:pass@host.example` that run is the host). A false positive counts
as untouched when it comes out byte for byte.

throughput: MB/s of `redact_stream` over LOG (e.g. `bench/gen_log.py LOG --size 256M`), for the
working tree's rules and, with `--before REF`, for `app/engine/pipeline/redact.py` as it was at REF,
alternating runs in one process on a warm page cache; the median of `--runs` is reported.
`--mix N` also times a copy of LOG with a fixture line (a planted secret or a healthy look-alike
from tests/secrets/planted.yaml) after every N lines: the generated log alone holds no line the
prefilter passes on, so it times Hyperscan only.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import gitleaks_samples  # noqa: E402  (sibling module; bench/ is not a package)

from app.engine.pipeline.redact import redact_stream  # noqa: E402

# a literal example's secret: its longest run of token characters (base64 padding kept at the end)
_WORD = re.compile(r"[A-Za-z0-9+_~-]+=*")


_STREAM: list[Callable[[BinaryIO], Iterator[bytes]]] = [redact_stream]  # --at REF replaces it


def _redact(text: str) -> str:
    out = b"".join(_STREAM[0](io.BytesIO(text.encode() + b"\n")))
    return out.decode("utf-8", "replace")[:-1]


def _leaked(sample: gitleaks_samples.Sample, out: str) -> bool:
    frags = [f for f in sample.frags if len(f) >= 6]
    if not frags:
        # written out: the longest run must be gone whole (pieces of it may be words of the key)
        words = _WORD.findall(sample.text)
        return bool(words) and max(words, key=len) in out
    # generated at random: no piece of 8 characters may survive
    for f in frags:
        n = min(8, len(f))
        if any(f[i : i + n] in out for i in range(len(f) - n + 1)):
            return True
    return False


def _checkout(path: Path, tmp: Path) -> Path:
    if (path / "cmd" / "generate").is_dir():
        return path
    # a bare mirror: its newest commit's generator sources, unpacked into `tmp`
    data = subprocess.run(
        ["git", "--git-dir", str(path), "archive", "HEAD", "cmd/generate"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")
    return tmp


def gitleaks(path: Path, show: str | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        rules = gitleaks_samples.load(_checkout(path, Path(tmp)))
    rows = []
    tp_n = tp_ok = fp_n = fp_ok = skipped = 0
    for rs in rules:
        tp_hit = sum(not _leaked(s, _redact(s.text)) for s in rs.tps)
        fp_hit = sum(_redact(s.text) == s.text for s in rs.fps)
        tp_n, tp_ok = tp_n + len(rs.tps), tp_ok + tp_hit
        fp_n, fp_ok = fp_n + len(rs.fps), fp_ok + fp_hit
        skipped += rs.skipped
        rows.append(
            {
                "rule": rs.rule,
                "tps": len(rs.tps),
                "tp_redacted": tp_hit,
                "fps": len(rs.fps),
                "fp_untouched": fp_hit,
            }
        )
        if show and rs.rule == show:
            for s in rs.tps:
                out = _redact(s.text)
                print(
                    ("ok   " if not _leaked(s, out) else "MISS ")
                    + repr(s.text)[:160]
                    + "\n  -> "
                    + repr(out)[:160]
                )
            for s in rs.fps:
                out = _redact(s.text)
                print(
                    ("ok   " if out == s.text else "FP   ") + repr(s.text)[:160] + "\n  -> " + repr(out)[:160]
                )
    result: dict[str, object] = {
        "rules": len(rows),
        "tps": tp_n,
        "tp_redacted_pct": round(100 * tp_ok / max(tp_n, 1), 2),
        "fps": fp_n,
        "fp_untouched_pct": round(100 * fp_ok / max(fp_n, 1), 2),
        "skipped_examples": skipped,
        "per_rule": rows,
    }
    return result


def _print_gitleaks(result: dict[str, object], below: float) -> None:
    print(f"{'rule':40} {'TP redacted':>14} {'FP untouched':>14}")
    for r in result["per_rule"]:  # type: ignore[attr-defined]
        tp = 100 * r["tp_redacted"] / r["tps"] if r["tps"] else 100.0
        fp = 100 * r["fp_untouched"] / r["fps"] if r["fps"] else 100.0
        if tp < below or fp < below:
            print(
                f"{r['rule']:40} {r['tp_redacted']:>5}/{r['tps']:<4} {tp:3.0f}% "
                f"{r['fp_untouched']:>5}/{r['fps']:<4} {fp:3.0f}%"
            )
    print(
        f"overall: {result['rules']} rules, true positives redacted {result['tp_redacted_pct']}% "
        f"of {result['tps']}, false positives untouched {result['fp_untouched_pct']}% of {result['fps']} "
        f"({result['skipped_examples']} examples or lists not evaluated)"
    )


def _module_at(ref: str) -> ModuleType:
    """app/engine/pipeline/redact.py as it was at `ref`, loaded beside the current one."""
    for path in ("app/engine/pipeline/redact.py", "app/engine/redact.py"):
        shown = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode == 0:
            break
    else:
        raise SystemExit(f"no redact.py at {ref}")
    # before the engine's subpackages its imports named app.engine.lines / app.engine.matcher
    src = re.sub(r"\bapp\.engine\.(lines|matcher)\b", r"app.engine.pipeline.\1", shown.stdout)
    spec = importlib.util.spec_from_loader("redact_before", loader=None)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, f"redact.py@{ref}", "exec"), mod.__dict__)
    return mod


def mixed_copy(log: Path, every: int) -> Path:
    """A copy of `log` with a line of tests/secrets/planted.yaml (secrets and healthy look-alikes,
    in turn) after every `every` lines: the lines the prefilter passes on to the rules."""
    import yaml

    data = yaml.safe_load((ROOT / "tests" / "secrets" / "planted.yaml").read_text())
    extra = [c["line"].encode() + b"\n" for c in data["planted"]] + [
        h.encode() + b"\n" for h in data["healthy"]
    ]
    out = log.with_name(f"{log.stem}.mixed{every}{log.suffix}")
    if out.exists():
        return out
    with log.open("rb") as src, out.open("wb") as dst:
        for i, line in enumerate(src):
            dst.write(line)
            if i % every == every - 1:
                dst.write(extra[(i // every) % len(extra)])
    return out


def throughput(log: Path, before: str | None, runs: int) -> dict[str, object]:
    fns: dict[str, Callable[[BinaryIO], Iterator[bytes]]] = {"after": redact_stream}
    if before:
        fns = {"before": _module_at(before).redact_stream, **fns}
    size = log.stat().st_size
    walls: dict[str, list[float]] = {k: [] for k in fns}
    outs: dict[str, int] = {}
    for label, fn in fns.items():  # warm-up: page cache, compiled rules, matcher
        with log.open("rb") as fh:
            outs[label] = sum(len(c) for c in fn(fh))
    for _ in range(runs):
        for label, fn in fns.items():
            t = time.perf_counter()
            with log.open("rb") as fh:
                for _chunk in fn(fh):
                    pass
            walls[label].append(time.perf_counter() - t)
    result: dict[str, object] = {"log": str(log), "bytes": size, "runs": runs, "before_ref": before}
    for label in fns:
        mb_s = size / 1e6 / statistics.median(walls[label])
        result[label] = {
            "mb_s": round(mb_s, 1),
            "walls_s": [round(w, 3) for w in walls[label]],
            "out_bytes": outs[label],
        }
        print(f"{label:6} redact_stream {mb_s:7.1f} MB/s  (median of {runs}, {size / 1e6:.0f} MB)")
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    g = sub.add_parser("gitleaks")
    g.add_argument("checkout", type=Path)
    g.add_argument("--json", type=Path)
    g.add_argument("--show", help="print each example of this rule and what came out")
    g.add_argument("--below", type=float, default=98.0, help="list the rules under this percentage")
    g.add_argument("--at", help="a git ref: measure app/engine/pipeline/redact.py as it was there")
    t = sub.add_parser("throughput")
    t.add_argument("log", type=Path)
    t.add_argument("--before", help="a git ref: also time app/engine/pipeline/redact.py as it was there")
    t.add_argument("--runs", type=int, default=3)
    t.add_argument("--mix", type=int, default=0, help="time a copy with a fixture line every N lines too")
    t.add_argument("--json", type=Path)
    args = p.parse_args()
    if args.mode == "gitleaks":
        if args.at:
            _STREAM[0] = _module_at(args.at).redact_stream
        result = gitleaks(args.checkout, args.show)
        _print_gitleaks(result, args.below)
    else:
        result = {"plain": throughput(args.log, args.before, args.runs)}
        if args.mix:
            print(f"with a planted or look-alike line every {args.mix} lines:")
            result["mixed"] = throughput(mixed_copy(args.log, args.mix), args.before, args.runs)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
