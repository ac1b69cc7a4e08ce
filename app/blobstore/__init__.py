"""Content-addressed store for redacted logs: sha256 of the content, zstd-compressed.

Writing is two-phase so a crash never leaves a half blob under its final name and the database
row and the blob are committed together:

1. ``store.writer()`` streams content into a temporary file in the data dir's ``tmp/``, hashing
   and compressing as it goes; ``finish()`` closes it and returns a ``PendingBlob``.
2. ``store.commit(pending)`` makes it durable and puts it in place atomically (returns whether it
   was new): the disk wait happens there, in the server's writer, not where the log is scanned;
   ``store.discard(pending)`` throws it away. The caller deletes a new blob again if the database
   transaction that refers to it fails.

``BlobStore`` is the interface (``base``); ``DirectoryBlobStore`` keeps blobs under the data dir
(``directory``), ``S3BlobStore`` in an S3-compatible bucket (``s3``, optional extra ``s3``).
``open_blob_store(settings)`` builds the configured one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.blobstore.base import (
    SHA256_RE,
    ZSTD_LEVEL,
    BlobStore,
    BlobWriter,
    PendingBlob,
    StagingWriter,
    blob_key,
    iter_range,
)
from app.blobstore.directory import DirectoryBlobStore, blob_store_for

if TYPE_CHECKING:
    from app.settings import Settings

__all__ = [
    "SHA256_RE",
    "ZSTD_LEVEL",
    "BlobStore",
    "BlobWriter",
    "DirectoryBlobStore",
    "PendingBlob",
    "StagingWriter",
    "blob_key",
    "blob_store_for",
    "iter_range",
    "open_blob_store",
]


def open_blob_store(settings: Settings) -> BlobStore:
    """The store ``LOGTRIAGE_BLOB_URL`` selects: unset = ``<data dir>/blobs``, ``s3://…`` = S3."""
    if not settings.blob_url:
        return blob_store_for(settings.data_dir)
    from app.blobstore.s3 import S3BlobStore

    return S3BlobStore(
        settings.blob_url,
        tmp_dir=settings.data_dir / "tmp",
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
    )
