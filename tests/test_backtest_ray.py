"""A draft's back-test split over Ray tasks gives exactly the in-process back-test
(app/service/backtest_ray.py, `LOGTRIAGE_BACKTEST_RAY_ADDRESS`).

The shard plan and the shard task are checked without Ray first (each shard read and scanned
here, the results concatenated). The slow test starts a real two-node Ray cluster on 127.0.0.1
(a head and a second raylet, 1 CPU each: `ray.cluster_utils.Cluster`, no dashboard), runs the
back-test there with more shards than nodes, and shuts every process it started down again.
Ray is installed by the dev extras (`logtriage[ray]`).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.db.session import Database
from app.service import backtest_ray, backtest_scan, drafts
from app.service.backtest_ray import RayBacktest, Shard, backtest_shard, line_counts, split
from app.service.drafts import Backtest, run_backtest
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import backtest_bench  # bench/ is not a package

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")

WORDS = ("Frob", "Quux", "Lease", "Shard")
PATTERNS = (
    r"FrobError: +lease +(?P<num1>\d+) +lost",  # a literal to filter on
    r"(?i)quuxerror",  # none: every line through the regex
    r"(?P<word1>\w+Error): lease (?P<num1>\d+)",  # matches every analysis
    r"NoSuchError",  # matches none
)


def _history(tmp_path: Path, n: int = 60) -> tuple[str, list[str]]:
    """`n` analyses of 1-4 signal lines each (unknown, or another class now and then)."""
    from app.db import repo

    rng = random.Random(5)
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    items = []
    for i in range(n):
        sigs = []
        for k in range(rng.randint(1, 4)):
            word = rng.choice(WORDS)
            sigs.append(
                {
                    "file": "a.log",
                    "line": 10 + k,
                    "text": f"[rank{k}]: {word}Error: lease {rng.randrange(999)} lost on /data/{i}.bin",
                    "template": f"{word}Error: lease <NUM> lost on <PATH>",
                    "key": f"k{word}{k}",
                    "weight": 2,
                }
            )
        root = (
            {"failure_class": "nccl.collective_timeout", "kind": "infra", "rule_id": "nccl-x", "title": "x"}
            if i % 7 == 0
            else None
        )
        items.append(
            (
                {"root_cause": root, "findings": [], "signals": sigs},
                [],
                t0 + dt.timedelta(seconds=i),
                repo.JobMeta(),
            )
        )
    url = f"sqlite:///{tmp_path}/bt.db"
    return url, backtest_bench.seed(url, items)


def _limit(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """The back-test's row limit, for both paths (each module holds the name it reads)."""
    monkeypatch.setattr(drafts, "BACKTEST_ROWS", rows)
    monkeypatch.setattr(backtest_scan, "BACKTEST_ROWS", rows)


def _same(a: Backtest, b: Backtest) -> dict[str, Any]:
    da, db_ = a.as_dict(), b.as_dict()
    da.pop("seconds"), db_.pop("seconds")
    assert da == db_
    return da


def test_the_shards_cover_the_back_tests_rows_in_its_order(tmp_path: Path) -> None:
    url, _ids = _history(tmp_path)
    db = Database(url)
    try:
        with db.read() as s:
            counts = line_counts(s)
            total = sum(n for _a, n in counts)
            for shards, limit in ((1, 10_000), (3, 10_000), (7, 10_000), (100, 10_000), (3, 50), (4, 1)):
                plan = split(counts, shards=shards, limit=limit)
                assert len(plan) <= shards and sum(p.lines for p in plan) == min(total, limit)
                assert all(p.hi >= p.lo for p in plan)
                assert all(a.lo > b.hi for a, b in itertools.pairwise(plan))  # newest first, apart
                rows = [r for p in plan for r in backtest_ray.shard_lines(s, p)]
                from app.db.repo import learn as lrepo

                want = lrepo.signal_texts(s, limit=limit)
                assert rows == [(a, p, t) for a, p, t, _f, _l in want]
    finally:
        db.dispose()


def test_the_shard_task_concatenated_is_the_in_process_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shard read and scanned here, as a Ray task would: the same matches, in the same order."""
    url, _ids = _history(tmp_path)
    db = Database(url)
    try:
        for limit in (100_000, 37):  # 37: the limit cuts an analysis short
            _limit(monkeypatch, limit)
            with db.read() as s:
                plan = split(line_counts(s), shards=4, limit=limit)
            for pattern in PATTERNS:
                here = run_backtest(SimpleNamespace(db=db), pattern=pattern, failure_class="site.x")  # type: ignore[arg-type]
                parts = [backtest_shard(backtest_ray.worker_url(url), pattern, p, 10.0) for p in plan]
                assert [a for ids, *_r in parts for a in ids] == here.analysis_ids
                assert sum(n for _i, n, *_r in parts) == here.lines_read
    finally:
        db.dispose()


def test_workers_get_the_url_without_its_password() -> None:
    url = backtest_ray.worker_url("postgresql+psycopg://u:s3cret@db:5432/x?options=-csearch_path%3Dy")
    assert "s3cret" not in url and url.startswith("postgresql+psycopg://u@db:5432/x")
    assert "search_path" in url
    assert backtest_ray.worker_url("sqlite:///rel/a.db") == f"sqlite:///{Path('rel/a.db').resolve()}"


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    """A Ray cluster of two nodes (two raylets) on 127.0.0.1, this process connected to it."""
    from app.service.retriage import import_ray

    ray = import_ray(local=True)  # loopback only, before Ray's first import
    from ray.cluster_utils import Cluster

    small = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(
        initialize_head=True, connect=False, head_node_args={**small, "include_dashboard": False}
    )
    try:
        cluster.add_node(**small)
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        try:
            yield cluster
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()


@pytest.mark.slow
@needs_ray
def test_the_back_test_on_two_ray_nodes_is_the_in_process_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_nodes: Any
) -> None:
    url, _ids = _history(tmp_path)
    db = Database(url)
    ctx: Any = SimpleNamespace(db=db)
    on_ray = RayBacktest(address=two_nodes.address, min_lines=0, shards=3)
    nodes: set[str] = set()
    try:
        for limit in (100_000, 37):
            _limit(monkeypatch, limit)
            for pattern in PATTERNS:
                here = run_backtest(ctx, pattern=pattern, failure_class="site.x")
                there = run_backtest(ctx, pattern=pattern, failure_class="site.x", ray=on_ray)
                assert here.shards == 0 and there.shards == 3, "the Ray path fell back to in process"
                got = _same(here, there)
                assert got["complete"] is (limit == 100_000)
                assert len(backtest_ray.last_nodes) == 3
                nodes |= set(backtest_ray.last_nodes)
        # both nodes took shares: SPREAD is Ray's best effort, so one run's three short tasks may
        # all land on the node whose worker was free first (seen once in four full runs); over
        # the runs above both nodes take some
        assert len(nodes) == 2
        assert got["lines_read"] == 37
        _limit(monkeypatch, 100_000)
        every = run_backtest(ctx, pattern=PATTERNS[2], failure_class="site.x", ray=on_ray)
        assert len(every.analysis_ids) == 60 and every.conflicts and every.changes
        # a history smaller than min_lines stays in process
        small = RayBacktest(address=two_nodes.address, min_lines=10**6)
        assert run_backtest(ctx, pattern=PATTERNS[0], failure_class="site.x", ray=small).shards == 0
    finally:
        db.dispose()


def test_without_ray_the_back_test_runs_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray configured but not importable (or unreachable): the same result, in process."""
    import app.service.retriage as retriage
    from app.errors import MissingExtraError

    def no_ray(*, local: bool = False) -> Any:
        raise MissingExtraError("--ray needs Ray")

    monkeypatch.setattr(retriage, "import_ray", no_ray)
    url, _ids = _history(tmp_path, n=10)
    db = Database(url)
    try:
        ctx: Any = SimpleNamespace(db=db)
        here = run_backtest(ctx, pattern=PATTERNS[2], failure_class="site.x")
        fell_back = run_backtest(
            ctx, pattern=PATTERNS[2], failure_class="site.x", ray=RayBacktest(address="auto", min_lines=0)
        )
        assert fell_back.shards == 0 and len(here.analysis_ids) == 10
        _same(here, fell_back)
    finally:
        db.dispose()


def test_settings_turn_it_on() -> None:
    from app.settings import Settings

    assert backtest_ray.options_of(Settings()) is None
    opts = backtest_ray.options_of(Settings(backtest_ray_address="ray://head:10001", backtest_ray_shards=8))
    assert opts == RayBacktest(address="ray://head:10001", min_lines=100_000, shards=8)
    assert isinstance(Shard("b", "a", 1), Shard)
