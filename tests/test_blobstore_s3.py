"""What only the S3 store has: its settings, the optional dependency, outages, bounded memory."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.blobstore import DirectoryBlobStore, PendingBlob, StagingWriter, open_blob_store
from app.errors import ServiceUnavailableError, UsageError
from app.settings import Settings
from tests.conftest import ROOT
from tests.s3kit import S3_ENV, MotoS3
from tests.servicekit import free_port, in_ci

# slow: a moto S3 server, and subprocesses that check what gets imported
pytestmark = pytest.mark.slow


def need_obstore() -> None:
    if importlib.util.find_spec("obstore") is None:
        if in_ci():
            pytest.fail("obstore (extra `s3`) is required in CI")
        pytest.skip("obstore not installed (pip install -e '.[dev]')")


def stage(store: object, data: bytes) -> PendingBlob:
    with store.writer() as w:  # type: ignore[attr-defined]
        w.write(data)
        pending: PendingBlob = w.finish()
        return pending


def test_settings_select_the_store(tmp_path: Path) -> None:
    assert isinstance(open_blob_store(Settings(data_dir=tmp_path)), DirectoryBlobStore)
    for bad in ("https://bucket/x", "s3://", "s3:///prefix", "bucket/prefix", "s3://b/p?x=1"):
        with pytest.raises(ValidationError):
            Settings(data_dir=tmp_path, blob_url=bad)
    need_obstore()
    from app.blobstore.s3 import S3BlobStore

    store = open_blob_store(
        Settings(data_dir=tmp_path, blob_url="s3://logs-bucket/team/a/", s3_endpoint_url="http://127.0.0.1:9")
    )
    assert isinstance(store, S3BlobStore)
    assert (store.bucket, store.prefix, store.location) == (
        "logs-bucket",
        "team/a",
        "s3://logs-bucket/team/a",
    )
    assert store.tmp_dir == tmp_path / "tmp"
    bare = open_blob_store(Settings(data_dir=tmp_path, blob_url="s3://logs-bucket"))
    assert isinstance(bare, S3BlobStore) and bare.prefix == "" and bare.location == "s3://logs-bucket"


def test_s3_url_without_the_extra_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "obstore", None)  # as if `logtriage[s3]` were not installed
    with pytest.raises(UsageError, match=r"logtriage\[s3\]"):
        open_blob_store(Settings(data_dir=tmp_path, blob_url="s3://logs-bucket/x"))


def test_the_s3_client_loads_only_when_used() -> None:
    code = textwrap.dedent(
        """
        import importlib.util, json, sys
        import app.blobstore, app.service.analyses, app.http.main
        from app.settings import Settings
        loaded = ["obstore" in sys.modules]
        if importlib.util.find_spec("obstore"):
            app.blobstore.open_blob_store(Settings(blob_url="s3://logs-bucket/p"))
            loaded.append("obstore" in sys.modules)
        print(json.dumps(loaded))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(out.stdout) in ([False], [False, False])


def test_unreachable_store_is_service_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_obstore()
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    store = open_blob_store(Settings(data_dir=tmp_path, blob_url="s3://logs-bucket/x", s3_endpoint_url=dead))
    pending = stage(store, b"a log line\n" * 100)
    started = time.monotonic()
    calls = [
        lambda: store.commit(pending),
        lambda: store.exists(pending.sha256),
        lambda: store.open(pending.sha256),
        lambda: store.delete(pending.sha256),
        lambda: list(store.iter_blobs()),
        store.check_writable,
    ]
    for call in calls:
        with pytest.raises(ServiceUnavailableError) as info:
            call()
        assert info.value.http_status == 503
        assert "retry later" in info.value.detail
        assert S3_ENV["AWS_SECRET_ACCESS_KEY"] not in info.value.detail and dead not in info.value.detail
    assert time.monotonic() - started < 30  # a few quick retries, not minutes
    assert not Path(pending.tmp_path).exists()  # a failed commit leaves no staging file


def test_missing_bucket(tmp_path: Path, moto_s3: MotoS3) -> None:
    store = open_blob_store(
        Settings(data_dir=tmp_path, blob_url="s3://lt-no-such-bucket/x", s3_endpoint_url=moto_s3.endpoint)
    )
    pending = stage(store, b"a log line\n")
    assert store.exists(pending.sha256) is False
    with pytest.raises(FileNotFoundError):
        store.open(pending.sha256)
    for call in (lambda: store.commit(pending), lambda: list(store.iter_blobs()), store.check_writable):
        with pytest.raises(ServiceUnavailableError):
            call()


MEMORY_PROBE = """
import json, resource, sys
from app.blobstore import PendingBlob, open_blob_store
from app.settings import Settings

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

endpoint, bucket, data_dir, staged = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
store = open_blob_store(Settings(data_dir=data_dir, blob_url=f"s3://{bucket}/m", s3_endpoint_url=endpoint))
with store.writer() as w:  # warm up: client, runtime, zstd contexts, one upload and one read
    w.write(b"warm-up\\n")
    warm = w.finish()
store.commit(warm)
with store.open(warm.sha256) as fh:
    fh.read()
base = peak_mib()
pending = PendingBlob(**staged)
assert store.commit(pending)
after_put = peak_mib()
n = 0
with store.open(pending.sha256) as fh:
    while chunk := fh.read(1 << 20):
        n += len(chunk)
assert n == pending.size, n
print(json.dumps({"base": base, "put": after_put - base, "all": peak_mib() - base}))
"""


def test_large_blobs_stream_with_bounded_memory(tmp_path: Path, moto_s3: MotoS3, s3_bucket: str) -> None:
    """A blob several times the memory budget goes up and comes back without being held whole."""
    data_dir = tmp_path / "data"
    mib = 160
    with StagingWriter(data_dir / "tmp") as w:  # staged here: the probe process only uploads and reads
        for _ in range(mib):
            w.write(os.urandom(1 << 20))
        pending = w.finish()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            MEMORY_PROBE,
            moto_s3.endpoint,
            s3_bucket,
            str(data_dir),
            json.dumps(dataclasses.asdict(pending)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    grew = json.loads(out.stdout)
    assert grew["put"] < 64, grew  # parts in flight: 4 x 8 MiB, plus buffers; never the blob
    assert grew["all"] < 64, grew  # reads are ranged GETs of 8 MiB
    sizes = [moto_s3.head(s3_bucket, k)["ContentLength"] for k in moto_s3.keys(s3_bucket)]
    assert max(sizes) >= mib << 20  # incompressible: stored at full size, in 8 MiB parts
