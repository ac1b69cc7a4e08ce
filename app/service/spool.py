"""Staging directories of uploads, and cleaning what a dead server process left."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from pathlib import Path


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
