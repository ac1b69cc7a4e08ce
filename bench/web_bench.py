#!/usr/bin/env python3
"""Web pages on a store of 10,000 analyses: server time per page, p50 and p99, on SQLite and on
PostgreSQL; and the JS + CSS each page loads.

    python bench/web_bench.py [--analyses 10000] [--requests 40] [--db sqlite,postgresql]

The store is seeded through the same repo functions the service writes with (realistic results
from real logs of tests/corpus, metadata varied over 200 jobs, 60 hosts and 30 days, feedback on
one analysis in ten), not through 10,000 uploads. `logtriage serve` (one worker) then answers
each page `--requests` times over one keep-alive connection; the time is the client's wall time
per request on loopback. Target (issue 10): every page under 100 ms; JS + CSS under 100 KB.
"first ms" is the first view of a page (its aggregates not yet cached: app.service.aggregates);
the two "each new" rows ask a different search / window every request, so nothing is cached.
The server binds 127.0.0.1, PostgreSQL uses its own database `logtriage_webbench` (dropped and
made fresh). Results: bench/out/web.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(REPO))

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PG = "postgresql+psycopg://postgres@127.0.0.1:5432/logtriage_webbench"
SAMPLES = [
    "tests/corpus/real/ray-oom-killer.log",
    "tests/corpus/real/nan-loss-loop.log",
    "tests/corpus/real/gloo-collective-timeout-torchrun.log",
    "tests/corpus/real/disk-full-torch-save.log",
    "tests/corpus/real/user-typeerror-torchrun.log",
    "tests/corpus/real/torchrun-worker-sigkill.log",
    "examples/ecc-cascade",
    "tests/corpus/gpu/skipped-collective/console.log",
    "tests/corpus/gpu/cuda-oom/console.log",
    "rules/vllm/vllm-kv-cache-insufficient.match.log",
]


def results() -> list[tuple[dict[str, object], list[object]]]:
    from app.engine.ingest import collect_sources
    from app.engine.library import load_library
    from app.engine.scan import CompiledLibrary
    from app.engine.triage import TriageOptions, triage
    from app.service.worker import _rule_texts  # the rule texts a completion stores

    compiled = CompiledLibrary(load_library())
    out = []
    for rel in SAMPLES:
        sources, _ = collect_sources([str(REPO / rel)])
        data = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1)).model_dump(
            mode="json"
        )
        out.append((data, list(_rule_texts(compiled, data))))
    return out


def seed(url: str, n: int) -> str:
    """Fill the database; return the id of one analysis to open."""
    from app.db import repo
    from app.db.migrate import upgrade
    from app.db.models import Feedback
    from app.db.session import Database

    db = Database(url)
    upgrade(db.engine)
    samples = results()
    rng = random.Random(1)
    now = dt.datetime.now(dt.UTC)
    one = ""
    batch: list[repo.Completion] = []
    for i in range(n):
        analysis, rules = samples[i % len(samples)]
        created = now - dt.timedelta(seconds=rng.randrange(0, 30 * 86400))
        meta = repo.JobMeta(
            source=rng.choice(["api", "web", "cli"]),
            job_id=f"job-{rng.randrange(200)}",
            host=f"gpu-node-{rng.randrange(60):02d}",
        )
        draft = repo.Draft(repo.new_id(created), created, meta, None, None)
        sha = f"{i:064x}"
        blob = repo.StoredBlob(sha, 200_000, 30_000)
        batch.append(
            repo.Completion(
                analysis_id=draft.analysis_id,
                analysis=analysis,
                library_version="bench",
                files=[repo.FileRecord("rank0.log", blob)],
                config=None,
                rules=rules,  # type: ignore[arg-type]
                draft=draft,
            )
        )
        if len(batch) == 500 or i == n - 1:
            with db.write() as s:
                stored = repo.complete_analyses(s, items=batch)
                for row, _standing in stored:
                    if rng.random() < 0.1:
                        s.add(
                            Feedback(analysis_id=row.id, verdict=rng.choice(["correct", "correct", "wrong"]))
                        )
                one = one or stored[0][0].id
            batch = []
    db.dispose()
    return one


def pages(one: str) -> dict[str, str]:
    return {
        "upload /": "/",
        "report": f"/analyses/{one}",
        "history": "/analyses",
        "history filtered": "/analyses?kind=hardware&since=7d",
        "history search": "/analyses?q=out+of+memory",
        "history deep page": "/analyses?framework=pytorch&limit=100",
        "rules": "/rules",
        "rule": "/rules/cuda-out-of-memory",
        "trends 30 d": "/trends?days=30",
        "trends 90 d": "/trends?days=90",
        # a new question every request: what an uncached search and window cost
        "search, each new": "/analyses?q=out+of+memory&since={n}d",
        "trends, each new": "/trends?days={n}",
    }


def serve(data_dir: Path, url: str | None, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGTRIAGE_")}
    env["LOGTRIAGE_DATA_DIR"] = str(data_dir)
    if url:
        env["LOGTRIAGE_DATABASE_URL"] = url
    proc = subprocess.Popen(
        [str(REPO / ".venv/bin/logtriage"), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start")


def asset_bytes(c: httpx.Client, html: str) -> int:
    total = 0
    for ref in re.findall(r'(?:src|href)="(/static/[^"]+)"', html):
        if ref.endswith((".js", ".css")) or ".js?" in ref or ".css?" in ref:
            total += len(c.get(ref).content)
    return total


def measure(port: int, one: str, requests: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Accept": "text/html"}, timeout=60) as c:
        for name, path in pages(one).items():
            t = time.perf_counter()
            r = c.get(path.format(n=30))
            first = (time.perf_counter() - t) * 1000  # the first view: aggregates not cached yet
            assert r.status_code == 200, (path, r.status_code)
            times = []
            for i in range(requests):
                t = time.perf_counter()
                c.get(path.format(n=31 + i))
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            out[name] = {
                "p50_ms": round(statistics.median(times), 1),
                "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 1),
                "first_ms": round(first, 1),
                "assets_kb": round(asset_bytes(c, r.text) / 1024, 1),
            }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--analyses", type=int, default=10_000)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--db", default="sqlite,postgresql")
    args = p.parse_args()
    report: dict[str, object] = {"analyses": args.analyses, "requests": args.requests, "databases": {}}
    for db in args.db.split(","):
        with tempfile.TemporaryDirectory(prefix="webbench-") as tmp:
            data_dir = Path(tmp)
            url = None
            if db == "postgresql":
                from sqlalchemy import create_engine, text

                admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
                with admin.connect() as conn:
                    conn.execute(text("DROP DATABASE IF EXISTS logtriage_webbench"))
                    conn.execute(text("CREATE DATABASE logtriage_webbench"))
                admin.dispose()
                url = PG
            t = time.perf_counter()
            one = seed(url or f"sqlite:///{data_dir / 'logtriage.db'}", args.analyses)
            print(f"{db}: seeded {args.analyses} analyses in {time.perf_counter() - t:.1f} s", flush=True)
            port = 18000 + random.randrange(1000)
            proc = serve(data_dir, url, port)
            try:
                rows = measure(port, one, args.requests)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
            report["databases"][db] = rows  # type: ignore[index]
            print(f"{'page':22} {'p50 ms':>8} {'p99 ms':>8} {'first ms':>9} {'JS+CSS KB':>10}")
            for name, r in rows.items():
                p50, p99, first, kb = r["p50_ms"], r["p99_ms"], r["first_ms"], r["assets_kb"]
                print(f"{name:22} {p50:8.1f} {p99:8.1f} {first:9.1f} {kb:10.1f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "web.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
