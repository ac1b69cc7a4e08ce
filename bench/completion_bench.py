#!/usr/bin/env python3
"""A hook's database work in the web process, in process on PostgreSQL: the Idempotency-Key
reservation, the completion that stores the finished analysis, and the read a poll of it makes
(`GET /api/v1/analyses/{id}`: the row, its files and feedback, its standing, as JSON), against
the trivial endpoint's database work (one row inserted, committed) in the same run.

    python -P bench/completion_bench.py [--n 80] [--db logtriage_completion]

Each hook is the burst bench's 1 MB OOM log with a line of its own (a distinct log: the
duplicate check finds nothing and the recurrence counters are written, as for a new job's
failure); each is scanned first (not timed) and its blob committed, as the server does before
the completion. Reported: the median and the fastest of each step after a warm-up of 10, in ms.
The database is created, and dropped at the end.

To compare with another commit, run it from that commit's tree (copied there when the commit
predates it; it puts its own tree first on sys.path): `git archive REF | tar -x -C /tmp/base;
cp bench/completion_bench.py /tmp/base/bench/; cd /tmp/base; python -P bench/completion_bench.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

WARM = 10


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=80, help="hooks stored (the first 10 are a warm-up)")
    p.add_argument("--db", default="logtriage_completion", help="PostgreSQL database to create and drop")
    args = p.parse_args()
    os.environ["LOGTRIAGE_DATA_DIR"] = tempfile.mkdtemp(prefix="logtriage-completion-")

    import burst_bench
    import load_bench
    import psycopg

    from app.db import repo
    from app.db.migrate import upgrade
    from app.db.session import Database
    from app.service import ops
    from app.service.analyses import commit_blobs, completion_of
    from app.service.jobs import InputFile, ScanJob, ScanOutcome
    from app.service.worker import init_local, scan_upload, worker_state
    from app.settings import get_settings

    settings = get_settings()
    init_local(settings)
    body = burst_bench.metric_log(1_000_000 - len(burst_bench.OOM_TAIL) - 64, 7)
    outcomes: list[ScanOutcome] = []
    for i in range(args.n):
        log = (
            body + f"[rank0]: job hook-{i} starting its last step\n".encode() + burst_bench.OOM_TAIL.encode()
        )
        out = scan_upload(ScanJob(files=(InputFile(name="hook.log", path="/nonexistent", data=log),)))
        assert isinstance(out, ScanOutcome), out
        outcomes.append(out)
    load_bench._psql(f"DROP DATABASE IF EXISTS {args.db}")
    load_bench._psql(f"CREATE DATABASE {args.db}")
    try:
        db = Database(f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.db}")
        upgrade(db.engine)
        trivial = psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{args.db}", autocommit=True)
        trivial.execute("CREATE TABLE trivial_uploads (id text PRIMARY KEY, size bigint)")
        store = worker_state().store
        times: dict[str, list[float]] = {
            "trivial_insert": [],
            "reserve": [],
            "complete": [],
            "commit": [],
            "poll_read": [],
        }
        ctx = SimpleNamespace(db=db, settings=settings)  # what load_resource reads of a service context
        for i, out in enumerate(outcomes):
            commit_blobs(store, out)
            t0 = time.perf_counter()
            trivial.execute(
                "INSERT INTO trivial_uploads (id, size) VALUES (%s, %s)", (uuid.uuid4().hex, 1 << 20)
            )
            t1 = time.perf_counter()
            draft = repo.Draft.new(
                meta=repo.JobMeta(source="api", job_id=f"hook-{i}"), token_id=None, runner="bench:1"
            )
            with db.write() as s:
                assert repo.reserve_key(s, draft=draft, scope="bench", key=f"k{i}", request_digest="d")
            t2 = time.perf_counter()
            tx = db.write()
            s = tx.__enter__()
            repo.complete_analyses(s, items=[completion_of(draft.analysis_id, out, None)])
            t3 = time.perf_counter()
            tx.__exit__(None, None, None)
            t4 = time.perf_counter()
            res = ops.load_resource(
                ctx, analysis_id=draft.analysis_id, base="http://127.0.0.1", principal=None
            )  # type: ignore[arg-type]
            assert res["status"] == "done" and json.dumps(res)
            t5 = time.perf_counter()
            for k, v in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                v_ms = v * 1000
                if i >= WARM:
                    times[k].append(v_ms)
        report = {
            k: {"median_ms": round(statistics.median(v), 2), "min_ms": round(min(v), 2)}
            for k, v in times.items()
        }
        report["n"] = args.n - WARM  # type: ignore[assignment]
        print(json.dumps(report, indent=1))
        trivial.close()
        db.dispose()
    finally:
        load_bench._psql(f"DROP DATABASE IF EXISTS {args.db}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
