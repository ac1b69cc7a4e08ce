"""The blob store contract, on the directory store and on S3 (moto's server on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from app.blobstore import BlobStore, PendingBlob, blob_key, iter_range, open_blob_store
from app.settings import Settings
from tests.s3kit import MotoS3


@dataclass
class Backend:
    """A store plus raw access to what it stored (the file or the object, compressed)."""

    name: str
    store: BlobStore
    raw_get: Callable[[str], bytes]
    raw_put: Callable[[str], Callable[[bytes], None]]  # (key) -> writer of raw bytes
    keys: Callable[[], list[str]]
    etag: Callable[[str], str] | None = None  # S3: the object's ETag


# slow: the S3 case runs against a moto server
@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.slow)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    data = tmp_path / "data"
    if request.param == "directory":
        root = data / "blobs"

        def dir_put(key: str) -> Callable[[bytes], None]:
            def write(raw: bytes) -> None:
                (root / key).parent.mkdir(parents=True, exist_ok=True)
                (root / key).write_bytes(raw)

            return write

        return Backend(
            "directory",
            open_blob_store(Settings(data_dir=data)),
            lambda key: (root / key).read_bytes(),
            dir_put,
            lambda: sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()),
        )
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    bucket: str = request.getfixturevalue("s3_bucket")
    prefix = "team/logs"
    store = open_blob_store(
        Settings(data_dir=data, blob_url=f"s3://{bucket}/{prefix}", s3_endpoint_url=moto.endpoint)
    )
    return Backend(
        "s3",
        store,
        lambda key: moto.get(bucket, f"{prefix}/{key}"),
        lambda key: lambda raw: moto.put(bucket, f"{prefix}/{key}", raw),
        lambda: [k.removeprefix(prefix + "/") for k in moto.keys(bucket)],
        lambda key: str(moto.head(bucket, f"{prefix}/{key}")["ETag"]),
    )


def stage(store: BlobStore, data: bytes, *, chunk: int = 1 << 20) -> PendingBlob:
    with store.writer() as w:
        for i in range(0, len(data), chunk):
            w.write(data[i : i + chunk])
        return w.finish()


def put(store: BlobStore, data: bytes) -> tuple[str, bool]:
    pending = stage(store, data)
    return pending.sha256, store.commit(pending)


def read(store: BlobStore, sha: str) -> bytes:
    with store.open(sha) as fh:
        return fh.read()


def staging_files(store: BlobStore) -> list[Path]:
    return sorted(store.tmp_dir.glob("blob-*")) if store.tmp_dir.is_dir() else []


LOG = b"".join(f"step {i} loss {1 / (i + 1):.5f} lr 1e-5\n".encode() for i in range(5000))


def test_put_get_exists_list_delete(backend: Backend) -> None:
    store = backend.store
    sha, new = put(store, LOG)
    assert new is True
    assert sha == hashlib.sha256(LOG).hexdigest()
    assert store.exists(sha)
    assert read(store, sha) == LOG
    assert backend.keys() == [blob_key(sha)]
    # stored compressed, as one zstd stream of the content
    raw = backend.raw_get(blob_key(sha))
    assert len(raw) < len(LOG) // 4
    assert zstandard.ZstdDecompressor().decompressobj().decompress(raw) == LOG
    assert list(store.iter_blobs()) == [sha]
    assert staging_files(store) == []
    store.delete(sha)
    assert not store.exists(sha)
    assert list(store.iter_blobs()) == []
    store.delete(sha)  # deleting a missing blob is fine


def test_put_if_absent_never_uploads_an_existing_blob_again(backend: Backend) -> None:
    store = backend.store
    sha, new = put(store, LOG)
    assert new
    # mark the stored blob: a second commit of the same content must leave it untouched
    marker = zstandard.ZstdCompressor().compress(LOG)  # same content, different bytes
    assert marker != backend.raw_get(blob_key(sha))
    backend.raw_put(blob_key(sha))(marker)
    again = stage(store, LOG)
    assert store.commit(again) is False
    assert backend.raw_get(blob_key(sha)) == marker
    assert not Path(again.tmp_path).exists()
    assert read(store, sha) == LOG


def test_concurrent_commits_of_one_blob_have_one_winner(backend: Backend) -> None:
    store = backend.store
    pendings = [stage(store, LOG) for _ in range(4)]
    results: list[bool | str] = []
    barrier = threading.Barrier(len(pendings))

    def commit(p: PendingBlob) -> None:
        barrier.wait()
        try:
            results.append(store.commit(p))
        except Exception as exc:  # shown in the assertion below, not lost with the thread
            results.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=commit, args=(p,)) for p in pendings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) == [False, False, False, True], results
    assert read(store, pendings[0].sha256) == LOG


@pytest.mark.parametrize(
    ("start", "length"),
    [(0, 10), (0, len(LOG)), (12345, 70000), (len(LOG) - 30, 30), (len(LOG) - 5, 100), (len(LOG), 10)],
)
def test_ranges(backend: Backend, start: int, length: int) -> None:
    sha, _ = put(backend.store, LOG)
    with backend.store.open(sha) as fh:
        got = b"".join(iter_range(fh, start, length))
    assert got == LOG[start : start + length]


def test_large_blob_streams_through_multipart(backend: Backend) -> None:
    data = os.urandom(20 << 20)  # incompressible: 20 MiB stored, three 8 MiB parts on S3
    store = backend.store
    pending = stage(store, data)
    assert pending.stored_size > 16 << 20
    assert store.commit(pending) is True
    with store.open(pending.sha256) as fh:
        h = hashlib.sha256()
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    assert h.hexdigest() == pending.sha256
    with store.open(pending.sha256) as fh:
        assert b"".join(iter_range(fh, (17 << 20) + 3, 1000)) == data[(17 << 20) + 3 : (17 << 20) + 1003]
    if backend.etag is not None:
        etag = backend.etag(blob_key(pending.sha256))
        assert etag.strip('"').endswith("-3"), etag  # a multipart upload of three parts
    assert store.commit(stage(store, data)) is False


def test_missing_blob(backend: Backend) -> None:
    sha = "0" * 64
    assert not backend.store.exists(sha)
    with pytest.raises(FileNotFoundError):
        backend.store.open(sha)
    with pytest.raises(ValueError, match="not a sha256"):
        backend.store.exists("../../etc/passwd")


def test_listing_skips_strays_and_filters_by_age(backend: Backend) -> None:
    store = backend.store
    sha, _ = put(store, LOG)
    backend.raw_put("README")(b"not a blob")
    backend.raw_put("ab/cd/" + "f" * 64 + ".zst")(b"misplaced")  # not under its own fan-out
    backend.raw_put("ab/cd/nothex.zst")(b"x")
    assert list(store.iter_blobs()) == [sha]
    assert list(store.iter_blobs(older_than=time.time() + 60)) == [sha]
    assert list(store.iter_blobs(older_than=time.time() - 3600)) == []


def test_discard_and_abort_leave_nothing(backend: Backend) -> None:
    store = backend.store
    pending = stage(store, LOG)
    store.discard(pending)
    assert staging_files(store) == []
    with pytest.raises(RuntimeError), store.writer() as w:
        w.write(b"half")
        raise RuntimeError("crash mid-write")
    assert staging_files(store) == []
    assert backend.keys() == []


def test_check_writable_leaves_no_probe(backend: Backend) -> None:
    backend.store.check_writable()
    assert backend.keys() == []
    assert list(backend.store.tmp_dir.iterdir()) == []


def test_directory_commit_makes_the_content_durable_before_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staging does not wait for the disk (a scan on the event loop must not); commit does, in
    the order a crash cannot break: content, then the name, then the directory holding it."""
    from app.blobstore.directory import blob_store_for

    store = blob_store_for(tmp_path)
    calls: list[tuple[str, str]] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def link(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(("link", str(dst)))
        real_link(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    with store.writer() as w:
        w.write(b"step 1 loss 2.0\n")
        pending = w.finish()
    assert calls == []
    assert store.commit(pending) is True
    final = store.path_of(pending.sha256)
    assert calls == [("fsync", pending.tmp_path), ("link", str(final)), ("fsync", str(final.parent))]
    calls.clear()
    with store.writer() as w:
        w.write(b"step 1 loss 2.0\n")
        again = w.finish()
    assert store.commit(again) is False  # already there: its copy is dropped, unsynced
    assert not Path(again.tmp_path).exists()
    assert calls == []


def test_staged_frames_each_decompress_to_their_content_whatever_the_writes(tmp_path: Path) -> None:
    """A blob is written in pieces of any size, as bytes or as a buffer its caller refills at once:
    every frame the index names decompresses alone to its part, the whole to the content."""
    import itertools
    import random

    from app.blobstore.base import StagingWriter, decompressing

    rnd = random.Random(7)
    reused_buffers = 0
    for _ in range(150):
        frame = rnd.choice([1, 7, 64, 1000])
        content = bytes(rnd.choice(b"ab\n") for _ in range(rnd.randint(0, 400)))
        w = StagingWriter(tmp_path, frame_bytes=frame, grams=False)
        pos = 0
        buf = bytearray()
        while pos < len(content):
            piece = content[pos : pos + rnd.randint(0, 60)]
            if rnd.random() < 0.5:
                w.write(piece)
            else:
                buf[:] = piece
                w.write(buf)  # type: ignore[arg-type]
                buf[:] = b"x" * len(buf)  # refilled before the frame ends: the writer kept a copy
                reused_buffers += 1
            pos += len(piece)
        pending = w.finish()
        raw = Path(pending.tmp_path).read_bytes()
        with decompressing(Path(pending.tmp_path).open("rb")) as r:
            assert r.read() == content
        index = pending.frames
        assert index is not None and index[-1][:2] == (len(content), len(raw))
        for (start, at, *_), (end, to, *_) in itertools.pairwise(index):
            assert zstandard.ZstdDecompressor().decompressobj().decompress(raw[at:to]) == content[start:end]
            assert end - start <= frame or (start, end) == (0, 0)
        Path(pending.tmp_path).unlink()
    assert reused_buffers > 100
