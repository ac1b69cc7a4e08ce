"""What the server hands a scan worker and gets back: plain, picklable data.

A worker may run in another process (spawned), on Ray, or in this process (the CLI, tests):
only these types cross that boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.blobstore import PendingBlob
from app.db.repo import RuleRecord
from app.errors import (
    InputError,
    LogtriageError,
    all_errors,
)

# --- data passed to and from scan workers (picklable) ------------------------------------------


@dataclass(frozen=True)
class InputFile:
    name: str  # what findings cite (the uploaded file name)
    path: str  # the spooled upload, as sent: plain, gzip or zstd
    data: bytes | None = None  # the upload itself when it was small: then `path` does not exist
    # the body is still arriving: `path` grows until its `.done` marker (app.service.spool), and
    # `expected` is its declared length (None: unknown; `size` is then what has arrived so far)
    growing: bool = False
    expected: int | None = None

    @property
    def size(self) -> int:
        if self.growing:
            if self.expected is not None:
                return self.expected
            try:
                return Path(self.path).stat().st_size
            except FileNotFoundError:
                return 0  # its request failed and took the spool: the read says so
        return len(self.data) if self.data is not None else Path(self.path).stat().st_size

    def read(self) -> bytes:
        return self.data if self.data is not None else Path(self.path).read_bytes()


@dataclass(frozen=True)
class SiteRules:
    """The site rule pack a job is triaged with (app.service.sitepack): its digest, its rules
    as mappings with where each came from, and the classes it added. Small: it travels with
    every job, so every worker process uses the pack of the moment without a restart."""

    digest: str
    rules: tuple[tuple[dict[str, Any], str], ...] = ()
    classes: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class ScanJob:
    files: tuple[InputFile, ...]
    config: InputFile | None = None
    framework: str | None = None
    exit_code: int | None = None
    site: SiteRules | None = None


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
    site: SiteRules | None = None


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
