#!/usr/bin/env python3
"""A draft's back-test over 10,000 stored analyses (issue 23's target: p99 under 2 s), on SQLite
and PostgreSQL, against trivial baselines timed in the same run.

    python bench/backtest_bench.py [--analyses 10000] [--rounds 3] [--pg URL] [--full-signals]
                                   [--ray ADDRESS | --ray-nodes N] [--ray-shards N]

The store is filled through the path completion takes (`app.db.repo.complete_analyses`, batches
of 500, as bench/web_bench.py does): real results of every corpus log (tests/corpus: the real,
public, fresh* and advice* sets, triaged with the bundled library), cycled to `--analyses`, over
60 days, 200 jobs, 60 hosts; each copy's signal lines keep their template and key but get other
digits (other pids, steps, sizes, addresses), as the next failure of a kind does. A fresh SQLite
file under a temp dir; with `--pg`, a schema of its own (`lt_bench23_<hex>`) in that database,
`ANALYZE`d after the fill (autovacuum would have done it), dropped at the end.

Patterns (30): drafted with `app.engine.drafts.draft_from_lines` from the stored texts of 3
analyses sharing a signal key: 12 of the commonest keys, 12 rare ones (among the tenth of the keys
the fewest analyses hold), and 6
with no literal the back-test can filter on (3 drafted patterns made case-insensitive with
``(?i)``, 3 hand-made all-capture shapes), so every line goes through the regex. Each pattern
runs `app.service.drafts.run_backtest` `--rounds` times; every back-test's match set is checked
against a plain regex search over every stored line (a literal filter that lost a match would
show as a mismatch).

`--full-signals`: every analysis holds the cap of 8 signal lines (topped up with other logs'
lines), 80,000 rows for 10,000 analyses, against ~1.1 per analysis that the corpus gives (41%
of its logs end with no error-like line at all).

Baselines, timed in the same rounds on the same rows: `SELECT count(*)` of analysis_signals (a
round trip that reads nothing back), the fetch of the rows alone (`lrepo.signal_texts`, what
every back-test reads), and a plain Python `in` scan of the fetched texts for one literal.

`--ray ADDRESS` (a running cluster, or `local`), or `--ray-nodes N` (a cluster of N nodes started
here for the run, each its own raylet, on 127.0.0.1 only, 1 CPU each: `ray.cluster_utils.Cluster`,
as `ray start --head` plus `ray start --address` would; shut down at the end): each back-test
also runs through `app.service.backtest_ray` (the history split by analysis id ranges over
`--ray-shards` Ray tasks, default the cluster's CPUs, each reading its share from the
database), alternating with the in-process one in the same rounds; every Ray result must equal
the in-process one field for field (all but `seconds`). One untimed back-test first connects
and warms the workers (its time is reported as the start-up).
Results: bench/out/backtest.json (`backtest-ray.json` with `--ray`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))


def corpus_results() -> list[tuple[dict[str, Any], list[Any]]]:
    """(analysis dict, rule records) of every corpus log, triaged with the bundled library."""
    import yaml

    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.scan import CompiledLibrary
    from app.engine.pipeline.triage import TriageOptions, triage
    from app.service.worker import _rule_texts

    compiled = CompiledLibrary(load_library())
    corpus = REPO / "tests" / "corpus"
    manifests = [corpus / "manifest.yaml", *sorted(corpus.glob("*/manifest.yaml"))]
    manifests += sorted(corpus.glob("advice*/advice.yaml"))
    out = []
    for m in manifests:
        data = yaml.safe_load(m.read_text(encoding="utf-8")) or {}
        entries = data.get("entries") or [] if isinstance(data, dict) else data
        for e in entries:
            files = e["file"] if isinstance(e["file"], list) else [e["file"]]
            sources, _ = collect_sources([str(m.parent / f) for f in files])
            a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
            d = a.model_dump(mode="json")
            out.append((d, list(_rule_texts(compiled, d))))
    return out


def _vary(text: str, rng: random.Random) -> str:
    return re.sub(r"\d", lambda _m: str(rng.randrange(10)), text)


def seed(url: str, items: list[tuple[dict[str, Any], list[Any], dt.datetime, Any]]) -> list[str]:
    """Store finished analyses as completion does: (analysis, rule records, created, JobMeta).
    Returns their ids, in the order given."""
    from app.db import repo
    from app.db.migrate import upgrade
    from app.db.session import Database

    db = Database(url)
    upgrade(db.engine)
    ids: list[str] = []
    batch: list[Any] = []
    for i, (analysis, rules, created, meta) in enumerate(items):
        draft = repo.Draft(repo.new_id(created), created, meta, None, None)
        blob = repo.StoredBlob(f"{secrets.token_hex(16)}{i:032x}", 200_000, 30_000)
        batch.append(
            repo.Completion(
                analysis_id=draft.analysis_id,
                analysis=analysis,
                library_version="bench",
                files=[repo.FileRecord("rank0.log", blob)],
                config=None,
                rules=rules,
                draft=draft,
            )
        )
        ids.append(draft.analysis_id)
        if len(batch) == 500 or i == len(items) - 1:
            with db.write() as s:
                repo.complete_analyses(s, items=batch)
            batch = []
    if db.engine.dialect.name == "postgresql":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE")
    db.dispose()
    return ids


def synthetic(
    n: int, samples: list[tuple[dict[str, Any], list[Any]]], *, seed_: int = 1, full: bool = False
) -> list[Any]:
    """`n` analyses cycling `samples`; `full`: each one's signal lines topped up to the cap
    (MAX_SIGNALS, 8) with other logs' lines (distinct templates): the most rows the store can
    hold per analysis."""
    from app.db import repo
    from app.engine.signals import MAX_SIGNALS

    rng = random.Random(seed_)
    pool = [s for a, _r in samples for s in a.get("signals") or []]
    now = dt.datetime.now(dt.UTC)
    items = []
    for i in range(n):
        analysis, rules = samples[i % len(samples)]
        a = dict(analysis)
        sigs = list(analysis.get("signals") or [])
        while full and len(sigs) < MAX_SIGNALS:
            extra = rng.choice(pool)
            if all(extra["key"] != x["key"] for x in sigs):
                sigs.append(extra)
        a["signals"] = [{**s, "text": _vary(s["text"], rng)} for s in sigs]
        created = now - dt.timedelta(seconds=rng.randrange(0, 60 * 86400))
        meta = repo.JobMeta(
            source=rng.choice(["api", "web", "cli"]),
            job_id=f"job-{rng.randrange(200)}",
            host=f"gpu-node-{rng.randrange(60):02d}",
        )
        items.append((a, rules, created, meta))
    return items


def pg_schema(admin_url: str) -> tuple[str, Any]:
    """A fresh schema in the database of `admin_url`; (url with search_path, dropper)."""
    from sqlalchemy import create_engine, make_url, text

    name = f"lt_bench23_{secrets.token_hex(4)}"
    eng = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'CREATE SCHEMA "{name}"'))

    def drop() -> None:
        with eng.connect() as c:
            c.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        eng.dispose()

    url = make_url(admin_url).update_query_dict({"options": f"-csearch_path={name}"})
    return url.render_as_string(hide_password=False), drop


def patterns(url: str, *, seed_: int = 7) -> list[dict[str, Any]]:
    """~30 drafted patterns from stored signal texts: common, rare, and without a literal."""
    from sqlalchemy import select

    from app.db.models import AnalysisSignal
    from app.db.session import Database
    from app.engine.drafts import draft_from_lines

    db = Database(url)
    by_key: dict[str, list[str]] = defaultdict(list)
    analyses: dict[str, set[str]] = defaultdict(set)
    with db.read() as s:
        for key, aid, txt in s.execute(
            select(AnalysisSignal.key, AnalysisSignal.analysis_id, AnalysisSignal.text)
        ):
            analyses[key].add(aid)
            if len(by_key[key]) < 3:
                by_key[key].append(txt)
    db.dispose()
    rng = random.Random(seed_)
    order = sorted(analyses, key=lambda k: (-len(analyses[k]), k))
    out: list[dict[str, Any]] = []

    def take(keys: list[str], kind: str, want: int) -> list[dict[str, Any]]:
        got = []
        for k in keys:
            d = draft_from_lines(by_key[k])
            if not d.pattern or d.problems:
                continue
            got.append({"kind": kind, "key": k, "pattern": d.pattern, "analyses_with_key": len(analyses[k])})
            if len(got) == want:
                break
        return got

    common = take(order, "common", 12)
    # rare: among the tenth of the keys that the fewest analyses hold
    asc = order[::-1]
    rare_keys = asc[: max(48, len(asc) // 10)]
    rng.shuffle(rare_keys)
    rare = take(rare_keys, "rare", 12)
    out = common + rare
    for p in (common[0], common[5], rare[0]):
        out.append({**p, "kind": "no literal ((?i))", "pattern": "(?i)" + p["pattern"]})
    for pat in (
        r"(?P<num1>\d+(?:\.\d+)?) (?P<unit1>GiB|MiB)",
        r"(?P<path1>/[\w./-]+\.py)\b",
        r"(?P<word1>\w+Error): (?P<word2>\w+)",
    ):
        out.append(
            {"kind": "no literal (all captures)", "key": None, "pattern": pat, "analyses_with_key": None}
        )
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


def bench_db(
    label: str, url: str, pats: list[dict[str, Any]], rounds: int, ray: Any = None
) -> dict[str, Any]:
    import regex
    from sqlalchemy import func, select

    from app.blobstore.grams import required_literals
    from app.db.models import AnalysisSignal
    from app.db.repo import learn as lrepo
    from app.db.session import Database
    from app.service.drafts import BACKTEST_ROWS, run_backtest

    db = Database(url)
    ctx = SimpleNamespace(db=db)  # run_backtest reads only ctx.db
    with db.read() as s:
        rows = lrepo.signal_texts(s, limit=BACKTEST_ROWS)
        n_rows = len(rows)
    # the truth for each pattern: a plain regex over every stored line
    truth: dict[str, set[str]] = {}
    for p in pats:
        rx = regex.compile(p["pattern"])
        truth[p["pattern"]] = {a for a, _pos, t, _f, _l in rows if rx.search(t)}
    times: dict[str, list[float]] = defaultdict(list)
    base: dict[str, list[float]] = defaultdict(list)
    mismatches = []
    per_pattern: list[dict[str, Any]] = []
    ray_info: dict[str, Any] = {}
    if ray is not None:
        from app.service import backtest_ray

        t0 = time.perf_counter()  # connect, ship the task, import on the workers: untimed below
        first = run_backtest(ctx, pattern=pats[0]["pattern"], failure_class="site.bench", ray=ray)  # type: ignore[arg-type]
        ray_info = {
            "first_backtest_s": round(time.perf_counter() - t0, 3),
            "shards": first.shards,
            "mismatches": [],
            "nodes": Counter(),
        }
        if not first.shards:
            raise SystemExit(f"{label}: the back-test did not run on Ray (see the warning above)")
    for r in range(rounds):
        for p in pats:
            t0 = time.perf_counter()
            bt = run_backtest(ctx, pattern=p["pattern"], failure_class="site.bench")  # type: ignore[arg-type]
            dt_ = time.perf_counter() - t0
            times[p["kind"]].append(dt_)
            times["all"].append(dt_)
            got = set(bt.analysis_ids)
            if r == 0:
                want = truth[p["pattern"]]
                if got != want:
                    mismatches.append(
                        {"pattern": p["pattern"], "missed": len(want - got), "extra": len(got - want)}
                    )
                per_pattern.append(
                    {
                        **p,
                        "matched": len(got),
                        "unknown": len(bt.unknown),
                        "conflicts": len(bt.conflicts),
                        "complete": bt.complete,
                        "literals": required_literals(p["pattern"]),
                    }
                )
            per_pattern[pats.index(p)].setdefault("seconds", []).append(round(dt_, 4))
            if ray is not None:
                t0 = time.perf_counter()
                on_ray = run_backtest(ctx, pattern=p["pattern"], failure_class="site.bench", ray=ray)  # type: ignore[arg-type]
                dt_ = time.perf_counter() - t0
                times[f"ray: {p['kind']}"].append(dt_)
                times["ray: all"].append(dt_)
                here, there = bt.as_dict(), on_ray.as_dict()
                here.pop("seconds"), there.pop("seconds")
                if here != there or on_ray.shards != first.shards:
                    diff = [k for k in here if here[k] != there[k]]
                    ray_info["mismatches"].append(
                        {"pattern": p["pattern"], "fields": diff, "shards": on_ray.shards}
                    )
                ray_info["nodes"].update(backtest_ray.last_nodes)
                per_pattern[pats.index(p)].setdefault("ray_seconds", []).append(round(dt_, 4))
            # baselines, same round
            t0 = time.perf_counter()
            with db.read() as s:
                s.scalar(select(func.count()).select_from(AnalysisSignal))
            base["SELECT count(*) of analysis_signals"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with db.read() as s:
                fetched = lrepo.signal_texts(s, limit=BACKTEST_ROWS)
            base["fetch the rows (signal_texts)"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sum(1 for _a, _p, t, _f, _l in fetched if "Error" in t)
            base["Python `in` scan of fetched texts"].append(time.perf_counter() - t0)
    db.dispose()

    def stats(xs: list[float]) -> dict[str, float]:
        return {
            "n": len(xs),
            "p50_ms": round(statistics.median(xs) * 1000, 1),
            "p99_ms": round(pct(xs, 0.99) * 1000, 1),
            "max_ms": round(max(xs) * 1000, 1),
        }

    return {
        "db": label,
        "signal_rows": n_rows,
        "backtest": {k: stats(v) for k, v in times.items()},
        "baselines": {k: stats(v) for k, v in base.items()},
        "mismatches": mismatches,
        "ray": {**ray_info, "nodes": {k[:12]: v for k, v in ray_info.get("nodes", {}).items()}}
        if ray_info
        else None,
        "patterns": per_pattern,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--analyses", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--full-signals", action="store_true", help="every analysis holds the cap of 8 signal lines"
    )
    ap.add_argument("--pg", help="PostgreSQL URL (a schema of its own is made there and dropped)")
    ap.add_argument(
        "--ray", metavar="ADDRESS", help="also back-test on Ray at ADDRESS (host:port, auto, local)"
    )
    ap.add_argument(
        "--ray-shards", type=int, default=0, help="Ray tasks per back-test (0: the cluster's CPUs)"
    )
    ap.add_argument(
        "--ray-nodes", type=int, default=0, help="start a Ray cluster of N nodes on 127.0.0.1 for the run"
    )
    args = ap.parse_args()
    ray = None
    ray_cluster: dict[str, Any] | None = None
    started_cluster: Any = None
    if args.ray_nodes:
        from app.service.retriage import import_ray

        import_ray(local=True)  # loopback only, before Ray's first import
        from ray.cluster_utils import Cluster

        t0 = time.perf_counter()
        node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 200 * 1024 * 1024}
        started_cluster = Cluster(
            initialize_head=True, connect=False, head_node_args={**node, "include_dashboard": False}
        )
        for _ in range(args.ray_nodes - 1):
            started_cluster.add_node(**node)
        args.ray = started_cluster.address
        print(f"started {args.ray_nodes} Ray nodes at {args.ray} in {time.perf_counter() - t0:.1f} s")
    if args.ray:
        from app.service.backtest_ray import RayBacktest
        from app.service.retriage import connect_ray, import_ray

        ray_mod = import_ray(local=args.ray == "local")
        t0 = time.perf_counter()
        connect_ray(ray_mod, args.ray)
        ray_cluster = {
            "address": args.ray,
            "connect_s": round(time.perf_counter() - t0, 3),
            "nodes": [
                {"node": n["NodeID"][:12], "ip": n["NodeManagerAddress"], "cpus": n["Resources"].get("CPU")}
                for n in ray_mod.nodes()
                if n["Alive"]
            ],
        }
        print(f"Ray at {args.ray}: {len(ray_cluster['nodes'])} nodes {ray_cluster['nodes']}")
        ray = RayBacktest(address=args.ray, min_lines=0, shards=args.ray_shards)
    OUT.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    samples = corpus_results()
    with_sig = sum(1 for a, _ in samples if a.get("signals"))
    print(
        f"corpus: {len(samples)} logs triaged ({with_sig} with signal lines) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    items = synthetic(args.analyses, samples, full=args.full_signals)
    results = []
    with tempfile.TemporaryDirectory(prefix="lt-backtest-") as tmp:
        dbs: list[tuple[str, str, Any]] = [("SQLite", f"sqlite:///{tmp}/bench.db", None)]
        if args.pg:
            url, drop = pg_schema(args.pg)
            dbs.append(("PostgreSQL", url, drop))
        try:
            pats: list[dict[str, Any]] | None = None
            for label, url, _drop in dbs:
                t0 = time.perf_counter()
                seed(url, items)
                print(f"{label}: {args.analyses} analyses stored in {time.perf_counter() - t0:.1f} s")
                if pats is None:
                    pats = patterns(url)
                    print(f"{len(pats)} patterns: {Counter(p['kind'] for p in pats)}")
                results.append(bench_db(label, url, pats, args.rounds, ray))
        finally:
            for _label, _url, drop in dbs:
                if drop:
                    drop()
            if started_cluster is not None:
                import ray as ray_mod

                ray_mod.shutdown()
                started_cluster.shutdown()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "uptime": load,
        "cpus": os.cpu_count(),
        "analyses": args.analyses,
        "rounds": args.rounds,
        "full_signals": args.full_signals,
        "ray": ray_cluster,
        "results": results,
    }
    name = "backtest" + ("-full" if args.full_signals else "") + ("-ray" if args.ray else "")
    (OUT / f"{name}.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"\n{report['date']}  {load}")
    for r in results:
        print(f"\n{r['db']}: {r['signal_rows']} signal rows; back-test ms (p50 / p99 / max)")
        for k, v in r["backtest"].items():
            print(f"  run_backtest [{k}] n={v['n']}: {v['p50_ms']} / {v['p99_ms']} / {v['max_ms']}")
        for k, v in r["baselines"].items():
            print(f"  baseline {k}: {v['p50_ms']} / {v['p99_ms']} / {v['max_ms']}")
        print(
            f"  match sets differing from a plain regex over every line: {len(r['mismatches'])} "
            f"{r['mismatches']}"
        )
        if r.get("ray"):
            rr = r["ray"]
            print(
                f"  Ray: {rr['shards']} shards, tasks per node {rr['nodes']}, first back-test (warm-up) "
                f"{rr['first_backtest_s']} s; results differing from in process: {len(rr['mismatches'])} "
                f"{rr['mismatches'][:3]}"
            )
        worst = sorted(r["patterns"], key=lambda p: -max(p.get("seconds") or [0]))[:3]
        for p in worst:
            print(f"  slowest: {p['kind']} matched={p['matched']} s={p.get('seconds')} {p['pattern'][:90]}")
    p99 = max(r["backtest"]["all"]["p99_ms"] for r in results)
    if args.ray:
        p99_ray = max(r["backtest"]["ray: all"]["p99_ms"] for r in results)
        print(f"on Ray: worst p99 {p99_ray} ms")
    print(f"\ntarget p99 < 2000 ms: {'met' if p99 < 2000 else 'MISSED'} (worst p99 {p99} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
