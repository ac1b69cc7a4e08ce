"""The scan pool's two lanes: every upload runs in a scan process, big ones at a lower priority."""

from __future__ import annotations

import gzip
import io
import os
import re
from pathlib import Path

import pytest
import zstandard

from app.engine.pipeline.ingest import Source
from app.engine.pipeline.redact import redact_stream
from app.engine.pipeline.triage import TriageOptions, triage
from app.service import jobs, redaction, worker
from app.service.jobs import InputFile, ScanJob, ScanOutcome
from app.service.pool import BULK_NICE, POOL_NICE, ScanPool
from app.service.worker import scan_upload
from tests.conftest import run_async
from tests.servicekit import ECC, make_settings, training_log

# slow: scan worker processes started per test (the pool's two lanes)
pytestmark = pytest.mark.slow


def _job(tmp_path: Path, name: str, size: int) -> ScanJob:
    text = training_log(ECC.format(ip="10.1.2.3"))
    path = tmp_path / name
    path.write_text("step log line\n" * max(0, (size - len(text)) // 14) + text)
    return ScanJob(files=(InputFile(name, str(path)),))


def test_big_uploads_go_to_the_low_priority_lane(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", None, bulk_bytes=64 << 10)
    small, big = _job(tmp_path, "small.log", 8 << 10), _job(tmp_path, "big.log", 256 << 10)
    pool = ScanPool(settings)

    async def run() -> tuple[bool, bool, int, int, object, object]:
        try:
            return (
                pool.is_bulk(small),
                pool.is_bulk(big),
                await pool.call(os.nice, 0),  # os.nice(0) returns the process' niceness
                await pool.call(os.nice, 0, bulk=True),
                await pool.call(scan_upload, small),
                await pool.call(scan_upload, big, bulk=True),
            )
        finally:
            pool.shutdown()

    small_bulk, big_bulk, nice, bulk_nice, small_out, big_out = run_async(run())
    assert (small_bulk, big_bulk) == (False, True)
    assert bulk_nice == min(19, nice - POOL_NICE + BULK_NICE)
    # both lanes analyse the same way
    for out in (small_out, big_out):
        assert isinstance(out, ScanOutcome)
        assert out.analysis["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"


def test_bulk_lane_can_be_switched_off(tmp_path: Path) -> None:
    pool = ScanPool(make_settings(tmp_path / "data", None, bulk_bytes=0))
    assert pool.is_bulk(_job(tmp_path, "huge.log", 1 << 20)) is False


CORPUS = Path(__file__).parent / "corpus" / "real"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.log"))[:12])
def test_spooled_uploads_give_the_same_analysis_plain_gzip_or_zstd(tmp_path: Path, name: str) -> None:
    """A spooled upload is decompressed, redacted, stored and scanned in one pass: the result
    does not depend on how it was compressed, and no work file is written."""
    worker.init_local(make_settings(tmp_path / "data", None))
    raw = (CORPUS / name).read_bytes()
    results = []
    for body in (raw, gzip.compress(raw), zstandard.ZstdCompressor().compress(raw)):
        src = tmp_path / "spool" / name
        src.parent.mkdir(exist_ok=True)
        src.write_bytes(body)
        out = worker.scan_upload(ScanJob(files=(InputFile(name, str(src)),)))
        assert isinstance(out, ScanOutcome)
        for f in out.files:
            worker.worker_state().store.discard(f.blob)
        for key in ("scan_seconds", "mb_per_s"):
            out.analysis["stats"].pop(key, None)
        results.append(out.analysis)
        assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == [name]  # no work file
    assert results[0] == results[1] == results[2]


def _analysis(out: object) -> dict[str, object]:
    assert isinstance(out, ScanOutcome)
    for f in out.files:
        worker.worker_state().store.discard(f.blob)
    for key in ("scan_seconds", "mb_per_s"):
        out.analysis["stats"].pop(key, None)
    return out.analysis


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.log"))[:6])
@pytest.mark.parametrize("compression", ["", "gzip"])
def test_uploads_passed_in_memory_match_spooled_ones(tmp_path: Path, name: str, compression: str) -> None:
    """A small upload reaches the scan worker as bytes (no spool file); a compressed one is
    written out by the worker. Either way the result is the spooled upload's."""
    worker.init_local(make_settings(tmp_path / "data", None))
    raw = (CORPUS / name).read_bytes()
    body = gzip.compress(raw) if compression else raw
    spooled = tmp_path / "spooled" / name
    spooled.parent.mkdir()
    spooled.write_bytes(body)
    from_file = _analysis(scan_upload(ScanJob(files=(InputFile(name, str(spooled)),))))
    never_written = tmp_path / "memory" / name
    from_memory = _analysis(scan_upload(ScanJob(files=(InputFile(name, str(never_written), data=body),))))
    assert from_memory == from_file
    # neither touches the disk: a compressed one is decompressed from memory as it is scanned
    assert not never_written.exists()
    assert not list(tmp_path.rglob("*.plain"))


def test_in_memory_uploads_get_the_same_input_errors(tmp_path: Path) -> None:
    worker.init_local(make_settings(tmp_path / "data", None))
    for data, message in ((b"", "the log is empty"), (bytes(range(32)) * 100, "binary content")):
        out = scan_upload(ScanJob(files=(InputFile("x.log", str(tmp_path / "x.log"), data=data),)))
        assert isinstance(out, jobs.JobError) and message in out.detail
    big = redaction.MAX_CONFIG_BYTES + 1
    job = ScanJob(
        files=(InputFile("x.log", str(tmp_path / "x.log"), data=training_log(ECC).encode()),),
        config=InputFile("c.yaml", str(tmp_path / "c.yaml"), data=b"a: 1\n" * (big // 5 + 1)),
    )
    out = scan_upload(job)
    assert isinstance(out, jobs.JobError) and "config file over" in out.detail
    assert list((tmp_path / "data").rglob("*.zst*")) == []  # nothing pending is left behind


SECRET_TAIL = (
    b" api_key=sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD \x1b[1mhf_abcdefghijklmnopqrstuvwxyzABCDEF\x1b[0m"
    b" https://user:hunter2pass@example.com/x"
)


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.log"))[:10])
def test_redacted_input_needs_no_second_redaction(tmp_path: Path, name: str) -> None:
    """Workers triage with `input_redacted`: evidence and captures of a log that went through
    `redact_stream` are not redacted again. That pass would change nothing (checked here, with
    secrets planted on every line that may become evidence)."""
    worker.init_local(make_settings(tmp_path / "data", None))
    raw = re.sub(
        rb"(?m)^(.*(?:rror|NCCL|Xid|exception|failed).*)$", rb"\1" + SECRET_TAIL, (CORPUS / name).read_bytes()
    )
    redacted = b"".join(redact_stream(io.BytesIO(raw)))
    assert b"hunter2pass" not in redacted and b"hf_abc" not in redacted
    compiled = worker.worker_state().compiled
    results = []
    for skip in (False, True):
        out = triage(
            sources=[Source(name=name, stream=io.BytesIO(redacted))],
            compiled=compiled,
            options=TriageOptions(jobs=1, input_redacted=skip),
        ).model_dump(mode="json")
        for key in ("scan_seconds", "mb_per_s"):
            out["stats"].pop(key, None)
        results.append(out)
    assert results[0] == results[1]
    evidence = [e["text"] for f in results[0]["findings"] for e in f["evidence"]]
    assert any("[REDACTED" in t for t in evidence), "no planted secret reached the evidence"


def test_every_upload_is_analysed_in_a_scan_process_even_a_small_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing analyses on the server's event loop: a 1 MB log of metric lines held it a third of
    a second, and a burst of them held every answer and health probe behind it."""
    monkeypatch.setattr(worker, "_STATE", None)  # earlier tests may have set up this process
    settings = make_settings(tmp_path / "data", None)
    pool = ScanPool(settings)
    text = training_log(ECC.format(ip="10.1.2.3")).encode()
    handed: list[object] = []
    real_call = pool.call

    async def spy(fn: object, arg: object, *, bulk: bool = False) -> object:
        handed.append(arg)
        return await real_call(fn, arg, bulk=bulk)  # type: ignore[arg-type]

    async def run() -> list[object]:
        try:
            await pool.warmup()
            pool.call = spy  # type: ignore[method-assign]
            out = []
            for data in (text, gzip.compress(text), zstandard.ZstdCompressor().compress(text)):
                job = ScanJob(files=(InputFile("x.log", str(tmp_path / "never-written.log"), data=data),))
                out.append(await pool.scan(job))
            return out
        finally:
            pool.shutdown()

    outcomes = run_async(run())
    assert len(handed) == 3
    assert worker._STATE is None  # nothing was set up to analyse in this (the server's) process
    for out in outcomes:
        assert isinstance(out, ScanOutcome)
        assert out.analysis["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
        for f in out.files:  # staged by the scan, committed by nobody here
            assert Path(f.blob.tmp_path).is_file()
            Path(f.blob.tmp_path).unlink()


def test_scan_processes_run_below_the_server_priority(tmp_path: Path) -> None:
    pool = ScanPool(make_settings(tmp_path / "data", None))

    async def run() -> int:
        try:
            return await pool.call(os.nice, 0)
        finally:
            pool.shutdown()

    assert run_async(run()) == min(19, os.nice(0) + POOL_NICE)


@pytest.mark.slow  # a live server
def test_a_server_process_freezes_what_it_built_at_start(tmp_path: Path) -> None:
    """Full collections would otherwise walk the rule library and the app under load."""
    import gc

    from tests.servicekit import live_server

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with live_server(make_settings(tmp_path / "data", None)) as srv:  # runs in this process
        assert srv.ctx.pool.ready.is_set()
        assert gc.get_freeze_count() > 10_000
