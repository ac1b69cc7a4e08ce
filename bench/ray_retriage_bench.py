#!/usr/bin/env python3
"""Bulk re-triage in process vs on a local Ray instance (`logtriage retriage` vs `--ray`).

Builds an archive in a temporary data dir with SQLite: N generated logs (``bench/gen_log.py``, a few
MB each: hardware-fault cascades, an OOM, clean runs) analysed and stored through the pipeline with
an *old* rule library that lacks the hardware rules. Then re-triages every analysis with the
current library twice, on two copies of the database (the blobs are shared):

- in process: ``init_local`` + ``retriage_analyses(runner=local_runner)`` (what the CLI runs);
- on Ray: ``ray.init(num_cpus=2, include_dashboard=False)`` on 127.0.0.1, ``RayRunner`` (a pool of
  actors that compile the library once) + the same ``retriage_analyses``.

It prints analyses/s for both (start-up separately), checks that both give the same change report
and per-analysis changes, checks that every port Ray opened listens on loopback only, and shuts
Ray down (and kills leftovers of its own) at the end.

    python bench/ray_retriage_bench.py                         # 400 analyses of 4 MiB
    python bench/ray_retriage_bench.py --analyses 2000 --size 2M --batch 16

Needs Ray (``pip install 'logtriage[ray]'``) and psutil (dev extra). Results go to stdout and
bench/out/ray_retriage.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

# Ray reads this when it is imported: its processes then bind to 127.0.0.1 only
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gen_log  # noqa: E402

from app.db import repo  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.repo import JobMeta  # noqa: E402
from app.db.session import Database  # noqa: E402
from app.service import analyses, jobs, worker  # noqa: E402
from app.service.retriage import (  # noqa: E402
    RayOptions,
    RayRunner,
    Results,
    change_report,
    local_runner,
    retriage_analyses,
)
from app.settings import Settings  # noqa: E402

RULES = ROOT / "rules"
OLD_LIBRARY_DROPS = ("hardware",)  # rule dirs the "old" library lacks
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def old_library(tmp: Path) -> Path:
    root = tmp / "rules-old"
    shutil.copytree(RULES, root)
    for sub in OLD_LIBRARY_DROPS:
        for f in (root / sub).glob("*.yaml"):
            f.unlink()
    return root


def build_archive(settings: Settings, db: Database, logs: Path, n: int, size: int) -> list[str]:
    """n analyses through the pipeline (redact, blob, triage, rows), as the service stores them."""
    worker.init_local(settings)
    store = worker.worker_state().store
    kinds = [("end", "xid79"), ("end", "ecc"), ("none", "xid79"), ("end", "xid79")]
    ids: list[str] = []
    t0 = time.perf_counter()
    for i in range(n):
        failures, fault = kinds[i % len(kinds)]
        path = logs / f"job-{i}.log"
        gen_log.generate(path, size, seed=i, failures=failures, fault=fault)
        outcome = worker.scan_upload(jobs.ScanJob(files=(jobs.InputFile(path.name, str(path)),)))
        path.unlink()
        Path(str(path) + ".manifest.json").unlink()
        if isinstance(outcome, jobs.JobError):
            raise SystemExit(f"ingest failed: {outcome.detail}")
        analyses.commit_blobs(store, outcome)
        with db.write() as s:
            row = repo.create_pending(s, meta=JobMeta(job_id=f"bench-{i}"), token_id=None, runner="bench:0")
            analyses.complete_from_outcome(s, analysis_id=row.id, outcome=outcome)
            ids.append(row.id)
        if (i + 1) % 50 == 0:
            rate = (i + 1) / (time.perf_counter() - t0)
            print(f"  stored {i + 1}/{n} ({rate:.1f}/s)", file=sys.stderr)
    return ids


def copy_db(src: Path, dst: Path) -> None:
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def listeners(pids: set[int]) -> list[tuple[str, int, str]]:
    out = []
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids and c.laddr:
            try:
                name = psutil.Process(c.pid).name()
            except psutil.Error:
                name = "?"
            out.append((c.laddr.ip, c.laddr.port, name))
    return sorted(out)


def descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def run_local(settings: Settings, url: str, ids: list[str], batch: int) -> tuple[Results, dict[str, float]]:
    db = Database(url)
    try:
        t0 = time.perf_counter()
        worker.init_local(settings)  # compiles the library (the CLI does the same)
        t1 = time.perf_counter()
        results = retriage_analyses(db=db, analysis_ids=ids, runner=local_runner, batch_size=batch)
        t2 = time.perf_counter()
    finally:
        db.dispose()
    return results, {"startup_s": t1 - t0, "run_s": t2 - t1, "total_s": t2 - t0}


def run_ray(
    settings: Settings, url: str, ids: list[str], batch: int, workers: int
) -> tuple[Results, dict[str, Any]]:
    import ray

    db = Database(url)
    info: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        ray.init(
            num_cpus=workers,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
        t1 = time.perf_counter()
        with RayRunner(settings, RayOptions(batch_size=batch, workers=workers)) as runner:
            t2 = time.perf_counter()
            info["workers"] = runner.describe()
            results = retriage_analyses(db=db, analysis_ids=ids, runner=runner, batch_size=batch)
            t3 = time.perf_counter()
            pids = {os.getpid(), *(p.pid for p in descendants())}
            info["listeners"] = listeners(pids)
        info.update({"ray_init_s": t1 - t0, "startup_s": t2 - t1, "run_s": t3 - t2, "total_s": t3 - t0})
    finally:
        db.dispose()
        ray.shutdown()
        time.sleep(1)
        left = [p for p in descendants() if p.is_running()]
        for p in left:  # only processes this benchmark started
            p.kill()
        info["leftover_processes_killed"] = len(left)
    return results, info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--analyses", type=int, default=400)
    ap.add_argument("--size", type=gen_log.parse_size, default=gen_log.parse_size("4M"), help="per log")
    ap.add_argument("--batch", type=int, default=8, help="analyses per Ray task")
    ap.add_argument("--workers", type=int, default=2, help="Ray CPUs = actors")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    args = ap.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise SystemExit("this benchmark needs Ray: pip install 'logtriage[ray]'") from None

    tmp = Path(tempfile.mkdtemp(prefix="ray-retriage-bench-"))
    try:
        data = tmp / "data"
        (tmp / "logs").mkdir()
        url = f"sqlite:///{tmp / 'archive.db'}"
        old = Settings(data_dir=data, database_url=url, rules_dir=old_library(tmp))
        db = Database(old.effective_database_url)
        upgrade(db.engine)
        print(f"storing {args.analyses} analyses of {args.size >> 20} MiB (old library)…", file=sys.stderr)
        t0 = time.perf_counter()
        try:
            ids = build_archive(old, db, tmp / "logs", args.analyses, args.size)
        finally:
            db.dispose()
        ingest_s = time.perf_counter() - t0
        for name in ("local.db", "ray.db"):
            copy_db(tmp / "archive.db", tmp / name)
        new = old.model_copy(update={"rules_dir": RULES})

        print("re-triage in process…", file=sys.stderr)
        local, t_local = run_local(new, f"sqlite:///{tmp / 'local.db'}", ids, args.batch)
        print("re-triage on Ray…", file=sys.stderr)
        on_ray, t_ray = run_ray(new, f"sqlite:///{tmp / 'ray.db'}", ids, args.batch, args.workers)

        rep_local, rep_ray = change_report(local), change_report(on_ray)
        same = rep_local == rep_ray and local == on_ray
        n = len(ids)
        bad_listeners = [entry for entry in t_ray["listeners"] if entry[0] not in LOOPBACK]
        result = {
            "analyses": n,
            "log_bytes": args.size,
            "batch": args.batch,
            "ray_workers": args.workers,
            "cpus": os.cpu_count(),
            "ingest_s": round(ingest_s, 2),
            "in_process": {k: round(v, 3) for k, v in t_local.items()}
            | {
                "analyses_per_s": round(n / t_local["run_s"], 1),
                "analyses_per_s_with_startup": round(n / t_local["total_s"], 1),
            },
            "ray": {k: round(v, 3) for k, v in t_ray.items() if isinstance(v, float)}
            | {
                "workers": t_ray["workers"],
                "analyses_per_s": round(n / t_ray["run_s"], 1),
                "analyses_per_s_with_startup": round(n / t_ray["total_s"], 1),
                "listeners": [f"{ip}:{port} {name}" for ip, port, name in t_ray["listeners"]],
                "leftover_processes_killed": t_ray["leftover_processes_killed"],
            },
            "same_report": same,
            "report": rep_local["text"],
        }
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "ray_retriage.json").write_text(json.dumps(result, indent=2) + "\n")
        li, ra = result["in_process"], result["ray"]
        print(rep_local["text"])
        print(
            f"\n{n} analyses of {args.size >> 20} MiB on {os.cpu_count()} CPUs:\n"
            f"  in process : {li['analyses_per_s']:7.1f} analyses/s  (run {li['run_s']:.2f}s, "
            f"+{li['startup_s']:.2f}s compile: {li['analyses_per_s_with_startup']:.1f}/s)\n"
            f"  Ray ({args.workers} actors, batch {args.batch}): {ra['analyses_per_s']:7.1f} analyses/s  "
            f"(run {ra['run_s']:.2f}s, +{ra['ray_init_s']:.2f}s ray.init +{ra['startup_s']:.2f}s actors: "
            f"{ra['analyses_per_s_with_startup']:.1f}/s)\n"
            f"  same change report and per-analysis changes: {'yes' if same else 'NO'}\n"
            f"  Ray listeners: {len(t_ray['listeners'])}, "
            f"{'all on loopback' if not bad_listeners else f'NOT loopback: {bad_listeners}'}"
        )
        return 0 if same and not bad_listeners else 1
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
