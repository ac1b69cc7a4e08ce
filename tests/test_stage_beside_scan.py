"""A hook's upload held in memory is staged (compressed, hashed, synced) by a thread beside its
scan (`app.service.worker._stager`): the stored copy is the redacted log, synced before the
commit links it, and nothing staged outlives a failed job."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
import zstandard

from app.errors import InputError
from app.service import worker
from app.service.jobs import InputFile, JobError, ScanJob, ScanOutcome
from tests.servicekit import ECC, make_settings, training_log

SECRET = "hf_abcdefghijklmnopqrstuvwxyzABCDEF"


def _body() -> bytes:
    return (f"export HF_TOKEN={SECRET}\n" + training_log(ECC.format(ip="10.1.2.3"))).encode()


def _job(tmp_path: Path, data: bytes) -> ScanJob:
    return ScanJob(files=(InputFile("rank0.log", str(tmp_path / "never-written.log"), data=data),))


def _staged(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "data").rglob("*") if p.is_file() and ".zst" in p.name]


def test_the_staged_copy_is_the_redacted_log_synced_by_another_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker.init_local(make_settings(tmp_path / "data", None))
    synced: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    from app.blobstore import grams

    built: list[object] = []
    real_builder = grams.GramBuilder

    def builder(*args: object, **kwargs: object) -> object:
        built.append(args)
        return real_builder(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(grams, "GramBuilder", builder)
    out = worker.scan_upload(_job(tmp_path, _body()))
    assert isinstance(out, ScanOutcome)
    assert out.analysis["root_cause"]["failure_class"] == "hardware.gpu_ecc_error"
    (stored,) = out.files
    blob = stored.blob
    # synced as it was finished, by the staging thread, not by the scan's
    assert [path for path, _ in synced] == [blob.tmp_path]
    assert synced[0][1].startswith("stage-blob") and synced[0][1] != threading.current_thread().name
    with Path(blob.tmp_path).open("rb") as fh:
        content = zstandard.ZstdDecompressor().stream_reader(fh).read()
    assert SECRET.encode() not in content and b"[REDACTED:" in content
    assert blob.size == len(content) and b"uncorrectable ECC error" in content
    # one frame: no search filters were built for it (a search reads it whole)
    assert blob.frames is not None and len(blob.frames[-1]) == 4
    assert built == []
    worker.worker_state().store.discard(blob)


def test_a_scan_that_fails_leaves_nothing_staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker.init_local(make_settings(tmp_path / "data", None))

    def refuse(**_: object) -> None:
        raise InputError("refused by the test")

    monkeypatch.setattr(worker, "triage", refuse)
    out = worker.scan_upload(_job(tmp_path, _body()))
    assert isinstance(out, JobError) and "refused by the test" in out.detail
    assert _staged(tmp_path) == []

    def crash(**_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(worker, "triage", crash)
    with pytest.raises(RuntimeError, match="a bug"):
        worker.scan_upload(_job(tmp_path, _body()))
    assert _staged(tmp_path) == []


def test_a_disk_full_while_staging_fails_the_job_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staging thread's error reaches the job (the server answers 507 for ENOSPC); its
    half-written file is gone."""
    from app.blobstore.base import StagingWriter

    worker.init_local(make_settings(tmp_path / "data", None))
    real_write = StagingWriter.write

    def full(self: StagingWriter, data: bytes) -> None:
        real_write(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(StagingWriter, "write", full)
    with pytest.raises(OSError) as info:
        worker.scan_upload(_job(tmp_path, _body()))
    assert info.value.errno == errno.ENOSPC
    assert _staged(tmp_path) == []
