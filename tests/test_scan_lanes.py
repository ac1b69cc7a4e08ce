"""The scan pool's two lanes: big uploads run in a low-priority process, small ones do not."""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import re
from pathlib import Path

import pytest
import zstandard

from app.engine.ingest import Source
from app.engine.redact import redact_stream
from app.engine.triage import TriageOptions, triage
from app.service import jobs, redaction, worker
from app.service.jobs import InputFile, ScanJob, ScanOutcome
from app.service.pool import BULK_NICE, ScanPool
from app.service.worker import scan_upload
from app.settings import Settings
from tests.servicekit import ECC, make_settings, training_log


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

    small_bulk, big_bulk, nice, bulk_nice, small_out, big_out = asyncio.run(run())
    assert (small_bulk, big_bulk) == (False, True)
    assert bulk_nice == min(19, nice + BULK_NICE)
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


def _inline_settings(tmp_path: Path, limit: int) -> Settings:
    return make_settings(tmp_path / "data", None, inline_bytes=limit)


def test_small_uploads_are_analysed_in_the_server_process(tmp_path: Path) -> None:
    settings = _inline_settings(tmp_path, 64 << 10)
    pool = ScanPool(settings)
    text = training_log(ECC.format(ip="10.1.2.3")).encode()
    padded = text + b"step 1 loss 2.0\n" * (4 << 10)  # over 64 KiB plain, a few KiB gzipped

    def in_memory(data: bytes) -> ScanJob:
        return ScanJob(files=(InputFile("x.log", str(tmp_path / "never-written.log"), data=data),))

    def plain_of(job: ScanJob) -> bytes | None:
        inline = pool.inline_job(job)
        return None if inline is None else inline.files[0].data

    async def refuse(*_: object, **__: object) -> object:
        raise AssertionError("handed to a scan process")

    async def run() -> tuple[bytes | None, dict[str, bytes | None], object, object, object]:
        try:
            before = plain_of(in_memory(text))  # nothing compiled in this process before warm-up
            await pool.warmup()
            lanes = {
                "plain": plain_of(in_memory(text)),
                "gzip": plain_of(in_memory(gzip.compress(text))),
                "zstd": plain_of(in_memory(zstandard.ZstdCompressor().compress(text))),
                "gzip expanding past the limit": plain_of(in_memory(gzip.compress(padded))),
                "truncated gzip": plain_of(in_memory(gzip.compress(text)[:-20])),
                "spooled": plain_of(_job(tmp_path, "spooled.log", 8 << 10)),
                "over the limit": plain_of(in_memory(padded)),
            }
            via_process = await pool.scan(in_memory(gzip.compress(padded)))
            pool.call = refuse  # type: ignore[method-assign]
            inline = await pool.scan(in_memory(text))
            inline_gzip = await pool.scan(in_memory(gzip.compress(text)))
            return before, lanes, via_process, inline, inline_gzip
        finally:
            pool.shutdown()

    before, lanes, *outcomes = asyncio.run(run())
    assert before is None
    assert lanes == {
        "plain": text,
        "gzip": text,
        "zstd": text,
        "gzip expanding past the limit": None,
        "truncated gzip": None,  # left to a scan worker, which reports it
        "spooled": None,
        "over the limit": None,
    }
    for out in outcomes:
        assert isinstance(out, ScanOutcome)
        assert out.analysis["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
        for f in out.files:  # staged by the scan, committed by nobody here
            assert Path(f.blob.tmp_path).is_file()
            Path(f.blob.tmp_path).unlink()


def test_a_config_file_counts_toward_the_inline_limit(tmp_path: Path) -> None:
    pool = ScanPool(_inline_settings(tmp_path, 4096))
    log_file = InputFile("x.log", str(tmp_path / "x.log"), data=b"step\n" * 500)  # 2,500 bytes
    small, big = (InputFile("c.yaml", str(tmp_path / "c.yaml"), data=b"a: 1\n" * n) for n in (100, 400))
    on_disk = InputFile("c.yaml", str(tmp_path / "c.yaml"))

    async def run() -> list[bool]:
        try:
            await pool.warmup()
            return [
                pool.inline_job(ScanJob(files=(log_file,), config=c)) is not None
                for c in (small, big, on_disk)
            ]
        finally:
            pool.shutdown()

    assert asyncio.run(run()) == [True, False, False]


def test_inline_lane_can_be_switched_off(tmp_path: Path) -> None:
    pool = ScanPool(_inline_settings(tmp_path, 0))
    job = ScanJob(files=(InputFile("x.log", str(tmp_path / "x.log"), data=b"hello\n"),))

    async def run() -> bool:
        try:
            await pool.warmup()
            return pool.inline_job(job) is not None
        finally:
            pool.shutdown()

    assert asyncio.run(run()) is False


def test_a_server_process_freezes_what_it_built_at_start(tmp_path: Path) -> None:
    """Full collections would otherwise walk the rule library and the app under load."""
    import gc

    from tests.servicekit import live_server

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with live_server(make_settings(tmp_path / "data", None)) as srv:  # runs in this process
        assert srv.ctx.pool.ready.is_set()
        assert gc.get_freeze_count() > 10_000
