"""Blobs in an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, R2, ...) through ``obstore``.

Keys are ``<prefix>/ab/cd/<sha256>.zst``, the directory store's layout, so ``aws s3 sync
data/blobs s3://bucket/prefix`` moves an existing store. Blobs are staged locally (the scan
workers write them, the server commits them) and uploaded on ``commit``:

- put-if-absent: a HEAD first, so an existing blob is never uploaded again; small blobs then go up
  with one conditional PUT (``If-None-Match: *``: exactly one committer sees them as new);
- large blobs stream from the staging file as a multipart upload (``PART_SIZE`` parts, at most
  ``UPLOAD_CONCURRENCY`` in flight); the object appears only when the upload completes;
- reads are ranged GETs of ``READ_BUFFER`` bytes each, decompressed as they arrive; a read from
  a frame (``open_at``, the log viewer) is one GET of the object from that offset on, streamed
  in ``SEEK_CHUNK`` pieces and dropped once the caller has what it needs.

``obstore`` is imported only when an s3:// URL is configured (extra ``logtriage[s3]``).
Credentials come from the standard AWS environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, web identity, ECS/EC2 instance metadata).
Failures to reach the store become ``ServiceUnavailableError`` (503); the server log has the cause.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import importlib.util
import io
import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from app.blobstore.base import PendingBlob, StagingWriter, blob_key, decompressing, sha_of_key
from app.errors import ServiceUnavailableError, UsageError

log = logging.getLogger("logtriage.blobstore")

PART_SIZE = 8 << 20  # multipart part size; 10,000 parts allow 80 GB objects
SINGLE_PUT_MAX = PART_SIZE  # at most this many bytes are read into memory for a one-request PUT
UPLOAD_CONCURRENCY = 4  # parts in flight: upload memory stays under PART_SIZE * this
READ_BUFFER = 8 << 20  # bytes per ranged GET while reading
SEEK_CHUNK = 256 << 10  # pieces of an `open_at` stream: a viewer needs well under a frame
ATTRIBUTES = {"Content-Type": "application/zstd"}


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (bucket, "some/prefix")."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise UsageError(f"LOGTRIAGE_BLOB_URL: expected s3://bucket[/prefix], got {url!r}")
    return parts.netloc, parts.path.strip("/")


class S3BlobStore:
    """Content-addressed blobs under ``s3://bucket/prefix``; staging files under ``tmp_dir``."""

    def __init__(
        self,
        url: str,
        *,
        tmp_dir: Path,
        endpoint_url: str | None = None,
        region: str | None = None,
    ) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self.location = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.tmp_dir = tmp_dir
        self.endpoint_url = endpoint_url
        self.region = region
        if importlib.util.find_spec("obstore") is None:
            raise UsageError(
                f"LOGTRIAGE_BLOB_URL is {url!r} but the S3 client is not installed: "
                "pip install 'logtriage[s3]' (obstore)"
            )
        self._client: Any = None  # built on first use: scan workers that never read never start it
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3BlobStore({self.location!r}, endpoint={self.endpoint_url!r})"

    # -- client and errors ----------------------------------------------------------------------

    def _store(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        from obstore.store import S3Store

        make: Any = S3Store  # plain dicts for its TypedDict options
        config: dict[str, Any] = {}
        if self.endpoint_url:
            config["endpoint"] = self.endpoint_url
        if self.region:
            config["region"] = self.region
        client_options: dict[str, Any] = {"connect_timeout": "5s", "timeout": "120s"}
        if self.endpoint_url and self.endpoint_url.startswith("http://"):
            client_options["allow_http"] = True
        retry = {
            "max_retries": 3,
            "retry_timeout": dt.timedelta(seconds=30),
            "backoff": {
                "init_backoff": dt.timedelta(milliseconds=100),
                "max_backoff": dt.timedelta(seconds=2),
                "base": 2,
            },
        }
        return make(
            self.bucket,
            prefix=self.prefix or None,
            config=config,
            client_options=client_options,
            retry_config=retry,
        )

    @contextlib.contextmanager
    def _mapped(self, op: str, key: str, *, missing_ok: bool = False) -> Iterator[None]:
        """obstore and transport errors -> ServiceUnavailableError.

        A 404 is ``FileNotFoundError``: passed on where it means "no such blob" (``missing_ok``),
        else (a PUT or LIST answered 404: the bucket is gone) the store is unavailable.
        """
        from obstore.exceptions import BaseError

        try:
            yield
        except FileNotFoundError as exc:
            if missing_ok:
                raise
            raise self._unavailable(op, key, exc) from None
        except (BaseError, ConnectionError, TimeoutError) as exc:
            raise self._unavailable(op, key, exc) from None

    def _unavailable(self, op: str, key: str, exc: BaseException) -> ServiceUnavailableError:
        first = (str(exc).splitlines() or [""])[0][:500]
        log.warning("blob store %s: %s %s failed: %s: %s", self.location, op, key, type(exc).__name__, first)
        return ServiceUnavailableError(
            f"blob store unavailable: {op} failed ({type(exc).__name__}); retry later "
            "(the server log has the details)"
        )

    def _missing(self, key: str) -> FileNotFoundError:
        return FileNotFoundError(errno.ENOENT, "blob not in the store", f"{self.location}/{key}")

    def _exists_key(self, key: str) -> bool:
        import obstore

        try:
            obstore.head(self._store(), key)
        except FileNotFoundError:
            return False
        return True

    # -- the BlobStore protocol -----------------------------------------------------------------

    def writer(self, *, size: int | None = None, sync: bool = False) -> StagingWriter:
        return StagingWriter(self.tmp_dir, size=size)  # uploaded from the page cache: no fsync

    def commit(self, pending: PendingBlob) -> bool:
        """Upload a staged blob unless it is there already; True when this call stored it."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        key = blob_key(pending.sha256)
        tmp = Path(pending.tmp_path)
        try:
            with self._mapped("upload", key):
                if self._exists_key(key):
                    return False
                store = self._store()
                if pending.stored_size <= SINGLE_PUT_MAX:
                    try:
                        obstore.put(store, key, tmp.read_bytes(), mode="create", attributes=ATTRIBUTES)
                    except (AlreadyExistsError, PreconditionError):
                        return False  # another committer won the race
                else:
                    # multipart cannot be conditional here: a concurrent upload of the same
                    # content may overwrite it with identical bytes (both report it as new)
                    with tmp.open("rb") as fh:
                        obstore.put(
                            store,
                            key,
                            fh,
                            attributes=ATTRIBUTES,
                            use_multipart=True,
                            chunk_size=PART_SIZE,
                            max_concurrency=UPLOAD_CONCURRENCY,
                        )
                return True
        finally:
            tmp.unlink(missing_ok=True)

    def discard(self, pending: PendingBlob) -> None:
        Path(pending.tmp_path).unlink(missing_ok=True)

    def open(self, sha256: str) -> BinaryIO:
        import obstore

        key = blob_key(sha256)
        try:
            with self._mapped("read", key, missing_ok=True):
                reader = obstore.open_reader(self._store(), key, buffer_size=READ_BUFFER)
        except FileNotFoundError:
            raise self._missing(key) from None
        return decompressing(io.BufferedReader(_ObjectReader(self, key, reader), buffer_size=1 << 20))

    def open_at(self, sha256: str, compressed_offset: int) -> BinaryIO:
        import obstore

        key = blob_key(sha256)
        options: dict[str, Any] = {"range": {"offset": compressed_offset}} if compressed_offset else {}
        try:
            with self._mapped("read", key, missing_ok=True):
                result = obstore.get(self._store(), key, options=options or None)  # type: ignore[arg-type]
                stream = result.stream(min_chunk_size=SEEK_CHUNK)
        except FileNotFoundError:
            raise self._missing(key) from None
        return decompressing(io.BufferedReader(_StreamReader(self, key, stream), buffer_size=SEEK_CHUNK))

    def read_stored(self, sha256: str, offset: int, length: int) -> bytes:
        import obstore

        key = blob_key(sha256)
        with self._mapped("read", key, missing_ok=True):
            try:
                result = obstore.get(self._store(), key, options={"range": (offset, offset + length)})
                return bytes(result.bytes())
            except FileNotFoundError:
                raise self._missing(key) from None

    def exists(self, sha256: str) -> bool:
        key = blob_key(sha256)
        with self._mapped("head", key, missing_ok=True):
            return self._exists_key(key)

    def delete(self, sha256: str) -> None:
        import obstore

        key = blob_key(sha256)
        with self._mapped("delete", key):
            obstore.delete(self._store(), key)  # S3 DELETE of a missing key succeeds

    def iter_blobs(self, *, older_than: float | None = None) -> Iterator[str]:
        """Every stored blob; with ``older_than`` (epoch seconds) only those modified before it."""
        import obstore

        with self._mapped("list", "/"):
            for batch in obstore.list(self._store(), None, chunk_size=1000):
                for meta in batch:
                    sha = sha_of_key(meta["path"])
                    if sha is None:
                        continue
                    if older_than is not None and meta["last_modified"].timestamp() >= older_than:
                        continue
                    yield sha

    def check_writable(self) -> None:
        """Write and delete a probe object (credentials, bucket and network in one request pair)."""
        import obstore

        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        key = f"_probe/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        with self._mapped("write probe", key):
            obstore.put(self._store(), key, b"ok")
            obstore.delete(self._store(), key)


class _ObjectReader(io.RawIOBase):
    """An obstore ``ReadableFile`` as a raw stream whose errors are the app's."""

    def __init__(self, owner: S3BlobStore, key: str, reader: Any) -> None:
        self._owner = owner
        self._key = key
        self._reader = reader

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:
        view = memoryview(buffer).cast("B")
        try:
            with self._owner._mapped("read", self._key, missing_ok=True):
                data = self._reader.read(len(view))
        except FileNotFoundError:
            raise self._owner._missing(self._key) from None
        n = len(data)
        view[:n] = memoryview(data)
        return n

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._reader.close()
        super().close()


class _StreamReader(io.RawIOBase):
    """The chunks of one streamed GET as a raw stream whose errors are the app's."""

    def __init__(self, owner: S3BlobStore, key: str, stream: Any) -> None:
        self._owner = owner
        self._key = key
        self._stream = stream
        self._left = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:
        view = memoryview(buffer).cast("B")
        if not self._left:
            try:
                with self._owner._mapped("read", self._key, missing_ok=True):
                    chunk = next(self._stream, None)
            except FileNotFoundError:
                raise self._owner._missing(self._key) from None
            if chunk is None:
                return 0
            self._left = memoryview(chunk).cast("B")
        n = min(len(view), len(self._left))
        view[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def close(self) -> None:
        self._stream = iter(())  # drops the response: the rest of the object is never read
        self._left = memoryview(b"")
        super().close()
