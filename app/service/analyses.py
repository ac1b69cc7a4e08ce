"""The async analysis service: scan in a lane, then blobs and rows committed together.

Analyses that finish while a transaction runs are written together (write groups). Web
pages, the REST API and the Slack bot all start analyses through `AnalysisService`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.blobstore import BlobStore
from app.db import repo
from app.db.models import Analysis, AnalysisFile
from app.db.repo import FileRecord, JobMeta, StoredBlob
from app.db.session import Database
from app.errors import (
    InternalError,
    LogtriageError,
    ServiceUnavailableError,
    disk_full,
    is_disk_full,
)
from app.service.admission import Admission, Ticket
from app.service.jobs import InputFile, JobError, RetriageJob, ScanJob, ScanOutcome, StoredFile, StoredInput
from app.service.pool import ScanPool
from app.service.spool import claim, release, remove_tree, runner_id
from app.service.worker import retriage_stored
from app.settings import Settings

log = logging.getLogger("logtriage.service")

WRITE_GROUP = 64  # most analyses one transaction stores
COMMIT_THREADS = 8  # blobs of a write group committed side by side


def commit_blobs(store: BlobStore, outcome: ScanOutcome) -> list[str]:
    """Move the outcome's pending blobs into place; return the ones that were new."""
    new: list[str] = []
    pending = [f.blob for f in outcome.files] + ([outcome.config.blob] if outcome.config else [])
    try:
        for blob in pending:
            if store.commit(blob):
                new.append(blob.sha256)
    except BaseException:
        for blob in pending:
            store.discard(blob)
        for sha in new:
            store.delete(sha)
        raise
    return new


def _blob_shas(outcome: ScanOutcome) -> list[str]:
    return [f.blob.sha256 for f in outcome.files] + ([outcome.config.blob.sha256] if outcome.config else [])


def unexpected(exc: BaseException) -> LogtriageError:
    if isinstance(exc, LogtriageError):
        return exc
    if is_disk_full(exc):  # the spool, a pending blob, its commit or the database's file
        return disk_full(exc)
    return InternalError(f"unexpected {type(exc).__name__}; the server log has the details")


def _file_record(f: StoredFile, new: Collection[str] | None = None) -> FileRecord:
    # the frame index describes the file this upload wrote; when the store already had the blob
    # (commit said not new) its stored bytes may be framed otherwise, or not at all: no index
    frames = f.blob.frames if new is None or f.blob.sha256 in new else None
    return FileRecord(f.name, StoredBlob(f.blob.sha256, f.blob.size, f.blob.stored_size, frames))


def completion_of(
    analysis_id: str,
    outcome: ScanOutcome,
    draft: repo.Draft | None = None,
    *,
    new: Collection[str] | None = None,
) -> repo.Completion:
    """`new`: the blobs this outcome's commit stored (None: all of them)."""
    return repo.Completion(
        analysis_id=analysis_id,
        draft=draft,
        analysis=outcome.analysis,
        library_version=outcome.library_version,
        files=[_file_record(f, new) for f in outcome.files],
        config=_file_record(outcome.config, new) if outcome.config else None,
        rules=outcome.rules,
    )


def complete_from_outcome(session: Session, *, analysis_id: str, outcome: ScanOutcome) -> Analysis:
    """Store a scan outcome as the result of a pending analysis (its blobs already committed)."""
    return repo.complete_analyses(session, items=[completion_of(analysis_id, outcome)])[0][0]


def _completed(row: Analysis, standing: repo.Standing, outcome: ScanOutcome) -> Completed:
    files = [
        AnalysisFile(
            analysis_id=row.id, position=i, name=f.name[:255], blob_sha256=f.blob.sha256, size=f.blob.size
        )
        for i, f in enumerate(outcome.files)
    ]
    return Completed(row=row, files=files, standing=standing)


def problem_of(exc: LogtriageError) -> dict[str, Any]:
    return {
        "type": f"/problems/{exc.slug}",
        "title": exc.title,
        "status": exc.http_status,
        "detail": exc.detail,
    }


@dataclass(frozen=True)
class Completed:
    """A just-stored analysis with everything its API resource shows (no second read needed)."""

    row: Analysis  # detached, fully loaded
    files: list[AnalysisFile]
    standing: repo.Standing


@dataclass(frozen=True)
class Started:
    analysis_id: str
    task: asyncio.Task[Completed] | None  # None when an idempotent replay found an earlier request
    replayed: bool = False
    # admitted to the backlog, not to a scan worker: its turn may be a while
    ticket: Ticket | None = None
    # what its pending row says, when this request wrote it new: a 202 is answered from it
    # without reading the row back (a burst's 200 answers are 200 reads fewer)
    draft: repo.Draft | None = None

    @property
    def queued(self) -> bool:
        return self.ticket is not None and not self.ticket.running


def in_memory(job: ScanJob) -> bool:
    """Whether the whole upload is held in memory (nothing of it spooled to disk)."""
    return all(f.data is not None for f in job.files) and (job.config is None or job.config.data is not None)


def held_in_memory(job: ScanJob) -> int:
    """Bytes of the upload the process holds while it waits (bodies over 1 MiB wait on disk)."""
    return sum(len(f.data) for f in job.files if f.data is not None) + (
        len(job.config.data) if job.config is not None and job.config.data is not None else 0
    )


def spilled(job: ScanJob, spool: Path) -> ScanJob:
    """The upload with its in-memory bodies written into its spool (each where a body over
    1 MiB would have been, or under a name of its own if its place is elsewhere): it waits for
    its turn on disk and is removed with the spool, like any spooled upload. A full disk is the
    usual 507, nothing admitted."""
    spilled_n = 0

    def to_disk(f: InputFile) -> InputFile:
        nonlocal spilled_n
        if f.data is None:
            return f
        path = Path(f.path)
        if not path.is_relative_to(spool):
            spilled_n += 1
            path = spool / f"spilled-{spilled_n}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f.data)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(exc) from exc
            raise
        return dataclasses.replace(f, path=str(path), data=None)

    return dataclasses.replace(
        job,
        files=tuple(to_disk(f) for f in job.files),
        config=to_disk(job.config) if job.config is not None else None,
    )


class AnalysisService:
    """Runs analyses for the API: scan in a worker -> blobs + rows committed together.

    A hook's upload gets no row until it is stored, done, in its write group: one transaction
    per upload fewer (a tenth of a web process's CPU under load). Its row is inserted early,
    as `pending`, only when someone may look before it is done: the request stops waiting
    (`register`, before a 202) or it reserves an idempotency key (`_begin`).
    """

    def __init__(self, *, settings: Settings, db: Database, store: BlobStore, pool: ScanPool) -> None:
        self.settings = settings
        self.db = db
        self.store = store
        self.pool = pool
        self.runner = runner_id()
        # told (on the event loop) when a stored analysis puts hosts over the exclusion threshold
        self.on_hosts_flagged: Callable[[str, list[repo.SuspectHost]], None] | None = None
        self._tasks: set[asyncio.Task[Completed]] = set()
        self._queue: deque[tuple[str, ScanOutcome, asyncio.Future[Completed]]] = deque()
        self._writer: asyncio.Task[None] | None = None
        # analyses with no row yet; popped by whoever writes the row first (writer or register)
        self._drafts: dict[str, repo.Draft] = {}
        self._registering: dict[str, asyncio.Future[None]] = {}
        self._storing: dict[str, asyncio.Future[Completed]] = {}  # drafts the writer is inserting
        self._unneeded_scans: set[asyncio.Future[ScanOutcome | JobError]] = set()  # see `_unneeded`
        self._committer = ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="blob-commit")
        self.admission = Admission(
            slots=pool.workers,
            backlog=settings.analysis_backlog,
            backlog_bytes=settings.analysis_backlog_bytes,
            client_share=settings.client_share,
        )
        # the bulk lane's one worker has its own line: a 1 GB log never takes a hook's turn
        self.bulk_admission = Admission(
            slots=1,
            backlog=max(1, settings.analysis_backlog // 16),
            backlog_bytes=0,
            client_share=settings.client_share,
        )

    # -- new analyses ---------------------------------------------------------------------------

    async def start(
        self,
        *,
        job: ScanJob,
        spool: Path,
        meta: JobMeta,
        token_id: int | None,
        idempotency_scope: str,
        idempotency_key: str | None,
        request_digest: str,
        client: str,
    ) -> Started:
        """Admit the upload (or refuse it, 503/429, having stored nothing) and start it."""
        try:
            admission = self.bulk_admission if self.pool.is_bulk(job) else self.admission
            memory = held_in_memory(job)
            if admission.spills(memory):
                spilling = asyncio.ensure_future(asyncio.to_thread(spilled, job, spool))
                # a request cancelled mid-write removes its spool below; the write's thread goes
                # on, so the spool is removed again once it is done
                spilling.add_done_callback(lambda f: f.cancelled() or f.exception())
                try:
                    job = await asyncio.shield(spilling)
                except BaseException:
                    spilling.add_done_callback(lambda _f: remove_tree(spool))
                    raise
                memory = 0
            ticket = admission.admit(client=client, memory=memory)
        except BaseException:
            remove_tree(spool)
            raise
        if idempotency_key is None:
            draft = repo.Draft.new(meta=meta, token_id=token_id, runner=self.runner)
            self._drafts[draft.analysis_id] = draft
            return self._launch(draft.analysis_id, job, spool, ticket, draft=draft)
        # an upload held in memory (a hook's, up to 1 MiB) is scanned while its key is reserved:
        # the reservation's transaction (a commit, 4-8 ms) no longer comes before the scan; a
        # replay or a refused key wastes that one small scan, whose staged blobs are discarded
        early = asyncio.ensure_future(self._scan(job, ticket)) if in_memory(job) else None
        try:
            begun: tuple[str, bool, repo.Draft | None] = await asyncio.to_thread(
                self._begin, meta, token_id, idempotency_scope, idempotency_key, request_digest
            )
            analysis_id, replayed, new_row = begun
        except BaseException:
            self._unneeded(early, ticket)
            remove_tree(spool)
            raise
        if replayed:
            self._unneeded(early, ticket)
            remove_tree(spool)
            return Started(analysis_id, None, replayed=True)
        return self._launch(analysis_id, job, spool, ticket, early, draft=new_row)

    async def _scan(self, job: ScanJob, ticket: Ticket) -> ScanOutcome | JobError:
        try:
            await ticket.wait_turn()
            return await self.pool.scan(job)
        finally:
            ticket.release()  # the scan worker is free: the next upload's turn

    def _unneeded(self, scan: asyncio.Future[ScanOutcome | JobError] | None, ticket: Ticket) -> None:
        """Drop a scan started ahead of its key's reservation: its staged blobs go once it ends."""
        if scan is None:
            ticket.release()
            return
        if not ticket.running:
            scan.cancel()  # still waiting for its turn: no worker has it
            ticket.release()  # (a task cancelled before its first step never runs its `finally`)
        if not scan.done():
            self._unneeded_scans.add(scan)
        scan.add_done_callback(self._discard_outcome)

    def _discard_outcome(self, scan: asyncio.Future[ScanOutcome | JobError]) -> None:
        self._unneeded_scans.discard(scan)
        if scan.cancelled() or scan.exception() is not None:
            return  # a failed scan staged nothing (it discards its own blobs)
        outcome = scan.result()
        if isinstance(outcome, ScanOutcome):
            for blob in [f.blob for f in outcome.files] + ([outcome.config.blob] if outcome.config else []):
                self.store.discard(blob)

    def _launch(
        self,
        analysis_id: str,
        job: ScanJob,
        spool: Path,
        ticket: Ticket,
        scan: asyncio.Future[ScanOutcome | JobError] | None = None,
        *,
        draft: repo.Draft | None = None,
    ) -> Started:
        task = asyncio.create_task(
            self._process(analysis_id, job, spool, ticket, scan), name=f"analysis-{analysis_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return Started(analysis_id, task, ticket=ticket, draft=draft)

    async def register(self, analysis_id: str) -> bool:
        """Make sure the analysis has a row before its id is handed out to poll: a pending one,
        unless the writer is storing it right now; then this waits for that and returns True
        (the analysis' task finishes at once)."""
        draft = self._drafts.pop(analysis_id, None)
        if draft is None:
            storing = self._storing.get(analysis_id)
            if storing is not None:
                await asyncio.wait({storing})
            return storing is not None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._registering[analysis_id] = done
        try:
            await asyncio.to_thread(self._insert_pending, draft)
        except BaseException:
            self._drafts[analysis_id] = draft  # no row after all: the writer inserts it
            raise
        finally:
            del self._registering[analysis_id]
            done.set_result(None)
        return False

    def _insert_pending(self, draft: repo.Draft) -> None:
        with self.db.write() as s:
            repo.insert_pending(s, draft=draft)

    async def _claim(self, analysis_id: str) -> repo.Draft | None:
        """Before an analysis' row is written: its draft when it has no row yet (the caller then
        inserts it), else None once a concurrent `register` has committed its row."""
        draft = self._drafts.pop(analysis_id, None)
        if draft is None and (registering := self._registering.get(analysis_id)) is not None:
            await registering
        return draft

    def _forget(self, task: asyncio.Task[Completed]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: failures are stored on the analysis

    def _begin(
        self,
        meta: JobMeta,
        token_id: int | None,
        scope: str,
        key: str,
        digest: str,
    ) -> tuple[str, bool, repo.Draft | None]:
        """(id, replayed, the new row's draft): a retryable failure run again has no draft
        (its row holds more than a new one's)."""
        from app.errors import ConflictError, IdempotencyKeyReusedError

        with self.db.write() as s:
            draft = repo.Draft.new(meta=meta, token_id=token_id, runner=self.runner)
            if repo.reserve_key(s, draft=draft, scope=scope, key=key, request_digest=digest):
                return draft.analysis_id, False, draft
            existing = repo.find_idempotent(s, scope=scope, key=key)
            if existing is None:  # the row that held the key was deleted since
                raise ConflictError(
                    "a request with this Idempotency-Key is being processed right now; retry in a moment"
                )
            if existing.request_digest != digest:
                raise IdempotencyKeyReusedError(
                    f"Idempotency-Key {key!r} was used for a different request (analysis "
                    f"{existing.id}); use a new key for a new upload"
                )
            if repo.is_retryable_failure(existing) and repo.restart_failed(
                s, analysis_id=existing.id, runner=self.runner
            ):
                log.info(
                    "analysis %s failed retryably (%s); running it again",
                    existing.id,
                    (existing.error or {}).get("title"),
                )
                return existing.id, False, None
            return existing.id, True, None

    async def _process(
        self,
        analysis_id: str,
        job: ScanJob,
        spool: Path,
        ticket: Ticket,
        scan: asyncio.Future[ScanOutcome | JobError] | None = None,
    ) -> Completed:
        try:
            result = await (scan if scan is not None else self._scan(job, ticket))
            if isinstance(result, JobError):
                raise result.to_exception()
            return await self._store(analysis_id, result)
        except asyncio.CancelledError:
            await self._fail(analysis_id, ServiceUnavailableError("the server shut down"))
            raise
        except BaseException as exc:
            err = unexpected(exc)
            if err is not exc:
                log.error("analysis %s failed", analysis_id, exc_info=exc)
            await self._fail(analysis_id, err)
            raise err from None
        finally:
            remove_tree(spool)

    async def _store(self, analysis_id: str, outcome: ScanOutcome) -> Completed:
        """Queue a scan outcome for the writer; resolves once it is committed."""
        done: asyncio.Future[Completed] = asyncio.get_running_loop().create_future()
        self._queue.append((analysis_id, outcome, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued(), name="analysis-writer")
        return await done

    async def _write_queued(self) -> None:
        """Write what queued up while the previous group was being written, as one group.

        Under load, dozens of uploads finish while one transaction runs; storing them together
        costs one statement per table instead of one set per upload, and the recurrence counters
        they all update are locked once. An idle server writes each upload at once (a group of 1).
        """
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), WRITE_GROUP))]
            try:
                items: list[tuple[str, ScanOutcome, repo.Draft | None]] = []
                for a, outcome, fut in batch:
                    draft = await self._claim(a)
                    if draft is not None:
                        self._storing[a] = fut  # at once: `register` must see it has no row yet
                    items.append((a, outcome, draft))
                try:
                    results = await asyncio.to_thread(self._persist_batch, items)
                finally:
                    for a, _, _ in batch:
                        self._storing.pop(a, None)
            except BaseException as exc:  # shutdown, or a bug: no request may wait forever
                left = batch + list(self._queue)
                self._queue.clear()
                err = exc if isinstance(exc, Exception) else ServiceUnavailableError("the server shut down")
                for *_, fut in left:
                    if not fut.done():
                        fut.set_exception(err)
                if not isinstance(exc, Exception):
                    raise
                log.error("the analysis writer failed; %d requests got the error", len(left), exc_info=exc)
                return
            for (_, _, fut), res in zip(batch, results, strict=True):
                if fut.done():  # its request was cancelled
                    continue
                if isinstance(res, Completed):
                    fut.set_result(res)
                else:
                    fut.set_exception(res)
            for res in results:
                if isinstance(res, Completed) and self.on_hosts_flagged is not None:
                    crossed = [
                        s
                        for s in res.standing.suspects
                        if s.jobs == self.settings.suspect_min_jobs and s.latest_analysis_id == res.row.id
                    ]
                    if crossed:  # this analysis put them over the threshold: said once, here
                        self.on_hosts_flagged(res.row.id, crossed)

    def _persist_batch(
        self, batch: list[tuple[str, ScanOutcome, repo.Draft | None]]
    ) -> list[Completed | Exception]:
        """Commit the blobs, then store the group in one transaction; if that fails, store each
        on its own, so one bad upload fails alone. A failed upload's new blobs are deleted."""
        results: list[Completed | Exception | None] = [None] * len(batch)
        new: list[list[str]] = [[] for _ in batch]
        ready: list[int] = []
        # side by side: each commit waits for the disk (fsyncs), and the filesystem's journal
        # takes concurrent ones in one go
        claims = claim(self.settings.data_dir, [b for _, o, _ in batch for b in _blob_shas(o)])
        try:
            return self._persist_claimed(batch, results, new, ready)
        finally:
            release(claims)  # the rows are committed (or the blobs deleted): nothing left to guard

    def _persist_claimed(
        self,
        batch: list[tuple[str, ScanOutcome, repo.Draft | None]],
        results: list[Completed | Exception | None],
        new: list[list[str]],
        ready: list[int],
    ) -> list[Completed | Exception]:
        commits = [self._committer.submit(commit_blobs, self.store, outcome) for _, outcome, _ in batch]
        for i, fut in enumerate(commits):
            try:
                new[i] = fut.result()
                ready.append(i)
            except Exception as exc:
                results[i] = exc
        groups = [ready] if len(ready) > 1 else []
        groups += [[i] for i in ready]  # the fallback, and the only try of a group of one
        for group in groups:
            if all(results[i] is not None for i in group):
                continue
            try:
                with self.db.write() as s:
                    stored = repo.complete_analyses(
                        s,
                        items=[completion_of(*batch[i], new=new[i]) for i in group],
                        recurrence_days=self.settings.recurrence_days,
                        suspect_min_jobs=self.settings.suspect_min_jobs,
                    )
            except Exception as exc:
                if len(group) == 1:
                    results[group[0]] = exc
                else:
                    log.warning("a write group of %d failed (%s); storing each alone", len(group), exc)
                continue
            for i, (row, standing) in zip(group, stored, strict=True):
                results[i] = _completed(row, standing, batch[i][1])
        out: list[Completed | Exception] = []
        for i, res in enumerate(results):
            if not isinstance(res, Completed):
                self._drop_new_blobs(new[i])
            out.append(res if res is not None else InternalError("analysis was not stored"))
        return out

    def _drop_new_blobs(self, shas: list[str]) -> None:
        for sha in shas:
            try:
                with self.db.read() as s:
                    referenced = repo.blob_referenced(s, sha256=sha)
            except Exception:
                referenced = False
            if not referenced:
                self.store.delete(sha)

    async def _fail(self, analysis_id: str, err: LogtriageError) -> None:
        """Store the failure on the analysis' row; one with no row yet is dropped (its request
        is waiting and gets the error)."""
        if await self._claim(analysis_id) is not None:
            return

        def _store() -> None:
            try:
                with self.db.write() as s:
                    repo.fail_analysis(s, analysis_id=analysis_id, problem=problem_of(err))
            except Exception:
                log.exception("cannot mark analysis %s failed", analysis_id)

        await asyncio.to_thread(_store)

    async def discard(self, analysis_id: str) -> None:
        """Remove an analysis whose synchronous request failed (the client got the error)."""
        if await self._claim(analysis_id) is not None:
            return

        def _delete() -> None:
            with self.db.write() as s:
                repo.delete_analysis(s, analysis_id=analysis_id)

        await asyncio.to_thread(_delete)

    # -- re-triage ------------------------------------------------------------------------------

    async def retriage(self, analysis_id: str) -> tuple[str, dict[str, Any]]:
        job = await asyncio.to_thread(load_retriage_job, self.db, analysis_id)
        site = await self.pool.site_rules()
        if site is not None:
            job = dataclasses.replace(job, site=site)
        result = await self.pool.call(retriage_stored, job)
        if isinstance(result, JobError):
            raise result.to_exception()

        def _apply() -> tuple[str, dict[str, Any]]:
            with self.db.write() as s:
                row, changes = repo.apply_retriage(
                    s,
                    analysis_id=analysis_id.upper(),
                    analysis=result.analysis,
                    library_version=result.library_version,
                    rules=result.rules,
                )
                return row.id, changes

        return await asyncio.to_thread(_apply)

    # -- shutdown -------------------------------------------------------------------------------

    async def drain(self, timeout: float) -> None:
        """Let running analyses finish (cancel what is left after `timeout`), then stop."""
        tasks = list(self._tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        self._committer.shutdown(wait=False)


def load_retriage_job(db: Database, analysis_id: str) -> RetriageJob:
    """What a worker needs to re-triage a stored analysis (the API's single re-triage)."""
    with db.read() as s:
        return retriage_job_of(repo.get_analysis(s, analysis_id=analysis_id, full=True))


def retriage_job_of(row: Analysis) -> RetriageJob:
    """A stored analysis as a re-triage job: its blobs and job facts (shared with bulk re-triage)."""
    from app.errors import AnalysisNotReadyError

    if row.status != "done":
        raise AnalysisNotReadyError(f"analysis {row.id} is {row.status}; only finished analyses re-run")
    files = tuple(StoredInput(f.name, f.blob_sha256, f.size) for f in row.files)
    config = StoredInput(row.config_name or "config", row.config_sha256, 0) if row.config_sha256 else None
    return RetriageJob(files=files, config=config, framework=row.framework, exit_code=row.exit_code)
