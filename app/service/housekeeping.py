"""What a crash leaves behind, found and removed at once: blob files no row refers to.

A server killed between putting a blob in place and committing its row leaves an orphan file.
With the directory store every server of the store runs on this host, and each claims the blobs
it is about to reference (`spool.claim`): a file that no row knows and no live server claims can
go now. The scan order matters: files first, then claims, then rows. A file seen in the first
step was put in place after its claim was written; if that claim is gone by the second step,
its row was committed before, and the third step sees it. An S3 bucket may be shared by servers
on other hosts, whose claims are not visible here: there only files older than an hour go.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from app.blobstore import BlobStore
from app.db import repo
from app.db.session import Database
from app.service.spool import live_claims

S3_GRACE_S = 3600


@dataclass
class Sweep:
    orphans: list[str] = field(default_factory=list)  # blob files no row refers to
    missing: list[str] = field(default_factory=list)  # rows whose file is gone (reported only)
    immediate: bool = True  # False: only files older than the grace period were considered


def sweep_orphans(*, db: Database, store: BlobStore, data_dir: Path, dry_run: bool = False) -> Sweep:
    from app.blobstore.directory import DirectoryBlobStore

    immediate = isinstance(store, DirectoryBlobStore)
    files = list(store.iter_blobs(older_than=None if immediate else time.time() - S3_GRACE_S))
    claimed = live_claims(data_dir)
    with db.read() as s:
        known = repo.known_blobs(s)
    orphans = [sha for sha in files if sha not in known and sha not in claimed]
    missing = sorted(known - set(files)) if immediate else []
    if not dry_run:
        for sha in orphans:
            store.delete(sha)
    return Sweep(orphans, missing, immediate)
