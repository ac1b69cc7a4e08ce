"""Bulk re-triage on Ray gives what the in-process path gives (`logtriage retriage --ray`).

Ray is an optional extra for serving (`pip install 'logtriage[ray]'`) and part of the dev extras,
so `bash scripts/setup.sh` installs it and CI runs these tests; without Ray (a serve-only venv)
the ones that need it skip. They start a private Ray instance on 127.0.0.1 (2 CPUs, no dashboard)
through the CLI, which shuts it down again.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.db import repo
from app.db.migrate import upgrade
from app.db.repo import JobMeta
from app.db.session import Database
from app.service import analyses, worker
from app.service.analyses import commit_blobs
from app.service.jobs import InputFile, JobError, RetriageJob, ScanJob, ScanOutcome, StoredInput
from app.service.retriage import (
    Batch,
    Outcome,
    RayRunner,
    change_report,
    local_runner,
    ray_worker_payload,
    retriage_analyses,
    run_batch,
)
from app.service.worker import init_local, scan_upload
from app.settings import Settings
from tests.conftest import RULES, make_rules_dir
from tests.servicekit import ECC, NCCL_TIMEOUT, OOM, cli_env, make_settings, run_cli, training_log

# slow: real Ray clusters
pytestmark = pytest.mark.slow

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="Ray is an optional extra (pip install 'logtriage[ray]', or the dev extras); not installed here",
)

ECC_RULE = "hardware/cuda-uncorrectable-ecc.yaml"
NEW_RULES = (ECC_RULE, "nccl/nccl-watchdog-collective-timeout.yaml", "cuda/cuda-out-of-memory.yaml")


def _store(settings: Settings, db: Database, path: Path, job_id: str) -> str:
    """Analyse a log and store it the way the service does (blob + rows), without a server."""
    outcome = scan_upload(ScanJob(files=(InputFile(path.name, str(path)),)))
    assert isinstance(outcome, ScanOutcome), outcome
    commit_blobs(worker.worker_state().store, outcome)
    with db.write() as s:
        row = repo.create_pending(s, meta=JobMeta(job_id=job_id), token_id=None, runner="test:0")
        analyses.complete_from_outcome(s, analysis_id=row.id, outcome=outcome)
        return row.id


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Seven analyses made with an old library (ECC only); the new library adds NCCL and OOM rules.

    One analysis has lost its blob, so both paths must report the same error for it.
    """
    for d in ("old", "new", "logs"):
        (tmp_path / d).mkdir()
    old = make_rules_dir(tmp_path / "old", {ECC_RULE: (RULES / ECC_RULE).read_text()})
    new = make_rules_dir(tmp_path / "new", {r: (RULES / r).read_text() for r in NEW_RULES})
    settings = make_settings(tmp_path / "data", f"sqlite:///{tmp_path / 'lt.db'}", rules_dir=old)
    db = Database(settings.effective_database_url)
    upgrade(db.engine)
    monkeypatch.setattr(worker, "_STATE", None)  # init_local sets it; restored afterwards
    init_local(settings)
    tails = [
        NCCL_TIMEOUT,
        NCCL_TIMEOUT,
        NCCL_TIMEOUT,
        ECC.format(ip="10.0.0.7"),
        OOM.format(gib="2"),
        "[job] training finished\n",
        NCCL_TIMEOUT,
    ]
    ids = []
    try:
        for i, tail in enumerate(tails):
            path = tmp_path / "logs" / f"rank{i}.log"
            path.write_text(training_log(tail, steps=30 + i, job=f"job{i}"))
            ids.append(_store(settings, db, path, f"ray-{i}-{time.time_ns()}"))
        with db.read() as s:
            lost = repo.get_analysis(s, analysis_id=ids[-1], full=True).files[0].blob_sha256
    finally:
        db.dispose()
    worker.worker_state().store.delete(lost)
    return {"settings": settings, "ids": ids, "env": cli_env(settings, LOGTRIAGE_RULES_DIR=str(new))}


def _run(env: dict[str, str], *args: str) -> dict[str, Any]:
    res = run_cli("retriage", "--since", "1h", "--json", *args, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@needs_ray
def test_ray_retriage_matches_the_in_process_result(archive: dict[str, Any]) -> None:
    env = archive["env"]
    local = _run(env, "--dry-run")  # in process, nothing stored
    assert local["report"]["moved"] and local["report"]["errors"]

    on_ray = _run(env, "--ray", "--ray-address", "local", "--ray-workers", "2", "--ray-batch", "2")
    assert on_ray["analyses"] == local["analyses"]
    assert {k: v for k, v in on_ray["report"].items() if k != "text"} == {
        k: v for k, v in local["report"].items() if k != "text"
    }
    assert on_ray["report"]["text"] == local["report"]["text"].replace("would move", "moved")
    assert "3 analyses moved from unknown to nccl.collective_timeout" in on_ray["report"]["text"]
    assert "1 analysis moved from unknown to cuda.out_of_memory" in on_ray["report"]["text"]

    # what Ray stored is exactly what this process computes now: nothing left to change
    again = _run(env, "--dry-run")
    assert again["report"]["moved"] == [] and again["report"]["findings_changed"] == 0
    assert again["report"]["unchanged"] == len(archive["ids"]) - 1
    assert again["report"]["errors"] == local["report"]["errors"]


def test_ray_flag_without_ray_installed_is_a_one_line_error(tmp_path: Path) -> None:
    fake = tmp_path / "no-ray"
    fake.mkdir()
    (fake / "ray.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    settings = make_settings(tmp_path / "data", f"sqlite:///{tmp_path / 'lt.db'}")
    env = cli_env(settings, PYTHONPATH=str(fake))
    res = run_cli("retriage", "--since", "1h", "--ray", env=env)
    assert res.returncode == 1
    assert res.stderr.strip().count("\n") == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "pip install 'logtriage[ray]'" in res.stderr
    assert not (tmp_path / "data").exists()  # it failed before touching anything


def test_the_driver_loop_does_not_depend_on_batch_order(archive: dict[str, Any]) -> None:
    """A runner that finishes batches out of order (as Ray does) gives the local runner's result."""
    settings: Settings = archive["settings"]
    new_settings = settings.model_copy(update={"rules_dir": Path(archive["env"]["LOGTRIAGE_RULES_DIR"])})
    init_local(new_settings)

    def backwards(batches: Any) -> list[tuple[int, list[Outcome]]]:
        todo: list[Batch] = list(batches)
        return [(b.index, run_batch(b.jobs)) for b in reversed(todo)]

    db = Database(settings.effective_database_url)
    try:
        ids = [*archive["ids"], "01ZZZZZZZZZZZZZZZZZZZZZZZZ"]  # one vanished meanwhile
        kw: dict[str, Any] = {"db": db, "analysis_ids": ids, "dry_run": True}
        expected = retriage_analyses(runner=local_runner, batch_size=100, **kw)
        shuffled = retriage_analyses(runner=backwards, batch_size=2, **kw)
    finally:
        db.dispose()
    assert shuffled == expected
    assert [aid for aid, _ in shuffled] == ids
    report = change_report(shuffled, dry_run=True)
    assert len(report["errors"]) == 2 and "no analysis" in report["errors"][-1]


def test_ray_workers_get_no_database_url_and_absolute_paths(tmp_path: Path) -> None:
    settings = make_settings(
        Path("relative-data"), "postgresql+psycopg://u:secret@db/x", rules_dir=Path("rules"), scan_jobs=0
    )
    payload = ray_worker_payload(settings)
    assert "database_url" not in payload and "secret" not in json.dumps(payload)
    assert Path(payload["data_dir"]).is_absolute() and Path(payload["rules_dir"]).is_absolute()
    assert payload["scan_jobs"] == 1
    assert Settings(**payload).data_dir == (Path.cwd() / "relative-data").resolve()


# --- the Ray runner's scheduling, against a stand-in for Ray (runs without Ray) -----------------


class _ActorError(Exception):
    pass


class _FakeRay:
    """Just enough of `ray` for RayRunner.__call__: FIFO wait, lazy get, dying actors."""

    exceptions = SimpleNamespace(RayError=Exception, RayActorError=_ActorError)

    def wait(self, refs: list[Any], num_returns: int = 1) -> tuple[list[Any], list[Any]]:
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref: Any) -> Any:
        return ref()


class _FakeActor:
    def __init__(self, poison: set[str]) -> None:
        self.dead = False
        self.run = SimpleNamespace(remote=self._remote)
        self.poison = poison

    def _remote(self, index: int, jobs: tuple[RetriageJob, ...]) -> Any:
        def result() -> tuple[int, list[Outcome]]:
            if not self.dead and any(j.files[0].sha256 in self.poison for j in jobs):
                self.dead = True  # everything queued on it fails too
            if self.dead:
                raise _ActorError("The actor died unexpectedly before finishing this task.")
            return index, [JobError("Ok", j.files[0].sha256) for j in jobs]

        return result


def _runner(workers: int, poison: set[str]) -> RayRunner:
    runner = RayRunner.__new__(RayRunner)
    runner.ray = _FakeRay()
    runner.actors = [_FakeActor(poison) for _ in range(workers)]
    runner._new_actor = lambda: _FakeActor(poison)  # type: ignore[method-assign]
    return runner


def _batches(n: int, size: int) -> list[Batch]:
    job = lambda i: RetriageJob(files=(StoredInput("a.log", f"{i:064x}", 1),))  # noqa: E731
    return [Batch(b, tuple(job(b * size + k) for k in range(size))) for b in range(n)]


def test_an_analysis_that_kills_its_ray_worker_costs_only_itself() -> None:
    batches = _batches(10, 4)
    poison = {f"{i:064x}" for i in (5, 22)}
    out = dict(_runner(2, poison)(iter(batches)))
    assert sorted(out) == list(range(10))  # every batch comes back once, complete
    for b in batches:
        got = out[b.index]
        assert len(got) == len(b.jobs)
        for job, o in zip(b.jobs, got, strict=True):
            sha = job.files[0].sha256
            assert o.detail == (
                "Ray worker failed: The actor died unexpectedly before finishing this task."
                if sha in poison
                else sha
            )


def test_when_every_ray_worker_is_gone_the_rest_is_reported_not_lost() -> None:
    batches = _batches(20, 2)
    poison = {f"{i:064x}" for i in range(0, 40, 3)}  # more deaths than replacements
    out = dict(_runner(1, poison)(iter(batches)))
    assert sorted(out) == list(range(20))
    details = [o.detail for outs in out.values() for o in outs]
    assert "no Ray worker left" in details
    assert sum(d.startswith("Ray worker failed") for d in details) <= 2 * 4 + 1
