"""Staging directories of uploads, and cleaning what a dead server process left."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import InputError


def runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def spool_path_for(data_dir: Path) -> Path:
    """A new request's staging directory: created by the first file written to it (a small
    upload never is), removed with `remove_tree` either way."""
    return data_dir / "tmp" / f"up-{os.getpid()}-{os.urandom(6).hex()}"


def clean_stale_tmp(data_dir: Path) -> int:
    """Remove staging files of server processes that are gone (safe while other servers run)."""
    tmp = data_dir / "tmp"
    if not tmp.is_dir():
        return 0
    removed = 0
    for p in tmp.iterdir():
        parts = p.name.split("-")
        pid = next((int(x) for x in parts[1:2] if x.isdigit()), None)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed += 1
    return removed


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_tree(path: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(path, ignore_errors=True)


# --- blob claims: what a live server is about to reference --------------------------------------
#
# A blob file is put in place before the transaction that inserts its row, so a server killed in
# between leaves a file nothing refers to. Each server writes a claim (an empty file named after
# the blob) before it puts a blob in place and removes it once the row is committed or the blob
# deleted. A blob file that no row knows and no *live* server claims is an orphan: it can go at
# once, not after an hour's grace. Claims live under `claims/<pid>/`; a dead server's directory
# is removed by the next sweep (`live_claims`).


def claim_dir(data_dir: Path) -> Path:
    return data_dir / "claims" / str(os.getpid())


def claim(data_dir: Path, shas: list[str]) -> list[Path]:
    d = claim_dir(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    tag = os.urandom(4).hex()  # two batches of one server may claim the same blob
    paths = [d / f"{sha}.{tag}" for sha in shas]
    for p in paths:
        p.touch()
    return paths


def release(paths: list[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)


def live_claims(data_dir: Path) -> set[str]:
    """Blobs claimed by servers that are still running."""
    out: set[str] = set()
    root = data_dir / "claims"
    if not root.is_dir():
        return out
    for d in root.iterdir():
        pid = d.name
        if not pid.isdigit() or not (int(pid) == os.getpid() or pid_alive(int(pid))):
            shutil.rmtree(d, ignore_errors=True)  # a dead server's: its blobs are rows or orphans
            continue
        try:
            out.update(name.split(".", 1)[0] for name in os.listdir(d))
        except FileNotFoundError:
            continue
    return out


# --- a spooled body read while it still arrives --------------------------------------------------
#
# A big raw upload is analysed while its body is still being received: the server writes the
# spool file, a scan worker (another process) reads behind it. The writer ends the file with a
# marker beside it: `<file>.done` holding the final size, or `<file>.abort`; a spool that is gone
# (the request failed and its directory was removed) is an abort too.

DONE_SUFFIX = ".done"
ABORT_SUFFIX = ".abort"
_POLL_S = 0.002


def mark_done(path: Path, size: int) -> None:
    tmp = path.with_name(path.name + DONE_SUFFIX + ".tmp")
    try:
        tmp.write_text(str(size))
        tmp.rename(path.with_name(path.name + DONE_SUFFIX))  # atomic: the reader never sees half
    except FileNotFoundError:
        pass  # the analysis ended before the body did (a binary upload) and took its spool


def mark_aborted(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.with_name(path.name + ABORT_SUFFIX).touch()


class GrowingFileAborted(InputError):
    """The upload being read was not completed (its request failed; that request says why)."""


class GrowingFile(io.RawIOBase):
    """Reads a file another process is still writing, up to the size its `.done` marker gives.

    At the current end it waits (polling: the writer is another process and the wait is short),
    `stall_s` at most for a byte or the marker: the body timeouts of the request that writes it
    end a stalled upload long before that."""

    def __init__(self, path: Path, *, stall_s: float = 600.0) -> None:
        self.path = path
        try:
            self._fh = path.open("rb", buffering=0)
        except FileNotFoundError:
            raise GrowingFileAborted(f"{path.name}: the upload was not completed") from None
        self._read = 0
        self._final: int | None = None
        self._stall_s = stall_s

    def readable(self) -> bool:
        return True

    def _final_size(self) -> int | None:
        if self._final is None:
            done = self.path.with_name(self.path.name + DONE_SUFFIX)
            with contextlib.suppress(FileNotFoundError, ValueError):
                self._final = int(done.read_text())
        return self._final

    def readinto(self, buffer: Any, /) -> int:
        view = memoryview(buffer)
        waited_since: float | None = None
        while True:
            final = self._final_size()
            want = len(view) if final is None else min(len(view), final - self._read)
            if want <= 0:
                return 0
            n = self._fh.readinto(view[:want]) or 0
            if n:
                self._read += n
                return n
            if final is not None:  # the writer closed the file before it wrote the marker
                raise GrowingFileAborted(f"{self.path.name}: shorter than its upload ({final} bytes)")
            if self.path.with_name(self.path.name + ABORT_SUFFIX).exists() or not self.path.exists():
                raise GrowingFileAborted(f"{self.path.name}: the upload was not completed")
            now = time.monotonic()
            waited_since = waited_since or now
            if now - waited_since > self._stall_s:
                raise GrowingFileAborted(f"{self.path.name}: nothing arrived for {self._stall_s:g} s")
            time.sleep(_POLL_S)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._fh.close()
        super().close()


# --- one upload's staging folder, as the edges hold it ------------------------------------------


@dataclass(eq=False)
class Staging:
    """Where one upload's files are spooled before its analysis (`staged_upload`). Handed to
    `ops.submit`/`ops.begin`, it belongs to the analysis, which removes it when done."""

    path: Path
    handed_over: bool = False

    def hand_over(self) -> Path:
        self.handed_over = True
        return self.path

    def remove(self) -> None:
        """Remove it now (also after hand-over: an analysis cancelled before it read anything)."""
        remove_tree(self.path)


@contextlib.contextmanager
def staged_upload(*, data_dir: Path) -> Iterator[Staging]:
    """A new staging folder for one upload (REST, web form, Slack alike). Left without being
    handed to an analysis, by return or by error, it is removed: an edge cannot leak one."""
    staging = Staging(path=spool_path_for(data_dir))
    try:
        yield staging
    finally:
        if not staging.handed_over:
            remove_tree(staging.path)
