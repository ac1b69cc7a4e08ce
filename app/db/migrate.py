"""Alembic, driven from code: `logtriage db upgrade`, `serve` and the app's startup use these."""

from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from app.errors import ServiceUnavailableError

ROOT = Path(__file__).resolve().parents[2]


def migrations_dir() -> Path:
    for candidate in (ROOT / "migrations", Path(__file__).resolve().parents[1] / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ServiceUnavailableError("cannot find the migrations/ directory next to the app package")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@functools.cache
def head_revision() -> str:
    """The newest revision of this code's migrations. Read once a process: the scripts cannot
    change under a running process, and reading them (Alembic executes each file) took ~12 ms of
    CPU with the GIL held, on every `/readyz`, beside the uploads of a burst."""
    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    return heads[0]


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def is_current(engine: Engine) -> bool:
    return current_revision(engine) == head_revision()


@contextmanager
def _lock(lock_dir: Path) -> Iterator[None]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_dir / ".migrate.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def ensure_current(engine: Engine, *, lock_dir: Path) -> bool:
    """Upgrade to head unless already there (several server processes may race: take a lock).

    Returns True when a migration ran.
    """
    if is_current(engine):
        return False
    with _lock(lock_dir):
        if is_current(engine):
            return False
        upgrade(engine)
        return True
