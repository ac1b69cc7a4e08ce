"""API tokens as authentication needs them: looked up by hash, their use recorded.

The HTTP foundation (`app.http.deps`, sign-in) calls these; it caches what they return
(`app.http.authcache`). Tokens are created and revoked by `logtriage tokens`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from app.db import repo
from app.db.models import utcnow
from app.service.context import ServiceContext

__all__ = ["KnownToken", "any_active", "hash_token", "lookup", "now", "touch", "touch_due"]


@dataclass(frozen=True)
class KnownToken:
    """A token row as authentication needs it (detached from any session)."""

    id: int
    name: str
    scopes: frozenset[str]
    token_hash: str
    expires_at: dt.datetime | None

    def expired(self, now: dt.datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


def hash_token(secret: str) -> str:
    """What is stored and looked up for a token's secret."""
    return repo.hash_token(secret)


def now() -> dt.datetime:
    """The clock token expiry is checked against (the database's UTC)."""
    return utcnow()


def lookup(ctx: ServiceContext, *, token_hash: str) -> KnownToken | None:
    """The unrevoked token with this hash, expired or not (callers check expiry at use)."""
    with ctx.db.read() as s:
        row = repo.token_by_hash(s, token_hash=token_hash)
        if row is None:
            return None
        return KnownToken(
            id=row.id, name=row.name, scopes=row.scope_set, token_hash=token_hash, expires_at=row.expires_at
        )


def any_active(ctx: ServiceContext) -> bool:
    """Whether any token exists that is neither revoked nor expired (else: open mode)."""
    with ctx.db.read() as s:
        return repo.any_active_token(s)


def touch_due(token_hash: str) -> bool:
    """Whether this process should record the token's use now (at most once a minute per token)."""
    return repo.touch_due(token_hash)


def touch(ctx: ServiceContext, *, token: KnownToken) -> None:
    with ctx.db.write() as s:
        repo.touch_token(s, token_id=token.id, token_hash=token.token_hash)
