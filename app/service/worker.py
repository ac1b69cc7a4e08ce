"""Scan-worker functions: decompress, redact, store as pending blobs, triage.

They run wherever the library is compiled once and reused: a spawned scan process
(`init_worker`), this process (`init_local`: the CLI, tests), or a Ray actor.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import re
import shutil
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.blobstore import BlobStore, PendingBlob, open_blob_store
from app.db.repo import RuleRecord
from app.engine.pipeline.ingest import (
    GZIP_MAGIC,
    ZSTD_MAGIC,
    ByteBudget,
    Source,
    rank_from_name,
)
from app.engine.pipeline.library import Library, load_library
from app.engine.pipeline.patches import ConfigView
from app.engine.pipeline.scan import CompiledLibrary
from app.engine.pipeline.triage import TriageOptions, default_cache_dir, triage
from app.errors import (
    InputError,
    LogtriageError,
)
from app.service.jobs import JobError, RetriageJob, ScanJob, ScanOutcome, SiteRules, StoredFile
from app.service.redaction import (
    RedactedUpload,
    TmpBudget,
    guard_of,
    read_config,
    redact_bytes,
    redact_upload,
    stage_bytes,
)
from app.settings import Settings

# --- worker side --------------------------------------------------------------------------------


@dataclass
class WorkerState:
    settings: Settings
    compiled: CompiledLibrary
    store: BlobStore
    # the bundled library with a site pack, by the pack's digest (the latest few)
    with_site: dict[str, CompiledLibrary] = field(default_factory=dict)


SITE_LIBRARIES = 2  # compiled libraries with a site pack kept per process


def compiled_for(st: WorkerState, site: SiteRules | None) -> CompiledLibrary:
    """The library a job is triaged with: the bundled one, or it with the job's site pack
    (compiled once per pack in this process; a new pack's first job pays for it)."""
    if site is None or (not site.rules and not site.classes):
        return st.compiled
    hit = st.with_site.get(site.digest)
    if hit is not None:
        return hit
    from app.engine.pipeline.library import SitePack

    base = st.compiled.library
    pack = SitePack.build(list(site.rules), base=base, classes=list(site.classes))
    compiled = build_compiled(st.settings, base.with_pack(pack))
    while len(st.with_site) >= SITE_LIBRARIES:
        st.with_site.pop(next(iter(st.with_site)))
    st.with_site[site.digest] = compiled
    return compiled


_STATE: WorkerState | None = None


def build_compiled(settings: Settings, library: Library | None = None) -> CompiledLibrary:
    # the validated library from the cache the CLI keeps (keyed by every rule file's stats, so a
    # changed file is validated again): validating it from YAML took each worker 1.4 s here, and
    # `/readyz` waited 5-8 s after a start for two workers
    cache_dir = settings.cache_dir or default_cache_dir()
    lib = library or load_library(settings.rules_dir, cache_dir=cache_dir)
    return CompiledLibrary(lib, engine=settings.engine, cache_dir=cache_dir)


def worker_settings_payload(settings: Settings) -> dict[str, Any]:
    """What a scan worker needs to rebuild the settings: no secret ever travels to a worker
    (tokens, signing keys), whatever its field is called."""
    secrets = {name for name, f in Settings.model_fields.items() if "SecretStr" in str(f.annotation)}
    return settings.model_dump(mode="json", exclude=secrets)


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


def local_state(settings: Settings, *, compiled: CompiledLibrary | None = None) -> WorkerState:
    """What `scan_upload` needs in this process."""
    return WorkerState(settings, compiled or build_compiled(settings), open_blob_store(settings))


def worker_state() -> WorkerState:
    if _STATE is None:
        raise RuntimeError("scan worker not initialised")
    return _STATE


def ping(_: object = None) -> str:
    """Warm-up call: returns the library version once the worker has compiled it."""
    return worker_state().compiled.library.version


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


def _options(st: WorkerState, framework: str | None, exit_code: int | None) -> TriageOptions:
    # every log a worker scans is redacted: an upload by `redact_to_blob`, a stored one was
    return TriageOptions(
        jobs=st.settings.scan_jobs, max_bytes=0, framework=framework, exit_code=exit_code, input_redacted=True
    )


def note_redactions(analysis: dict[str, Any], counts: Counter[str]) -> None:
    """What was redacted, by kind, on the analysis (the report's redaction summary)."""
    analysis.setdefault("stats", {})["redactions"] = dict(sorted(counts.items()))
    if counts:
        summary = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
        analysis.setdefault("warnings", []).append(f"redacted secrets: {summary}")


_MARKER = re.compile(rb"\[REDACTED:([a-z0-9-]+)\]")


def count_markers(path: Path) -> Counter[str]:
    """The redactions a stored (already redacted) log carries, counted from its markers."""
    counts: Counter[str] = Counter()
    with path.open("rb") as fh:
        carry = b""
        while block := fh.read(1 << 20):
            block = carry + block
            cut = block.rfind(b"\n") + 1
            for m in _MARKER.finditer(block, 0, cut or len(block)):
                counts[m.group(1).decode()] += 1
            carry = block[cut:] if cut else b""
        for m in _MARKER.finditer(carry):
            counts[m.group(1).decode()] += 1
    return counts


_STAGER: ThreadPoolExecutor | None = None
_STAGER_LOCK = threading.Lock()


def _stager() -> ThreadPoolExecutor:
    """One thread per process that stages in-memory uploads beside their scan: zstd and sha256
    let go of the GIL, so a hook's stored copy costs its scan no time when a core is free."""
    global _STAGER
    with _STAGER_LOCK:
        if _STAGER is None:
            _STAGER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stage-blob")
        return _STAGER


def scan_upload(job: ScanJob, state: WorkerState | None = None) -> ScanOutcome | JobError:
    """Worker: each upload is read once: decompressed, checked, redacted into a pending blob
    and scanned from the same pass (`redact_upload`); then triaged."""
    st = state or worker_state()
    budget = ByteBudget(st.settings.max_bytes)
    guard = guard_of(st.settings)
    tmp = TmpBudget(st.settings.max_tmp_bytes, spooled=sum(f.size for f in job.files if f.data is None))
    pending: list[PendingBlob] = []
    streams: list[RedactedUpload] = []
    staging: list[Future[PendingBlob]] = []
    redactions: Counter[str] = Counter()
    try:
        sources: list[Source] = []
        # per file, in order: its blob (staged already, or being staged) or the stream that
        # stages it as it is scanned
        parts: list[PendingBlob | RedactedUpload | Future[PendingBlob]] = []
        for f in job.files:
            rank = rank_from_name(f.name)
            if f.data is not None and not f.data.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
                redacted = redact_bytes(f.name, f.data, budget, counts=redactions)
                staged = _stager().submit(stage_bytes, st.store, redacted)
                staging.append(staged)
                parts.append(staged)
                sources.append(Source(name=f.name, stream=io.BytesIO(redacted), rank_hint=rank))
            else:
                stream = redact_upload(f, st.store, budget, guard=guard, tmp=tmp, counts=redactions)
                streams.append(stream)
                parts.append(stream)
                sources.append(Source(name=f.name, stream=stream, rank_hint=rank))  # type: ignore[arg-type]
        config_view = None
        config_stored = None
        if job.config is not None:
            text = read_config(job.config, counts=redactions)
            config_view = ConfigView.from_text(text, name=job.config.name)
            with st.store.writer() as w:
                w.write(text.encode("utf-8"))
                cblob = w.finish()
            pending.append(cblob)
            config_stored = StoredFile(job.config.name, cblob)
        compiled = compiled_for(st, job.site)
        analysis = triage(
            sources=sources,
            compiled=compiled,
            options=_options(st, job.framework, job.exit_code),
            config=config_view,
        )
        stored: list[StoredFile] = []
        for f, part in zip(job.files, parts, strict=True):
            if isinstance(part, RedactedUpload):
                streams.remove(part)
                try:
                    blob = part.finish()
                except BaseException:
                    part.abort()
                    raise
                pending.append(blob)
            elif isinstance(part, Future):
                staging.remove(part)
                blob = part.result()  # a failed staging discarded its own file
                pending.append(blob)
            else:
                blob = part
            stored.append(StoredFile(f.name, blob))
        data = analysis.model_dump(mode="json")
        note_redactions(data, redactions)
        return ScanOutcome(
            analysis=data,
            library_version=compiled.library.version,
            rules=_rule_texts(compiled, data),
            files=tuple(stored),
            config=config_stored,
        )
    except LogtriageError as exc:
        _discard(st, pending, streams, staging)
        return JobError.of(exc)
    except BaseException:
        _discard(st, pending, streams, staging)
        raise


def _discard(
    st: WorkerState,
    pending: list[PendingBlob],
    streams: list[RedactedUpload],
    staging: list[Future[PendingBlob]],
) -> None:
    for s in streams:
        s.abort()
    for fut in staging:  # waited for: its file must not outlive the job
        with contextlib.suppress(Exception):  # a failed staging removed its own file
            pending.append(fut.result())
    for p in pending:
        st.store.discard(p)


def retriage_stored(job: RetriageJob) -> ScanOutcome | JobError:
    """Worker: triage stored (redacted) logs again with this process's library."""
    st = worker_state()
    work_dir = st.store.tmp_dir / f"retriage-{os.getpid()}-{os.urandom(6).hex()}"
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        sources: list[Source] = []
        redactions: Counter[str] = Counter()
        for i, f in enumerate(job.files):
            path = work_dir / f"{i}.log"
            with st.store.open(f.sha256) as src, path.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            redactions += count_markers(path)
            sources.append(Source(name=f.name, path=path, rank_hint=rank_from_name(f.name)))
        config_view = None
        if job.config is not None:
            with st.store.open(job.config.sha256) as src:
                text = src.read().decode("utf-8", errors="replace")
            config_view = ConfigView.from_text(text, name=job.config.name)
        compiled = compiled_for(st, job.site)
        analysis = triage(
            sources=sources,
            compiled=compiled,
            options=_options(st, job.framework, job.exit_code),
            config=config_view,
        )
        data = analysis.model_dump(mode="json")
        note_redactions(data, redactions)
        return ScanOutcome(
            analysis=data, library_version=compiled.library.version, rules=_rule_texts(compiled, data)
        )
    except LogtriageError as exc:
        return JobError.of(exc)
    except FileNotFoundError as exc:
        return JobError.of(InputError(f"stored log is missing from the blob store ({exc.filename})"))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
