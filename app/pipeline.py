"""The one place joining the engine and storage.

upload (spooled raw files) -> decompress (by magic) -> redact -> content-addressed zstd blob
                                                            \\-> plain work file -> triage -> persist

The CPU-bound part (decompress, redact, compress, scan) runs in scan worker processes
(``ScanPool``): each compiles the rule library once and reuses it. A hook's small log (held in
memory, ``inline_bytes`` once expanded) is the exception: it is analysed on the event loop,
which costs less than handing it to a process and back. Workers return plain data
(``ScanOutcome`` or ``JobError``); the server then commits the blobs and writes the database rows
together (``AnalysisService``), deleting a new blob again if the database write fails, so no
half-written analysis and no orphan blob is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import multiprocessing
import os
import shutil
import socket
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from sqlalchemy.orm import Session

from app.blobstore import BlobStore, PendingBlob, open_blob_store
from app.db import repo
from app.db.models import Analysis, AnalysisFile
from app.db.repo import FileRecord, JobMeta, RuleRecord, StoredBlob
from app.db.session import Database
from app.engine.ingest import (
    GZIP_MAGIC,
    ZSTD_MAGIC,
    ByteBudget,
    Source,
    expand_in_memory,
    open_source,
    rank_from_name,
)
from app.engine.library import Library, load_library
from app.engine.patches import ConfigView
from app.engine.redact import redact_stream, redact_text
from app.engine.scan import CompiledLibrary, split_points
from app.engine.triage import TriageOptions, default_cache_dir, triage
from app.errors import (
    InputError,
    InputTooLargeError,
    InternalError,
    LogtriageError,
    ServiceUnavailableError,
    UnsupportedMediaError,
    all_errors,
)
from app.settings import Settings

log = logging.getLogger("logtriage.pipeline")

MAX_CONFIG_BYTES = 1 << 20
WRITE_GROUP = 64  # most analyses one transaction stores
COMMIT_THREADS = 8  # blobs of a write group committed side by side
T = TypeVar("T")
R = TypeVar("R")


# --- data passed to and from scan workers (picklable) ------------------------------------------


@dataclass(frozen=True)
class InputFile:
    name: str  # what findings cite (the uploaded file name)
    path: str  # the spooled upload, as sent: plain, gzip or zstd
    data: bytes | None = None  # the upload itself when it was small: then `path` does not exist

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else Path(self.path).stat().st_size

    def read(self) -> bytes:
        return self.data if self.data is not None else Path(self.path).read_bytes()


@dataclass(frozen=True)
class ScanJob:
    files: tuple[InputFile, ...]
    config: InputFile | None = None
    framework: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class StoredInput:
    """A blob already in the store (re-triage reads the stored, redacted logs)."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class RetriageJob:
    files: tuple[StoredInput, ...]
    config: StoredInput | None = None
    framework: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class StoredFile:
    name: str
    blob: PendingBlob


@dataclass(frozen=True)
class ScanOutcome:
    analysis: dict[str, Any]  # the Analysis JSON contract
    library_version: str
    rules: tuple[RuleRecord, ...]
    files: tuple[StoredFile, ...] = ()
    config: StoredFile | None = None


@dataclass(frozen=True)
class JobError:
    """An error a job raised, as data (not every exception survives pickling)."""

    kind: str
    detail: str

    @classmethod
    def of(cls, exc: LogtriageError) -> JobError:
        return cls(type(exc).__name__, exc.detail)

    def to_exception(self) -> LogtriageError:
        for klass in all_errors():
            if klass.__name__ == self.kind:
                try:
                    return klass(self.detail)
                except TypeError:
                    break
        return InputError(self.detail)


# --- worker side --------------------------------------------------------------------------------


@dataclass
class _WorkerState:
    settings: Settings
    compiled: CompiledLibrary
    store: BlobStore


_STATE: _WorkerState | None = None


def build_compiled(settings: Settings, library: Library | None = None) -> CompiledLibrary:
    lib = library or load_library(settings.rules_dir)
    return CompiledLibrary(lib, engine=settings.engine, cache_dir=settings.cache_dir or default_cache_dir())


def worker_settings_payload(settings: Settings) -> dict[str, Any]:
    return settings.model_dump(mode="json", exclude={"token"})


def init_worker(payload: dict[str, Any]) -> None:
    """Scan-worker initializer: compile the library once for the life of the process."""
    global _STATE
    _STATE = local_state(Settings(**payload))
    freeze_startup_heap()


def freeze_startup_heap() -> None:
    """Put what a process built at start (rule library, compiled patterns, the app, database
    metadata: ~150k objects in a server process) out of the cyclic collector's reach.

    A full collection walks every tracked object. Under load it held a server process for
    65-110 ms about every two seconds, and those pauses were the whole latency tail (p99 at 50
    hooks 240-280 ms with them, 160-170 ms without). What is frozen lives as long as the process.
    """
    gc.collect()
    gc.freeze()


def init_local(settings: Settings, compiled: CompiledLibrary | None = None) -> None:
    """Run jobs in this process (the CLI's bulk re-triage, tests)."""
    global _STATE
    _STATE = local_state(settings, compiled=compiled)


def local_state(
    settings: Settings, *, compiled: CompiledLibrary | None = None, library: Library | None = None
) -> _WorkerState:
    """What `scan_upload` needs in this process (`library`: one already loaded here)."""
    return _WorkerState(settings, compiled or build_compiled(settings, library), open_blob_store(settings))


def _state() -> _WorkerState:
    if _STATE is None:
        raise RuntimeError("scan worker not initialised")
    return _STATE


def ping(_: object = None) -> str:
    """Warm-up call: returns the library version once the worker has compiled it."""
    return _state().compiled.library.version


_CONTROL = bytes(b for b in range(32) if b not in (8, 9, 10, 12, 13, 27))  # not in text logs


def _check_text(head: bytes, name: str) -> None:
    sample = head[:8192]
    if not sample:
        return
    control = len(sample) - len(sample.translate(None, _CONTROL))  # a byte loop cost 0.3 ms
    if control / len(sample) > 0.1:
        raise UnsupportedMediaError(
            f"{name}: binary content, not a text log; send plain text, gzip or zstd "
            "(archives such as .tar or .zip are not unpacked)"
        )


PARALLEL_REDACT_BYTES = 32 << 20  # below this, one process redacts (forking costs more)
IN_MEMORY_SCAN_BYTES = 8 << 20  # up to this, the redacted log is scanned from memory
COPY_CHUNK = 1 << 20


class _RangeFile(io.RawIOBase):
    """Bytes [start, end) of a file as a readable stream."""

    def __init__(self, path: Path, start: int, end: int) -> None:
        self._fh = path.open("rb", buffering=0)
        self._fh.seek(start)
        self._left = end - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buffer).cast("B")
        n = self._fh.readinto(view[: min(len(view), self._left)]) or 0
        self._left -= n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def _redact_range(task: tuple[str, int, int, str]) -> str:
    """Redact bytes [start, end) of a plain file (line-aligned) into `out`; runs in a fork."""
    path, start, end, out = task
    reader = io.BufferedReader(_RangeFile(Path(path), start, end), buffer_size=COPY_CHUNK)
    with reader as src, open(out, "wb") as dst:
        for chunk in redact_stream(src):
            dst.write(chunk)
    return out


def _decompressed(src: Source, budget: ByteBudget, tmp: Path) -> tuple[Path, bool]:
    """The upload as a plain file: itself when it is plain, else decompressed into `tmp`.

    Returns (path, is_temporary). The decompressed-size limit is enforced either way.
    """
    assert src.path is not None
    opened = open_source(src, budget=budget)
    try:
        if opened.compression is None:
            budget.take(src.path.stat().st_size, src.name)
            return src.path, False
        buf = bytearray(COPY_CHUNK)
        view = memoryview(buf)
        with tmp.open("wb") as out:
            while n := opened.reader.readinto(view):
                out.write(view[:n])
        return tmp, True
    finally:
        opened.close()


def _redact_to_blob(
    src: Source, store: BlobStore, work_path: Path, budget: ByteBudget, *, jobs: int = 1
) -> tuple[PendingBlob, bytes | None]:
    """Decompress, redact (in parallel for large logs) and store. The redacted text for the scan
    comes back as bytes when the log is small (`IN_MEMORY_SCAN_BYTES`), else in `work_path`."""
    plain_in, temporary = _decompressed(src, budget, work_path.with_suffix(".in"))
    parts: list[Path] = []
    try:
        with plain_in.open("rb") as fh:
            _check_text(fh.read(8192), src.name)
        size = plain_in.stat().st_size
        if size == 0:
            raise InputError(f"{src.name}: the log is empty")
        cores = os.cpu_count() or 1
        jobs = jobs if jobs > 0 else cores
        ranges = split_points(plain_in, jobs) if jobs > 1 and size >= PARALLEL_REDACT_BYTES else [(0, size)]
        tasks = [
            (str(plain_in), a, b, str(work_path.with_suffix(f".part{i}"))) for i, (a, b) in enumerate(ranges)
        ]
        if len(tasks) == 1:
            # a hook's log stays in memory for the scan: creating a file costs more than
            # scanning it (~0.4 ms per file); a bigger one goes to `work_path`
            with plain_in.open("rb") as fh:
                return _redact_one(fh, store, None if size <= IN_MEMORY_SCAN_BYTES else work_path)
        parts = [Path(t[3]) for t in tasks]
        ctx = multiprocessing.get_context("fork")  # scan workers are single-threaded
        with ProcessPoolExecutor(max_workers=len(tasks), mp_context=ctx) as pool:
            list(pool.map(_redact_range, tasks))
        buf = bytearray(COPY_CHUNK)
        view = memoryview(buf)
        with store.writer() as w, work_path.open("wb") as plain:
            for part in parts:
                with part.open("rb", buffering=0) as fh:
                    while n := fh.readinto(view):
                        data = bytes(view[:n])
                        w.write(data)
                        plain.write(data)
                part.unlink()
            return w.finish(), None
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
        if temporary:
            plain_in.unlink(missing_ok=True)


def _spooled(f: InputFile) -> Path:
    """The upload as a file. A small compressed upload arrives in memory and is written out:
    what it expands to is not bounded by its size, so it takes the file path."""
    path = Path(f.path)
    if f.data is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f.data)
    return path


def _redact_one(src: BinaryIO, store: BlobStore, plain_out: Path | None) -> tuple[PendingBlob, bytes | None]:
    """Redact one stream into a pending blob; the redacted text comes back as bytes, or goes to
    `plain_out` when given."""
    chunks: list[bytes] = []
    with (
        store.writer() as w,
        contextlib.nullcontext() if plain_out is None else plain_out.open("wb") as plain,
    ):
        for chunk in redact_stream(src):
            w.write(chunk)
            if plain is None:
                chunks.append(chunk)
            else:
                plain.write(chunk)
        return w.finish(), b"".join(chunks) if plain_out is None else None


def _redact_bytes(name: str, data: bytes, store: BlobStore, budget: ByteBudget) -> tuple[PendingBlob, bytes]:
    """`_redact_to_blob` for a small plain upload that arrived in memory."""
    _check_text(data[:8192], name)
    if not data:
        raise InputError(f"{name}: the log is empty")
    budget.take(len(data), name)
    blob, redacted = _redact_one(io.BytesIO(data), store, None)
    assert redacted is not None
    return blob, redacted


def _read_config(f: InputFile) -> str:
    if f.size > MAX_CONFIG_BYTES:
        raise InputTooLargeError(f"{f.name}: config file over {MAX_CONFIG_BYTES >> 20} MiB")
    return redact_text(f.read().decode("utf-8", errors="replace"))


def _rule_texts(compiled: CompiledLibrary, analysis: dict[str, Any]) -> tuple[RuleRecord, ...]:
    seen: dict[str, RuleRecord] = {}
    for f in analysis.get("findings") or []:
        rid = f["rule_id"]
        lr = compiled.library.get(rid)
        if lr is None or rid in seen:
            continue
        r = lr.rule
        seen[rid] = RuleRecord(rid, r.version, lr.text, r.failure_class, r.title)
    return tuple(seen.values())


def _options(st: _WorkerState, framework: str | None, exit_code: int | None) -> TriageOptions:
    # every log a worker scans is redacted: an upload by `_redact_to_blob`, a stored one was
    return TriageOptions(
        jobs=st.settings.scan_jobs, max_bytes=0, framework=framework, exit_code=exit_code, input_redacted=True
    )


def scan_upload(job: ScanJob, state: _WorkerState | None = None) -> ScanOutcome | JobError:
    """Worker: decompress, redact and store each upload as a pending blob, then triage it."""
    st = state or _state()
    budget = ByteBudget(st.settings.max_bytes)
    pending: list[PendingBlob] = []
    work: list[Path] = []
    try:
        stored: list[StoredFile] = []
        sources: list[Source] = []
        for f in job.files:
            work_path = Path(f.path + ".plain")
            work.append(work_path)
            redacted: bytes | None
            if f.data is not None and not f.data.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
                blob, redacted = _redact_bytes(f.name, f.data, st.store, budget)
            else:
                blob, redacted = _redact_to_blob(
                    Source(name=f.name, path=_spooled(f)),
                    st.store,
                    work_path,
                    budget,
                    jobs=st.settings.scan_jobs,
                )
            pending.append(blob)
            stored.append(StoredFile(f.name, blob))
            rank = rank_from_name(f.name)
            if redacted is None:
                sources.append(Source(name=f.name, path=work_path, rank_hint=rank))
            else:
                sources.append(Source(name=f.name, stream=io.BytesIO(redacted), rank_hint=rank))
        config_view = None
        config_stored = None
        if job.config is not None:
            text = _read_config(job.config)
            config_view = ConfigView.from_text(text, name=job.config.name)
            with st.store.writer() as w:
                w.write(text.encode("utf-8"))
                cblob = w.finish()
            pending.append(cblob)
            config_stored = StoredFile(job.config.name, cblob)
        analysis = triage(
            sources=sources,
            compiled=st.compiled,
            options=_options(st, job.framework, job.exit_code),
            config=config_view,
        )
        data = analysis.model_dump(mode="json")
        return ScanOutcome(
            analysis=data,
            library_version=st.compiled.library.version,
            rules=_rule_texts(st.compiled, data),
            files=tuple(stored),
            config=config_stored,
        )
    except LogtriageError as exc:
        for p in pending:
            st.store.discard(p)
        return JobError.of(exc)
    except BaseException:
        for p in pending:
            st.store.discard(p)
        raise
    finally:
        for wp in work:
            wp.unlink(missing_ok=True)


def retriage_stored(job: RetriageJob) -> ScanOutcome | JobError:
    """Worker: triage stored (redacted) logs again with this process's library."""
    st = _state()
    work_dir = st.store.tmp_dir / f"retriage-{os.getpid()}-{os.urandom(6).hex()}"
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        sources: list[Source] = []
        for i, f in enumerate(job.files):
            path = work_dir / f"{i}.log"
            with st.store.open(f.sha256) as src, path.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            sources.append(Source(name=f.name, path=path, rank_hint=rank_from_name(f.name)))
        config_view = None
        if job.config is not None:
            with st.store.open(job.config.sha256) as src:
                text = src.read().decode("utf-8", errors="replace")
            config_view = ConfigView.from_text(text, name=job.config.name)
        analysis = triage(
            sources=sources,
            compiled=st.compiled,
            options=_options(st, job.framework, job.exit_code),
            config=config_view,
        )
        data = analysis.model_dump(mode="json")
        return ScanOutcome(
            analysis=data, library_version=st.compiled.library.version, rules=_rule_texts(st.compiled, data)
        )
    except LogtriageError as exc:
        return JobError.of(exc)
    except FileNotFoundError as exc:
        return JobError.of(InputError(f"stored log is missing from the blob store ({exc.filename})"))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


# --- server side --------------------------------------------------------------------------------


BULK_NICE = 10  # CFS gives a nice-10 process about a tenth of a core when the core is contended


def _lower_priority(payload: dict[str, Any]) -> None:
    """Bulk-lane initializer: a low CPU priority, inherited by the redact/scan processes it forks."""
    os.nice(BULK_NICE)
    init_worker(payload)


class ScanPool:
    """Where an upload is analysed: three lanes, chosen by its size.

    - inline: a hook's small log (held in memory, at most `settings.inline_bytes` once
      expanded) is analysed in this process, on the event loop. Handing 200 KB to a process and
      back cost more CPU than analysing it (~2 ms): pickling, the pool's threads, a context
      switch each way. The loop is held ~10 ms by 1 MiB of ordinary log, up to ~0.2 s by 1 MiB
      made entirely of error lines.
    - pool: scan worker processes (spawned: no state is shared with the server's threads), for
      bigger uploads (or ones that expand past the limit), which must not hold the event loop.
    - bulk: uploads of `settings.bulk_bytes` or more go to one extra worker at low CPU priority;
      a multi-GB log can take both cores for tens of seconds, and it then uses the cores the
      small analyses leave idle, so they keep their latency.
    """

    def __init__(
        self, settings: Settings, *, workers: int | None = None, library: Library | None = None
    ) -> None:
        self.settings = settings
        self.workers = workers or settings.analysis_workers
        self._library = library  # the server's, loaded already: the inline lane compiles it
        self._pool: ProcessPoolExecutor | None = None
        self._bulk: ProcessPoolExecutor | None = None
        self._local: _WorkerState | None = None
        self.ready = asyncio.Event()
        self.library_version: str | None = None
        self.failure: str | None = None

    def _ensure(self, bulk: bool) -> ProcessPoolExecutor:
        pool = self._bulk if bulk else self._pool
        if pool is None:
            pool = ProcessPoolExecutor(
                max_workers=1 if bulk else self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_lower_priority if bulk else init_worker,
                initargs=(worker_settings_payload(self.settings),),
            )
            if bulk:
                self._bulk = pool
            else:
                self._pool = pool
        return pool

    def is_bulk(self, job: ScanJob) -> bool:
        limit = self.settings.bulk_bytes
        return limit > 0 and sum(f.size for f in job.files) >= limit

    def inline_job(self, job: ScanJob) -> ScanJob | None:
        """The job as plain logs in memory if it is small enough to analyse on the event loop
        (`inline_bytes` in all, once decompressed), else None.

        A hook's log usually arrives gzipped (`logtriage submit` does): one held in memory is
        expanded here, with the ingest code the workers use, but never past the limit, since
        what it expands to is not bounded by its size. Corrupt data is left to a worker, which
        reports it as it always does."""
        if self._local is None or (job.config is not None and job.config.data is None):
            return None
        left = self.settings.inline_bytes - (job.config.size if job.config else 0)
        files: list[InputFile] = []
        for f in job.files:
            if f.data is None or left < 0:
                return None
            plain = expand_in_memory(f.data, limit=left)
            if plain is None:
                return None
            left -= len(plain)
            files.append(f if plain is f.data else InputFile(f.name, f.path, data=plain))
        return ScanJob(tuple(files), job.config, job.framework, job.exit_code)

    async def scan(self, job: ScanJob) -> ScanOutcome | JobError:
        """Analyse an upload in its lane."""
        inline = self.inline_job(job)
        if inline is not None:
            return scan_upload(inline, self._local)
        return await self.call(scan_upload, job, bulk=self.is_bulk(job))

    async def call(self, fn: Callable[[T], R], arg: T, *, bulk: bool = False) -> R:
        pool = self._ensure(bulk)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, fn, arg)
        except BrokenProcessPool as exc:
            if self._pool is pool:
                self._pool = None
            if self._bulk is pool:
                self._bulk = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise ServiceUnavailableError(
                f"a scan worker process died ({exc}); retry the request (see the server log if it persists)"
            ) from None

    async def warmup(self) -> None:
        try:
            versions = await asyncio.gather(*(self.call(ping, None) for _ in range(self.workers)))
            if self.settings.inline_bytes > 0 and self._local is None:
                # the workers compiled the library first: this process reads it from their cache
                self._local = await asyncio.to_thread(local_state, self.settings, library=self._library)
            self.library_version = versions[0]
            self.failure = None
            self.ready.set()
        except Exception as exc:  # readiness stays false; /readyz says why
            self.failure = getattr(exc, "detail", None) or f"{type(exc).__name__}: {exc}"
            log.error("scan workers failed to start: %s", self.failure)

    def shutdown(self) -> None:
        for pool in (self._pool, self._bulk):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._pool = self._bulk = None


def runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def spool_path_for(data_dir: Path) -> Path:
    """A new request's staging directory: created by the first file written to it (a small
    upload never is), removed with `remove_tree` either way."""
    return data_dir / "tmp" / f"up-{os.getpid()}-{os.urandom(6).hex()}"


def clean_stale_tmp(data_dir: Path) -> int:
    """Remove staging files of server processes that are gone (safe while other servers run)."""
    tmp = data_dir / "tmp"
    if not tmp.is_dir():
        return 0
    removed = 0
    for p in tmp.iterdir():
        parts = p.name.split("-")
        pid = next((int(x) for x in parts[1:2] if x.isdigit()), None)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def unexpected(exc: BaseException) -> LogtriageError:
    if isinstance(exc, LogtriageError):
        return exc
    return InternalError(f"unexpected {type(exc).__name__}; the server log has the details")


def remove_tree(path: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(path, ignore_errors=True)


def _file_record(f: StoredFile) -> FileRecord:
    return FileRecord(f.name, StoredBlob(f.blob.sha256, f.blob.size, f.blob.stored_size))


def completion_of(analysis_id: str, outcome: ScanOutcome, draft: repo.Draft | None = None) -> repo.Completion:
    return repo.Completion(
        analysis_id=analysis_id,
        draft=draft,
        analysis=outcome.analysis,
        library_version=outcome.library_version,
        files=[_file_record(f) for f in outcome.files],
        config=_file_record(outcome.config) if outcome.config else None,
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
        self._tasks: set[asyncio.Task[Completed]] = set()
        self._queue: deque[tuple[str, ScanOutcome, asyncio.Future[Completed]]] = deque()
        self._writer: asyncio.Task[None] | None = None
        # analyses with no row yet; popped by whoever writes the row first (writer or register)
        self._drafts: dict[str, repo.Draft] = {}
        self._registering: dict[str, asyncio.Future[None]] = {}
        self._storing: dict[str, asyncio.Future[Completed]] = {}  # drafts the writer is inserting
        self._committer = ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="blob-commit")

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
    ) -> Started:
        if idempotency_key is None:
            draft = repo.Draft.new(meta=meta, token_id=token_id, runner=self.runner)
            self._drafts[draft.analysis_id] = draft
            return self._launch(draft.analysis_id, job, spool)
        try:
            analysis_id, replayed = await asyncio.to_thread(
                self._begin, meta, token_id, idempotency_scope, idempotency_key, request_digest
            )
        except BaseException:
            remove_tree(spool)
            raise
        if replayed:
            remove_tree(spool)
            return Started(analysis_id, None, replayed=True)
        return self._launch(analysis_id, job, spool)

    def _launch(self, analysis_id: str, job: ScanJob, spool: Path) -> Started:
        task = asyncio.create_task(self._process(analysis_id, job, spool), name=f"analysis-{analysis_id}")
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return Started(analysis_id, task)

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
    ) -> tuple[str, bool]:
        from app.errors import IdempotencyKeyReusedError

        with self.db.write() as s:
            existing = repo.find_idempotent(s, scope=scope, key=key)
            if existing is not None:
                if existing.request_digest != digest:
                    raise IdempotencyKeyReusedError(
                        f"Idempotency-Key {key!r} was used for a different request (analysis "
                        f"{existing.id}); use a new key for a new upload"
                    )
                return existing.id, True
            row = repo.create_pending(
                s,
                meta=meta,
                token_id=token_id,
                runner=self.runner,
                idempotency_scope=scope,
                idempotency_key=key,
                request_digest=digest,
            )
            return row.id, False

    async def _process(self, analysis_id: str, job: ScanJob, spool: Path) -> Completed:
        try:
            result = await self.pool.scan(job)
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
                        items=[completion_of(*batch[i]) for i in group],
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
