"""Bulk re-triage: stored analyses re-run with the current rule library, in this process or on Ray.

::

    driver (owns the database)                         workers (never touch the database)
      load_batch: ids -> RetriageJobs (blob shas) ───>  run_batch: read blobs, triage with the library
      record_batch: apply_retriage / diff  <───────   ScanOutcome | JobError per analysis
      change_report()

``retriage_analyses`` is the one driver loop; a *runner* decides where batches run:
``local_runner`` (this process, library compiled by ``init_local``) or ``RayRunner`` (a pool of
Ray actors, each compiling the library once and then taking batch after batch). Both paths
therefore persist and report identically. Ray is an optional extra (``pip install
'logtriage[ray]'``), imported only when a ``RayRunner`` is built.

Workers read blobs from the store configured for the data dir: on one machine that is the same
directory; a multi-node Ray cluster needs the data dir on a shared filesystem (or a shared blob
store), and logtriage installed on every node.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import logging
import os
import socket
import sys
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from app.db import repo
from app.db.session import Database
from app.engine.pipeline.library import default_rules_dir
from app.errors import LogtriageError, MissingExtraError, ServiceUnavailableError
from app.service.analyses import retriage_job_of
from app.service.jobs import JobError, RetriageJob, ScanOutcome, SiteRules
from app.service.worker import init_local, init_worker, ping, retriage_stored, worker_settings_payload
from app.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("logtriage.retriage")

Outcome = ScanOutcome | JobError
Changes = dict[str, Any]
Results = list[tuple[str, Changes]]
DEFAULT_BATCH = 8
RAY_INSTALL_HINT = "pip install 'logtriage[ray]'"


@dataclass(frozen=True)
class Batch:
    index: int
    jobs: tuple[RetriageJob, ...]


# A runner takes batches (pulled lazily: the driver loads jobs as it hands them out) and yields
# (batch index, one outcome per job) in whatever order batches finish.
Runner = Callable[[Iterator[Batch]], Iterable[tuple[int, list[Outcome]]]]


# --- worker side (any process whose pipeline state is initialised) ------------------------------


def run_batch(jobs: Sequence[RetriageJob]) -> list[Outcome]:
    """Re-triage each job; one unreadable blob becomes that analysis's error, not the batch's."""
    out: list[Outcome] = []
    for job in jobs:
        try:
            out.append(retriage_stored(job))
        except Exception as exc:
            log.warning("re-triage failed unexpectedly", exc_info=exc)
            out.append(JobError("InternalError", f"unexpected {type(exc).__name__}: {exc}"))
    return out


def local_runner(batches: Iterator[Batch]) -> Iterator[tuple[int, list[Outcome]]]:
    """Run batches here, one after the other (call ``init_local`` first)."""
    for batch in batches:
        yield batch.index, run_batch(batch.jobs)


# --- driver side ---------------------------------------------------------------------------------


def _error(detail: str) -> Changes:
    return {"error": detail, "changed": False}


@dataclass(frozen=True)
class _Loaded:
    """A batch as handed out: its analyses and (dry run) their current results to diff against."""

    ids: list[str]
    old: list[dict[str, Any] | None]


def load_batch(
    db: Database, ids: Sequence[str], *, with_results: bool, site: SiteRules | None = None
) -> tuple[_Loaded, list[RetriageJob], dict[str, Changes]]:
    """One read transaction for a batch: its jobs, and an error for each id that cannot re-run."""
    from sqlalchemy import select
    from sqlalchemy.orm import selectinload

    from app.db.models import Analysis

    errors: dict[str, Changes] = {}
    loaded = _Loaded([], [])
    jobs: list[RetriageJob] = []
    with db.read() as s:
        stmt = (
            select(Analysis)
            .where(Analysis.id.in_({aid.upper() for aid in ids}))
            .options(selectinload(Analysis.files))
        )
        rows = {row.id: row for row in s.scalars(stmt)}
        for aid in ids:
            row = rows.get(aid.upper())
            if row is None:
                errors[aid] = _error(f"no analysis {aid!r}")
                continue
            try:
                job = retriage_job_of(row)
                jobs.append(dataclasses.replace(job, site=site) if site is not None else job)
            except LogtriageError as exc:
                errors[aid] = _error(exc.detail)
                continue
            loaded.ids.append(aid)
            loaded.old.append(row.result if with_results else None)
    return loaded, jobs, errors


def _apply(s: Session, analysis_id: str, outcome: ScanOutcome) -> Changes:
    _row, changes = repo.apply_retriage(
        s,
        analysis_id=analysis_id.upper(),
        analysis=outcome.analysis,
        library_version=outcome.library_version,
        rules=outcome.rules,
    )
    return changes


def record_batch(
    db: Database, loaded: _Loaded, outcomes: Sequence[Outcome], *, dry_run: bool
) -> list[Changes]:
    """Persist a batch's outcomes in one transaction (a dry run only diffs them); return the changes.

    If the batch transaction fails, each analysis is written on its own, so one bad write costs only
    that analysis (reported as its error).
    """
    out: list[Changes] = [_error(o.detail) if isinstance(o, JobError) else {} for o in outcomes]
    todo = [
        (i, aid, o)
        for i, (aid, o) in enumerate(zip(loaded.ids, outcomes, strict=True))
        if isinstance(o, ScanOutcome)
    ]
    if dry_run:
        for i, _aid, o in todo:
            out[i] = repo.diff_results(loaded.old[i], o.analysis)
        return out
    try:
        with db.write() as s:
            done = [(i, _apply(s, aid, o)) for i, aid, o in todo]
    except Exception as exc:
        log.warning("writing a batch of %d failed (%s); writing one by one", len(todo), exc)
        done = []
        for i, aid, o in todo:
            try:
                with db.write() as s:
                    done.append((i, _apply(s, aid, o)))
            except LogtriageError as err:  # e.g. deleted while it ran
                done.append((i, _error(err.detail)))
    for i, changes in done:
        out[i] = changes
    return out


def retriage_analyses(
    *,
    db: Database,
    analysis_ids: Sequence[str],
    runner: Runner,
    batch_size: int = DEFAULT_BATCH,
    dry_run: bool = False,
    site: SiteRules | None = None,
) -> Results:
    """The one driver loop: load jobs batch by batch, let `runner` compute, persist each batch.

    Only the driver touches the database: one read transaction per batch as it is handed out, one
    write transaction per batch as it comes back. Returns (analysis id, changes) per analysis, in the
    order of `analysis_ids`.
    """
    ids = list(analysis_ids)
    size = max(1, batch_size)
    results: dict[str, Changes] = {}
    handed_out: dict[int, _Loaded] = {}

    def batches() -> Iterator[Batch]:
        for index, start in enumerate(range(0, len(ids), size)):
            loaded, jobs, errors = load_batch(db, ids[start : start + size], with_results=dry_run, site=site)
            results.update(errors)
            if jobs:
                handed_out[index] = loaded
                yield Batch(index, tuple(jobs))

    for index, outcomes in runner(batches()):
        loaded = handed_out.pop(index)
        changes = record_batch(db, loaded, outcomes, dry_run=dry_run)
        results.update(zip(loaded.ids, changes, strict=True))
    return [(aid, results[aid]) for aid in ids]


def retriage(
    *,
    db: Database,
    settings: Settings,
    analysis_ids: Sequence[str],
    dry_run: bool = False,
    ray: RayOptions | None = None,
) -> Results:
    """Bulk re-triage in this process, or on Ray with `ray` options (the CLI's `logtriage retriage`),
    with the site rule pack of the moment (each job carries it, as the service's do)."""
    from app.engine.pipeline.library import load_library
    from app.service.sitepack import SitePackSource

    site = SitePackSource(settings, db, load_library(settings.rules_dir)).read()
    if ray is None:
        init_local(settings)
        return retriage_analyses(
            db=db, analysis_ids=analysis_ids, runner=local_runner, dry_run=dry_run, site=site
        )
    batches = -(-len(analysis_ids) // max(1, ray.batch_size))
    with RayRunner(settings, ray, max_workers=batches) as runner:
        return retriage_analyses(
            db=db,
            analysis_ids=analysis_ids,
            runner=runner,
            batch_size=ray.batch_size,
            dry_run=dry_run,
            site=site,
        )


def change_report(results: Results, *, dry_run: bool = False) -> dict[str, Any]:
    """The report both paths print: '12 analyses moved from unknown to nccl.collective_timeout'."""
    moved: Counter[tuple[str, str]] = Counter()
    changed_findings = 0
    unchanged = 0
    errors: list[str] = []
    versions: Counter[tuple[str | None, str | None]] = Counter()
    for aid, c in results:
        if "error" in c:
            errors.append(f"{aid}: {c['error']}")
            continue
        versions[(c["before"]["library_version"], c["after"]["library_version"])] += 1
        if c["root_cause_changed"]:
            moved[(c["before"]["failure_class"], c["after"]["failure_class"])] += 1
        elif c["changed"]:
            changed_findings += 1
        else:
            unchanged += 1
    verb = "would move" if dry_run else "moved"
    lines = []
    for old, new in versions:
        lines.append(f"rule library {old or '?'} -> {new or '?'}" if old != new else f"rule library {new}")
    for (src, dst), n in sorted(moved.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"{n} {'analysis' if n == 1 else 'analyses'} {verb} from {src} to {dst}")
    if changed_findings:
        lines.append(f"{changed_findings} kept their root cause but gained or lost other findings")
    lines.append(f"{unchanged} unchanged")
    if errors:
        lines.append(f"{len(errors)} could not be re-triaged:")
        lines += [f"  {e}" for e in errors[:20]]
    return {
        "text": "\n".join(lines),
        "moved": [{"from": s, "to": d, "count": n} for (s, d), n in moved.items()],
        "findings_changed": changed_findings,
        "unchanged": unchanged,
        "errors": errors,
    }


# --- Ray -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayOptions:
    address: str = "auto"  # auto (RAY_ADDRESS / a running cluster) | local | ray://host:10001 | host:port
    batch_size: int = DEFAULT_BATCH
    workers: int | None = None  # actors; default: the cluster's CPUs (at most one per batch)


LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def import_ray(*, local: bool = False) -> Any:
    """Ray, or a one-line error saying how to install it (it is an optional extra).

    `local`: a private instance on this machine will be started. Ray decides at import time whether
    its processes bind to loopback only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) or to every
    interface, so the variable is set before the first import.
    """
    if local and "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_ONLY_ENV, "0")
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise MissingExtraError(
            f"--ray needs Ray, which is not installed in this environment: {RAY_INSTALL_HINT}"
        ) from None


def connect_ray(ray: Any, address: str, *, num_cpus: int | None = None) -> bool:
    """Connect this process to Ray at `address` (see ``RayOptions.address``) unless it is connected
    already; True when this call connected (the caller then shuts it down). `num_cpus`: the CPUs
    of a private instance (``local``; default: this machine's). Unreachable: ServiceUnavailableError.
    """
    if ray.is_initialized():
        return False
    quiet: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address == "local":
            # a private instance on this machine: loopback only (see import_ray), no dashboard
            ray.init(
                address="local",
                num_cpus=num_cpus or os.cpu_count() or 1,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                **quiet,
            )
        elif (os.environ.get("RAY_ADDRESS", "") if address == "auto" else address).startswith("ray://"):
            # Ray Client (ray.init reads RAY_ADDRESS for "auto"): the server side owns logging
            ray.init(address=address)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        hint = " (or --ray-address local to start one on this machine)" if address == "auto" else ""
        raise ServiceUnavailableError(
            f"cannot connect to Ray at {address!r}: {_first_line(exc)}{hint}"
        ) from None
    return True


def ray_worker_payload(settings: Settings) -> dict[str, Any]:
    """Settings for Ray actors: absolute paths (workers have their own cwd), no database URL (workers
    never write to the database, and the URL may hold a password), one scan process per actor (Ray
    schedules the parallelism; no forking inside a Ray worker)."""
    payload = worker_settings_payload(settings)
    payload.pop("database_url", None)
    payload["scan_jobs"] = 1
    for key in ("data_dir", "rules_dir", "cache_dir"):
        if payload.get(key) is not None:
            payload[key] = str(Path(payload[key]).resolve())
    return payload


def library_digest(root: Path) -> str:
    """What the driver and every worker must agree on: the rule files' names and contents."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.yaml")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:12]


class RetriageWorker:
    """Body of a Ray actor: compiles the library once, then re-triages batch after batch."""

    def __init__(self, payload: dict[str, Any]) -> None:
        if payload.get("blob_url"):  # blobs in S3: the data dir is only scratch space on this node
            try:
                (Path(payload["data_dir"]) / "tmp").mkdir(parents=True, exist_ok=True)
            except OSError:
                payload = {**payload, "data_dir": tempfile.mkdtemp(prefix="logtriage-ray-")}
        init_worker(payload)  # as the service's scan workers: compile the library, open the blob store
        self.rules_dir = (Settings(**payload).rules_dir or default_rules_dir()).resolve()

    def info(self) -> dict[str, Any]:
        return {
            "library": f"{ping()} ({library_digest(self.rules_dir)})",
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def run(self, index: int, jobs: Sequence[RetriageJob]) -> tuple[int, list[Outcome]]:
        return index, run_batch(jobs)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[-1] if "Traceback" in text else text.splitlines()[0]


class RayRunner:
    """Runs batches on a pool of Ray actors; each keeps two batches queued so it never waits.

    Connects on enter (or reuses a connection the caller made with ``ray.init``) and disconnects
    on exit only when it connected itself.
    """

    IN_FLIGHT_PER_WORKER = 2

    def __init__(self, settings: Settings, options: RayOptions, *, max_workers: int | None = None) -> None:
        self.settings = settings
        self.options = options
        self.max_workers = max_workers
        self.ray = import_ray(local=options.address == "local")
        self.actors: list[Any] = []
        self._actor_cls: Any = None
        self._payload: dict[str, Any] = {}
        self.workers_info: list[dict[str, Any]] = []
        self._connected_here = False

    # -- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> RayRunner:
        from app.engine.pipeline.library import load_library

        # validate the library here first: a broken rule file fails with its own clear error
        library = load_library(self.settings.rules_dir)
        expected = f"{library.version} ({library_digest(library.root)})"
        self._connect()
        try:
            self._start_workers(expected)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _connect(self) -> None:
        self._connected_here = connect_ray(self.ray, self.options.address, num_cpus=self.options.workers)

    def _start_workers(self, expected_library: str) -> None:
        ray = self.ray
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        n = self.options.workers or cpus
        if self.max_workers is not None:
            n = min(n, self.max_workers)
        n = max(1, n)
        self._actor_cls = ray.remote(num_cpus=1, max_restarts=1, max_task_retries=1)(RetriageWorker)
        self._payload = ray_worker_payload(self.settings)
        self.actors = [self._new_actor() for _ in range(n)]
        try:
            self.workers_info = ray.get([a.info.remote() for a in self.actors])
        except ray.exceptions.RayError as exc:
            raise ServiceUnavailableError(f"Ray workers failed to start: {_first_line(exc)}") from None
        wrong = {w["library"] for w in self.workers_info} - {expected_library}
        if wrong:
            raise ServiceUnavailableError(
                f"Ray workers loaded rule library {', '.join(sorted(wrong))}, this host {expected_library}: "
                "install the same logtriage and rules on every node, or point LOGTRIAGE_RULES_DIR at a "
                "shared directory"
            )

    def _new_actor(self) -> Any:
        return self._actor_cls.remote(self._payload)

    def close(self) -> None:
        ray = self.ray
        for a in self.actors:
            try:
                ray.kill(a)
            except Exception as exc:  # already gone
                log.debug("ray.kill: %s", exc)
        self.actors = []
        if self._connected_here:
            self._connected_here = False
            ray.shutdown()

    def describe(self) -> str:
        hosts = Counter(w["host"] for w in self.workers_info)
        where = ", ".join(f"{n} on {h}" for h, n in hosts.items())
        return f"{len(self.actors)} Ray workers ({where})"

    # -- scheduling -------------------------------------------------------------------------------

    def __call__(self, batches: Iterator[Batch]) -> Iterator[tuple[int, list[Outcome]]]:
        """Yield (batch index, outcomes) as batches finish.

        When an actor dies (Ray has already restarted it once and retried), a replacement takes its
        place (at most twice as many replacements as workers) and each analysis of the batches it
        held gets one more try, alone on an actor: an analysis that kills its worker (a crash in
        native code, the OOM killer) costs only itself.
        """
        ray = self.ray
        slots: list[Any | None] = list(self.actors)  # None: dead and not replaced
        busy = [0] * len(slots)
        alone = [False] * len(slots)  # running a retried analysis, nothing else
        spare = max(4, 2 * len(slots))
        retries: deque[_Task] = deque()
        parts: dict[int, list[Outcome | None]] = {}
        pending: dict[Any, tuple[_Task, int, Any]] = {}

        def fill(slot: int) -> None:
            actor = slots[slot]
            while actor is not None and not alone[slot] and busy[slot] < self.IN_FLIGHT_PER_WORKER:
                if retries:
                    if busy[slot]:
                        return  # let it drain first
                    task = retries.popleft()
                    alone[slot] = True
                else:
                    batch = next(batches, None)
                    if batch is None:
                        return
                    task = _Task(batch.index, batch.jobs)
                pending[actor.run.remote(task.index, task.jobs)] = (task, slot, actor)
                busy[slot] += 1

        def finish(task: _Task, outcomes: list[Outcome]) -> Iterator[tuple[int, list[Outcome]]]:
            if task.part is None:
                yield task.index, outcomes
                return
            done = parts[task.index]
            done[task.part] = outcomes[0]
            if all(o is not None for o in done):
                del parts[task.index]
                yield task.index, [o for o in done if o is not None]

        for slot in range(len(slots)):
            fill(slot)
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            task, slot, actor = pending.pop(ref)
            if slots[slot] is actor:
                busy[slot] -= 1
                alone[slot] = False
            outcomes: list[Outcome] | None
            try:
                outcomes = ray.get(ref)[1]
            except ray.exceptions.RayError as exc:
                detail = f"Ray worker failed: {_first_line(exc)}"
                log.warning("batch %d: %s", task.index, detail)
                if isinstance(exc, ray.exceptions.RayActorError) and slots[slot] is actor:
                    replacement = self._new_actor() if spare > 0 else None
                    spare -= 1
                    slots[slot], busy[slot], alone[slot] = replacement, 0, False
                    if replacement is not None:
                        self.actors.append(replacement)
                if task.part is None:  # one more try for each of its analyses, one by one
                    parts[task.index] = [None] * len(task.jobs)
                    retries.extend(_Task(task.index, (job,), i) for i, job in enumerate(task.jobs))
                    outcomes = None
                else:
                    outcomes = [JobError("ServiceUnavailableError", detail)]
            if outcomes is not None:
                yield from finish(task, outcomes)
            for other in range(len(slots)):
                fill(other)
        # no worker left: what remains cannot run
        gone = JobError("ServiceUnavailableError", "no Ray worker left")
        for task in retries:
            yield from finish(task, [gone])
        for rest in batches:
            yield rest.index, [gone] * len(rest.jobs)


@dataclass(frozen=True)
class _Task:
    index: int  # the batch's
    jobs: tuple[RetriageJob, ...]
    part: int | None = None  # a retried analysis: its position in the batch
