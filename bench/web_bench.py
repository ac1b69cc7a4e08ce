#!/usr/bin/env python3
"""Web pages on a store of 10,000 analyses: server time per page, p50 and p99, on SQLite and on
PostgreSQL; and the JS + CSS each page loads.

    python bench/web_bench.py [--analyses 10000] [--requests 100] [--db sqlite,postgresql]

The store is seeded through the same repo functions the service writes with (realistic results
from real logs of tests/corpus, metadata varied over 200 jobs, 60 hosts, 5 framework hints and
60 days, feedback on one analysis in ten), not through 10,000 uploads; one more log is uploaded
through the REST API so that the viewer has a real stored blob. `logtriage serve` (one worker)
then answers each page `--requests` times over one keep-alive connection; the time is the
client's wall time per request on loopback, and `/healthz` and a static file are asked the same
way as the baseline (what the HTTP round trip alone costs). Target (issue 10): every page under
100 ms; JS + CSS under 100 KB.
"first ms" is the first view of a page (its aggregates not yet cached: app.service.aggregates);
the "each new" rows ask a different search / window every request, so nothing is cached; the
"data changed" rows add a feedback row before every request, as a busy service's uploads would,
so the cached aggregates are recomputed each time. The server binds a free loopback port,
PostgreSQL uses its own database `logtriage_webbench` (dropped and made fresh, then dropped at
the end). Results: bench/out/web.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import signal
import socket
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
    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.scan import CompiledLibrary
    from app.engine.pipeline.triage import TriageOptions, triage
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
        created = now - dt.timedelta(seconds=rng.randrange(0, 60 * 86400))
        meta = repo.JobMeta(
            source=rng.choice(["api", "web", "cli"]),
            job_id=f"job-{rng.randrange(200)}",
            framework=rng.choice([None, None, "verl", "openrlhf", "megatron", "deepspeed", "roll"]),
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
    if db.engine.dialect.name == "postgresql":
        # what autovacuum has long done on a database that grew to this size: without
        # statistics the planner guesses, and the pages would be timed on its guesses
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE")
    db.dispose()
    return one


def pages(one: str, uploaded: str) -> dict[str, str]:
    return {
        "baseline /healthz": "/healthz",
        "baseline static": "/static/app.css",
        "upload /": "/",
        "report": f"/analyses/{one}",
        "report, uploaded": f"/analyses/{uploaded}",
        "viewer": f"/analyses/{uploaded}/files/0",
        "viewer, line 120": f"/analyses/{uploaded}/files/0?line=120",
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


# pages whose figures are cached until the stored data changes: each is also asked right after
# a change (one feedback row), as on a busy service where every upload invalidates the cache
CHANGED = (
    "history",
    "history filtered",
    "history search",
    "history deep page",
    "rules",
    "rule",
    "trends 30 d",
    "trends 90 d",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def upload(port: int) -> str:
    """One real log through the REST API: a stored blob for the viewer."""
    body = (REPO / "tests/corpus/real/gloo-collective-timeout-torchrun.log").read_bytes()
    r = httpx.post(
        f"http://127.0.0.1:{port}/api/v1/analyses",
        content=body,
        headers={"Content-Type": "text/plain"},
        timeout=60,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


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


def figures(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 1),
    }


def measure(port: int, url: str, one: str, uploaded: str, requests: int) -> dict[str, dict[str, float]]:
    """Round-robin: each round asks every page once, so a burst of other work on the machine
    lands on all pages alike rather than on whichever page was being asked at the time."""
    from sqlalchemy import create_engine, insert

    from app.db.models import Feedback

    all_pages = pages(one, uploaded)
    times: dict[str, list[float]] = {name: [] for name in all_pages}
    times.update({f"{name}, data changed": [] for name in CHANGED})
    out: dict[str, dict[str, float]] = {}
    writer = create_engine(url)

    def get(c: httpx.Client, path: str) -> tuple[float, httpx.Response]:
        t = time.perf_counter()
        r = c.get(path)
        ms = (time.perf_counter() - t) * 1000
        assert r.status_code == 200, (path, r.status_code)
        return ms, r

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Accept": "text/html"}, timeout=60) as c:
        for name, path in all_pages.items():
            first, r = get(c, path.format(n=30))  # the first view: aggregates not cached yet
            kb = 0.0 if name.startswith("baseline") else round(asset_bytes(c, r.text) / 1024, 1)
            out[name] = {"first_ms": round(first, 1), "assets_kb": kb}
        for i in range(requests):
            for name in CHANGED:
                # the store changes (as every upload or feedback does): the page recomputes
                with writer.begin() as conn:
                    conn.execute(insert(Feedback).values(analysis_id=one, verdict="correct"))
                times[f"{name}, data changed"].append(get(c, all_pages[name])[0])
            for name in CHANGED:  # cached again (not timed) for the repeated views below
                get(c, all_pages[name])
            for name, path in all_pages.items():
                times[name].append(get(c, path.format(n=31 + i))[0])
    writer.dispose()
    for name, ts in times.items():
        out[name] = {**figures(ts), **out.get(name, {"first_ms": 0.0, "assets_kb": 0.0})}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--analyses", type=int, default=10_000)
    p.add_argument("--requests", type=int, default=100)
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
            port = free_port()
            proc = serve(data_dir, url, port)
            try:
                uploaded = upload(port)
                rows = measure(
                    port, url or f"sqlite:///{data_dir / 'logtriage.db'}", one, uploaded, args.requests
                )
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
                if db == "postgresql":
                    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
                    with admin.connect() as conn:
                        conn.execute(text("DROP DATABASE IF EXISTS logtriage_webbench WITH (FORCE)"))
                    admin.dispose()
            report["databases"][db] = rows  # type: ignore[index]
            print(f"{'page':30} {'p50 ms':>8} {'p99 ms':>8} {'first ms':>9} {'JS+CSS KB':>10}")
            for name, r in rows.items():
                p50, p99, first, kb = r["p50_ms"], r["p99_ms"], r["first_ms"], r["assets_kb"]
                print(f"{name:30} {p50:8.1f} {p99:8.1f} {first:9.1f} {kb:10.1f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "web.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
