#!/usr/bin/env python3
"""The log viewer's search, next error and line ranges on a big stored log.

    python bench/viewer_search_bench.py [--size 2G] [--seed 0] [--ranges 300]

Stores the generated RL-job log (bench/gen_log.py, reused from bench/out/ when present; its
failure cascade is in the last ~1%) as the service does (`StagingWriter`, a frame every
``FRAME_BYTES``, with its index), then times what the page does, without HTTP or the database:

- a search request (`find_next` / `find_prev` within the page's budget, `SEARCH_BUDGET`) and the
  page it redirects to (`read_window` around the hit, every shown line coloured, marked and
  folded as `app.service.logview` does, and the hit count going on for `COUNT_BUDGET`);
  "first hit" is from the top of the log (or, for a hit near the end, from the last page
  backward, what "Find previous" there does), "next hit" from the first hit;
- a search that finds nothing: how many MB/s of the log a search reads;
- random line ranges (a 500-line page at a random line): median and p99 over ``--ranges``.

Page cache warm. Results also go to bench/out/viewer-search.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import scan_bench  # noqa: E402  (sibling module; bench/ is not a package)
import viewer_bench  # noqa: E402

from app.blobstore import DirectoryBlobStore  # noqa: E402
from app.blobstore.search import Count, Matcher, count_more, find_next, find_prev  # noqa: E402
from app.blobstore.window import read_window  # noqa: E402
from app.service import logview  # noqa: E402

OUT = BENCH / "out"


class Stored:
    def __init__(self, store: DirectoryBlobStore, sha256: str, index: Any, total: int, size: int) -> None:
        self.store, self.sha256, self.index, self.total, self.size = store, sha256, index, total, size

    def page(self, line: int, matcher: Matcher | None) -> float:
        """Seconds to build the page around ``line`` (no count)."""
        t = time.perf_counter()
        w = read_window(self.store, self.sha256, self.index, line=line)
        lines = [logview.view_line(ln, {}, matcher) for ln in w.lines]
        logview.fold_lines(lines, keep={line})
        assert w.first_line <= line <= w.last_line
        return time.perf_counter() - t

    def count(self, matcher: Matcher, state: Count) -> tuple[float, Count]:
        t = time.perf_counter()
        got = count_more(
            self.store,
            self.sha256,
            self.index,
            matcher,
            state,
            deadline=time.monotonic() + logview.COUNT_BUDGET,
        )
        return time.perf_counter() - t, got


def hop(s: Stored, matcher: Matcher, *, start: int, forward: bool, count: Count | None) -> dict[str, Any]:
    """A search request and the page it lands on; requests go on while the budget runs out."""
    t0 = time.perf_counter()
    requests, at = 0, start
    while True:
        requests += 1
        deadline = time.monotonic() + logview.SEARCH_BUDGET
        if forward:
            f = find_next(s.store, s.sha256, s.index, matcher, start_line=at + 1, deadline=deadline)
        else:
            f = find_prev(s.store, s.sha256, s.index, matcher, before_line=at, deadline=deadline)
        if f.line is not None or f.done:
            break
        at = f.reached
    found = time.perf_counter() - t0
    line = f.line
    page = s.page(line, matcher) if line else 0.0
    counted = 0.0
    if count is not None:
        counted, got = s.count(matcher, count)
        count.lines, count.reached, count.done = got.lines, got.reached, got.done
    return {
        "line": line,
        "requests": requests,
        "search_ms": found * 1000,
        "page_ms": page * 1000,
        "count_ms": counted * 1000,
        "total_ms": (found + page + counted) * 1000,
    }


def by_time(store: DirectoryBlobStore, pending: Any, total: int) -> dict[str, float]:
    """The "by time" page's step that grows with the log: the first line at a time, bisected
    over the line numbers (`app.service.logmerge._line_at`), at times spread over the log."""
    from types import SimpleNamespace

    from app.engine.timeline.clock import parse_time
    from app.service import logmerge

    ctx: Any = SimpleNamespace(store=store)
    src = logmerge._Src(0, "big.log", pending.sha256, pending.frames)
    walls, probes = [], []
    for frac in (0.1, 0.5, 0.9, 0.999):
        line = max(1, int(total * frac))
        t = logmerge._probe(ctx, src, line, None)
        assert t is not None
        t0 = time.perf_counter()
        got = logmerge._line_at(ctx, src, t, None)
        walls.append((time.perf_counter() - t0) * 1000)
        w = read_window(store, pending.sha256, pending.frames, line=got, max_lines=1, before=0)
        probes.append(parse_time(w.lines[0].text) or 0.0)
    print(
        "by time, the first line at a time (bisection over 9.3 M lines), ms: "
        + ", ".join(f"{w:.0f}" for w in walls)
    )
    return {"line_at_ms_max": max(walls), "line_at_ms_median": statistics.median(walls)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="2G")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ranges", type=int, default=300)
    p.add_argument(
        "--keep", action="store_true", help="keep the stored blob in bench/out/viewer-search-store"
    )
    args = p.parse_args()
    size = scan_bench.gen_log.parse_size(args.size)
    log = scan_bench.ensure_log(size, args.seed)
    manifest = json.loads(Path(f"{log}.manifest.json").read_text())
    scan_bench.warm(log)
    root = OUT / "viewer-search-store"
    shutil.rmtree(root, ignore_errors=True)
    results: dict[str, Any] = {"size": size, "load_before": os.getloadavg()}
    try:
        # stored without the search filters first (as before them), then as the service does
        bare_store = DirectoryBlobStore(root / "bare" / "blobs", tmp_dir=root / "tmp")
        bare, bare_seconds = viewer_bench.store_log(bare_store, log, viewer_bench.FRAME_BYTES, grams=False)
        shutil.rmtree(root / "bare", ignore_errors=True)
        store = DirectoryBlobStore(root / "blobs", tmp_dir=root / "tmp")
        pending, seconds = viewer_bench.store_log(store, log, viewer_bench.FRAME_BYTES)
        assert pending.frames is not None
        total = pending.frames[-1][3]
        s = Stored(store, pending.sha256, pending.frames, total, size)
        # the same blob read as if it had no filters: every frame is searched
        unfiltered = [list(e) for e in pending.frames]
        unfiltered[-1] = unfiltered[-1][:4]
        s0 = Stored(store, pending.sha256, unfiltered, total, size)
        results["store"] = {
            "without_filters_s": bare_seconds,
            "without_filters_mb": bare.stored_size / 1e6,
            "with_filters_s": seconds,
            "with_filters_mb": pending.stored_size / 1e6,
        }
        with store.open(pending.sha256) as fh:  # the stored blob into the page cache, as a log read often is
            while fh.read(64 << 20):
                pass
        print(
            f"{size / 1e9:.2f} GB log, {total:,} lines, stored in {seconds:.1f} s "
            f"({pending.stored_size / 1e6:.0f} MB) with the search filters, "
            f"{bare_seconds:.1f} s ({bare.stored_size / 1e6:.0f} MB) without"
        )
        rare = (
            manifest["planted"][1]["key"].split("]", 1)[1].split(":", 1)[0].strip()
        )  # "Watchdog caught ..."
        rows: dict[str, dict[str, Any]] = {}
        cases: list[tuple[str, Matcher, int, bool]] = [
            ("frequent word, from the top", Matcher.compile("loss", is_regex=False, case=True), 0, True),
            (f"rare ({rare!r}), from the top", Matcher.compile(rare, is_regex=False, case=True), 0, True),
            (
                "rare, case-insensitive regex, from the last page back",
                Matcher.compile(r"watchdog\s+caught\s+\w+", is_regex=True, case=False),
                total + 1,
                False,
            ),
            ("next error, from the top", logview.error_matcher(), 0, True),
            ("next error, from the middle", logview.error_matcher(), total // 2, True),
        ]
        print(
            f"\n{'search':<58}{'line':>12}{'reqs':>6}{'first hit':>11}{'next hit':>10}"
            "   (search + page + count ms)"
        )
        for label, m, start, forward in cases:
            for how, st in (("filters", s), ("no filters", s0)):
                # the page counts search hits, not errors
                count = None if m is logview.error_matcher() else Count()
                first = hop(st, m, start=start, forward=forward, count=count)
                nxt = (
                    hop(st, m, start=first["line"], forward=forward, count=count)
                    if first["line"]
                    else {"total_ms": float("nan")}
                )
                got = vars(count) if count else None
                rows[f"{label} [{how}]"] = {"first": first, "next": nxt, "count": got}
                print(
                    f"{label[:45] + ' [' + how + ']':<58}{first['line'] or '-':>12}{first['requests']:>6}"
                    f"{first['total_ms']:>9.0f}ms{nxt['total_ms']:>8.0f}ms   ({first['search_ms']:.0f} + "
                    f"{first['page_ms']:.0f} + {first['count_ms']:.0f}; next {nxt.get('search_ms', 0):.0f} + "
                    f"{nxt.get('page_ms', 0):.0f} + {nxt.get('count_ms', 0):.0f})"
                )
        results["searches"] = rows
        # the same rare phrase's first hit with grep and ripgrep on the uncompressed log file
        tools = {}
        for tool in (["grep", "-m1", "-n", "-F"], ["rg", "-m1", "-n", "-F", "--no-mmap"]):
            if shutil.which(tool[0]):
                t = time.perf_counter()
                subprocess.run([*tool, rare, str(log)], check=True, stdout=subprocess.DEVNULL)
                tools[tool[0]] = (time.perf_counter() - t) * 1000
                print(f"{tool[0]} -m1 for the rare phrase on the plain log file: {tools[tool[0]]:.0f} ms")
        results["first_hit_tools_ms"] = tools
        # how fast a search reads the log when nothing matches
        rates = {}
        for label, m in [
            ("plain, case-sensitive", Matcher.compile("no such text 7f3a", is_regex=False, case=True)),
            ("plain, any case", Matcher.compile("no such text 7f3a", is_regex=False, case=False)),
            ("regex", Matcher.compile(r"no such \d+ text", is_regex=True, case=True)),
            ("regex, no text of 7 bytes", Matcher.compile(r"no \d+ such", is_regex=True, case=True)),
        ]:
            for how, ix in (("filters", pending.frames), ("no filters", unfiltered)):
                t = time.perf_counter()
                f = find_next(store, pending.sha256, ix, m, start_line=1, deadline=time.monotonic() + 1e6)
                took = time.perf_counter() - t
                assert f.done and f.line is None
                rates[f"{label} [{how}]"] = size / 1e6 / took
                print(
                    f"no hit, {label + ' [' + how + ']':<40} {took:6.2f} s for the whole log: "
                    f"{size / 1e6 / took:8.0f} MB/s"
                )
        results["no_hit_mb_s"] = rates
        results["by_time"] = by_time(store, pending, total)
        rng = random.Random(args.seed)
        walls = [s.page(rng.randint(1, total), None) * 1000 for _ in range(args.ranges)]
        walls.sort()
        p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))]
        results["ranges_ms"] = {
            "n": len(walls),
            "median": statistics.median(walls),
            "p99": p99,
            "max": walls[-1],
        }
        print(
            f"\nrandom line ranges (500-line page, coloured and folded), {len(walls)} of them: "
            f"median {statistics.median(walls):.1f} ms, p99 {p99:.1f} ms, max {walls[-1]:.1f} ms"
        )
        results["load_after"] = os.getloadavg()
        print(f"load average before {results['load_before']}, after {results['load_after']}")
        OUT.mkdir(exist_ok=True)
        (OUT / "viewer-search.json").write_text(json.dumps(results, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
