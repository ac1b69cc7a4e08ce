#!/usr/bin/env python3
"""What the action costs an analysis (issue 24: "< 1 ms per analysis").

    python bench/action_bench.py [--outcomes 20000] [--runs 2000] [--pg URL]

Two parts, each against a trivial baseline in the same run:
- engine: `verdict.decide` on the bundled ECC example's root cause, and `with_history` on top,
  against building an empty `Action` (the pydantic model alone);
- database: `outcome_counts` (the one query the service adds to a stored analysis and to every
  read of one: at most three primary-key reads of the tallies) with `--outcomes` outcomes
  spread over the classes, against `SELECT 1` on the same connection. SQLite in a temp file;
  PostgreSQL too with `--pg` (a URL such as postgresql+psycopg://postgres@127.0.0.1:5432/test;
  a schema of its own, dropped after).
Medians and p99 in microseconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.99) - 1]


def engine(runs: int) -> list[tuple[str, float, float]]:
    from app.engine.models import Action
    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.scan import CompiledLibrary
    from app.engine.pipeline.triage import TriageOptions, triage
    from app.engine.pipeline.verdict import decide, with_history

    lib = load_library()
    compiled = CompiledLibrary(lib, engine="regex")
    sources, _ = collect_sources([str(ROOT / "examples" / "ecc-cascade" / "rank2.log")])
    a = triage(sources=sources, compiled=compiled, options=TriageOptions(jobs=1))
    facts = a.stats.get("facts") or {}
    action = decide(library=lib, root=a.root_cause, possible=a.possible_causes, facts=facts)
    counts = {"fingerprint": (4, 3, 1, 1), "rule": (9, 6, 2, 2), "class": (40, 30, 5, 4)}
    return [
        ("Action(...) alone (baseline)", *timed(lambda: Action(decision="retry", why=["x"]), runs)),
        ("decide()", *timed(lambda: decide(library=lib, root=a.root_cause, facts=facts), runs)),
        ("with_history()", *timed(lambda: with_history(action, counts), runs)),
    ]


def database(url: str, n: int, runs: int) -> list[tuple[str, float, float]]:
    from sqlalchemy import create_engine, insert, text
    from sqlalchemy.orm import Session

    from app.db.migrate import upgrade
    from app.db.models import Outcome, OutcomeTally, utcnow
    from app.db.repo.outcomes import outcome_counts
    from app.engine.pipeline.library import load_library

    engine = create_engine(url)
    upgrade(engine)
    classes = sorted(load_library().classes)
    rnd = random.Random(7)
    rows = [
        {
            "job_id": f"job-{i}",
            "attempt_id": None,
            "analysis_id": None,
            "status": rnd.choice(("succeeded", "failed")),
            "action": rnd.choice(("retry", "retry_excluding", "fix_and_rerun")),
            "advised": "retry",
            "failure_class": rnd.choice(classes),
            "rule_id": f"rule-{rnd.randrange(120)}",
            "fingerprint": f"{rnd.randrange(3000):032x}",
            "excluded_hosts": [],
            "created_at": utcnow(),
        }
        for i in range(n)
    ]
    tallies: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        retried, ok = r["action"] != "fix_and_rerun", r["status"] == "succeeded"
        keys = [("class", r["failure_class"]), ("rule", f"{r['failure_class']} {r['rule_id']}")]
        for key in [*keys, ("fingerprint", r["fingerprint"])]:
            t = tallies.setdefault(key, [0, 0, 0, 0])
            t[0 if retried else 2] += 1
            t[1 if retried else 3] += int(ok)
    with Session(engine) as s:
        s.execute(insert(Outcome), rows)
        s.execute(
            insert(OutcomeTally),
            [
                {"scope": sc, "key": k, "retries": a, "retries_ok": b, "fixes": c, "fixes_ok": d}
                for (sc, k), (a, b, c, d) in tallies.items()
            ],
        )
        s.commit()
        target = rows[0]

        def count() -> object:
            return outcome_counts(
                s,
                failure_class=target["failure_class"],
                rule_id=target["rule_id"],
                fingerprint=target["fingerprint"],
            )

        out = [
            ("SELECT 1 (baseline)", *timed(lambda: s.execute(text("SELECT 1")).scalar(), runs)),
            (f"outcome_counts, {n} outcomes", *timed(count, runs)),
        ]
    engine.dispose()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outcomes", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--pg", help="also PostgreSQL at this URL (a schema of its own)")
    args = ap.parse_args()
    results = [("engine", *r) for r in engine(args.runs)]
    with tempfile.TemporaryDirectory() as tmp:
        results += [("sqlite", *r) for r in database(f"sqlite:///{tmp}/bench.db", args.outcomes, args.runs)]
    if args.pg:
        from sqlalchemy import create_engine, text

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(args.pg)
        with admin.begin() as c:
            c.execute(text(f"CREATE SCHEMA {schema}"))
        try:
            sep = "&" if "?" in args.pg else "?"
            url = f"{args.pg}{sep}options=-csearch_path%3D{schema}"
            results += [("postgresql", *r) for r in database(url, args.outcomes, args.runs)]
        finally:
            with admin.begin() as c:
                c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    print(f"{'where':11} {'what':34} {'median µs':>10} {'p99 µs':>10}")
    for where, what, med, p99 in results:
        print(f"{where:11} {what:34} {med:10.1f} {p99:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
