"""What an operator runs against the service's database from the shell (`logtriage serve`,
`doctor`, `db`, `tokens`, `retriage`): the CLI's one way in, so it never opens sessions itself.

A `Admin` handle is opened once per command (`open_admin`) and disposed when it ends; every
function here takes it by keyword.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.errors import ServiceUnavailableError

if TYPE_CHECKING:
    from app.db.models import ApiToken
    from app.db.session import Database
    from app.service.housekeeping import Sweep
    from app.settings import Settings

__all__ = [
    "Admin",
    "Garbage",
    "SchemaState",
    "TokenInfo",
    "any_active_token",
    "collect_garbage",
    "create_token",
    "ensure_schema",
    "list_tokens",
    "mark_interrupted",
    "move_schema",
    "open_admin",
    "retriage_candidates",
    "revoke_token",
    "safe_url",
    "schema_state",
    "sweep",
    "wait_for_database",
]


@dataclass(frozen=True, kw_only=True)
class Admin:
    """The settings a command runs under and the database handle opened for it."""

    settings: Settings
    db: Database

    @property
    def url(self) -> str:
        """The database URL as it may be printed (password hidden)."""
        return safe_url(self.settings.effective_database_url)


@dataclass(frozen=True, kw_only=True)
class SchemaState:
    current: str | None
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


@dataclass(frozen=True, kw_only=True)
class Garbage:
    unreferenced: int
    orphans: int


@dataclass(frozen=True, kw_only=True)
class TokenInfo:
    """A token as `logtriage tokens list` shows it (never its secret or hash)."""

    id: int
    name: str
    prefix: str
    scopes: list[str]
    created_at: str
    last_used_at: str | None
    expires_at: str | None
    revoked_at: str | None


def safe_url(url: str) -> str:
    from sqlalchemy import make_url

    return make_url(url).render_as_string(hide_password=True)


@contextmanager
def open_admin(*, settings: Settings) -> Iterator[Admin]:
    """The CLI's database: a bounded connect, no statement deadline (gc, retriage and migrations
    may run long) and the pool's default patience; disposed when the command ends."""
    from app.db.session import Database, DbTimeouts

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(
        settings.effective_database_url, timeouts=DbTimeouts(connect=settings.db_connect_timeout, pool=30.0)
    )
    try:
        yield Admin(settings=settings, db=db)
    finally:
        db.dispose()


def wait_for_database(*, admin: Admin, wait_s: float) -> None:
    """Reach the database before anything else, or raise one line with exit status 1: a
    traceback says less to the operator than the URL and the cause."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        try:
            with admin.db.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return
        except DBAPIError as exc:
            cause = str(exc.orig or exc).strip().splitlines()[0][:200]
            if time.monotonic() >= deadline:
                more = "" if wait_s else "; `--wait-for-db SECONDS` waits for it"
                err = ServiceUnavailableError(f"the database {admin.url} cannot be reached ({cause}){more}")
                err.exit_code = 1  # what process supervisors expect of a service that cannot start
                raise err from None
            time.sleep(1.0)  # polling a server that is not there yet: nothing to wait on instead


def ensure_schema(*, admin: Admin) -> str | None:
    """Migrate to the latest schema (one process at a time) and say which revision it is at."""
    from app.db.migrate import current_revision, ensure_current

    ensure_current(admin.db.engine, lock_dir=admin.settings.data_dir)
    return current_revision(admin.db.engine)


def schema_state(*, admin: Admin) -> SchemaState:
    from app.db.migrate import current_revision, head_revision

    return SchemaState(current=current_revision(admin.db.engine), head=head_revision())


def move_schema(*, admin: Admin, revision: str, down: bool) -> tuple[str | None, str | None]:
    """(before, after) of an explicit upgrade or downgrade."""
    from app.db.migrate import current_revision, downgrade, upgrade

    before = current_revision(admin.db.engine)
    (downgrade if down else upgrade)(admin.db.engine, revision)
    return before, current_revision(admin.db.engine)


def this_host() -> str:
    # what socket.gethostname() returns, without importing socket
    return os.uname().nodename


def mark_interrupted(*, admin: Admin, host: str) -> int:
    """Analyses this host's dead servers left pending: marked failed (they will not finish)."""
    from app.db import repo
    from app.service.spool import pid_alive

    with admin.db.write() as s:
        alive = [p for p in repo.pending_runner_pids(s, host=host) if pid_alive(p)]
        return int(repo.mark_interrupted(s, host=host, alive=alive))


def sweep(*, admin: Admin, dry_run: bool = False) -> Sweep:
    """Blob files no row knows (at once unless a live server claims them) and rows whose file is gone."""
    from app.blobstore import open_blob_store
    from app.service.housekeeping import sweep_orphans

    settings = admin.settings
    return sweep_orphans(
        db=admin.db, store=open_blob_store(settings), data_dir=settings.data_dir, dry_run=dry_run
    )


def clean_staging(*, admin: Admin) -> int:
    """Staging files of servers that are no longer running; how many were removed."""
    from app.service.spool import clean_stale_tmp

    return clean_stale_tmp(admin.settings.data_dir)


def collect_garbage(*, admin: Admin, dry_run: bool) -> Garbage:
    """Delete blobs nothing refers to (rows and files), stale staging files and orphan files."""
    from app.blobstore import open_blob_store
    from app.db import repo

    store = open_blob_store(admin.settings)
    with admin.db.read() as s:
        unreferenced = repo.unreferenced_blobs(s)
    if not dry_run:
        with admin.db.write() as s:
            repo.delete_blob_rows(s, shas=unreferenced)
        for sha in unreferenced:
            store.delete(sha)
        clean_staging(admin=admin)
    orphans = sweep(admin=admin, dry_run=dry_run).orphans
    return Garbage(unreferenced=len(unreferenced), orphans=len(orphans))


def any_active_token(*, admin: Admin) -> bool:
    from app.db import repo

    with admin.db.read() as s:
        return repo.any_active_token(s)


def create_token(
    *, admin: Admin, name: str, scopes: Sequence[str], expires_at: dt.datetime | None
) -> tuple[TokenInfo, str]:
    """The new token and its secret (shown once: only its hash is stored)."""
    from app.db import repo

    with admin.db.write() as s:
        row, secret = repo.create_token(s, name=name, scopes=list(scopes), expires_at=expires_at)
        s.flush()
        return _token_info(row), secret


def list_tokens(*, admin: Admin) -> list[TokenInfo]:
    from app.db import repo

    with admin.db.read() as s:
        return [_token_info(t) for t in repo.list_tokens(s)]


def revoke_token(*, admin: Admin, name_or_id: str) -> str:
    """The revoked token's name (unknown: NotFoundError)."""
    from app.db import repo

    with admin.db.write() as s:
        return str(repo.revoke_token(s, name_or_id=name_or_id).name)


def retriage_candidates(
    *,
    admin: Admin,
    since: dt.datetime | None,
    until: dt.datetime | None,
    failure_class: str | None,
    limit: int | None,
) -> list[str]:
    from app.db import repo

    with admin.db.read() as s:
        return list(
            repo.retriage_candidates(s, since=since, until=until, failure_class=failure_class, limit=limit)
        )


def _token_info(t: ApiToken) -> TokenInfo:
    def iso(v: dt.datetime | None) -> str | None:
        return v.isoformat() if v else None

    return TokenInfo(
        id=t.id,
        name=t.name,
        prefix=t.prefix,
        scopes=t.scopes.split(),
        created_at=t.created_at.isoformat(),
        last_used_at=iso(t.last_used_at),
        expires_at=iso(t.expires_at),
        revoked_at=iso(t.revoked_at),
    )
