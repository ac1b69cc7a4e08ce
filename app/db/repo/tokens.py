"""API tokens: only a hash is stored."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import time
from collections.abc import Sequence

from sqlalchemy import exists, or_, select, update
from sqlalchemy.orm import Session

from app.db.models import (
    ApiToken,
    utcnow,
)
from app.errors import ConflictError, NotFoundError, UsageError

SCOPES = ("ingest", "read", "admin", "rules:write")  # rules:write: publish site rules (issue 23)
TOKEN_PREFIX = "lt_"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    session: Session, *, name: str, scopes: Sequence[str], expires_at: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise UsageError(f"scopes must be among {', '.join(SCOPES)} (got {', '.join(scopes) or 'none'})")
    if session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None:
        raise ConflictError(f"a token named {name!r} exists; pick another name or revoke it first")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        name=name,
        prefix=secret[:10],
        token_hash=hash_token(secret),
        scopes=" ".join(s for s in SCOPES if s in scopes),
        created_at=utcnow(),
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return row, secret


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def revoke_token(session: Session, *, name_or_id: str) -> ApiToken:
    cond = ApiToken.name == name_or_id
    if name_or_id.isdigit():
        cond = or_(cond, ApiToken.id == int(name_or_id))
    row = session.scalar(select(ApiToken).where(cond))
    if row is None:
        raise NotFoundError(f"no token {name_or_id!r}; `logtriage tokens list` shows them")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return row


def token_by_hash(session: Session, *, token_hash: str) -> ApiToken | None:
    """The unrevoked token with this hash, expired or not (callers check expiry at use)."""
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash))
    return None if row is None or row.revoked_at is not None else row


def token_for_secret(session: Session, *, secret: str) -> ApiToken | None:
    row = token_by_hash(session, token_hash=hash_token(secret))
    if row is None or (row.expires_at is not None and row.expires_at <= utcnow()):
        return None
    return row


def any_active_token(session: Session) -> bool:
    now = utcnow()
    return bool(
        session.scalar(
            select(
                exists().where(
                    ApiToken.revoked_at.is_(None),
                    or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
                )
            )
        )
    )


_LAST_TOUCH: dict[str, float] = {}  # token hash -> when this process last recorded its use


def touch_due(token_hash: str) -> bool:
    """Whether this process should record the token's use now: at most once a minute per token,
    so a fleet of hooks sharing one token does not queue on updates of its row. (Keyed by the
    hash, not the id: ids repeat across databases.)"""
    return time.monotonic() - _LAST_TOUCH.get(token_hash, 0) >= 60


def touch_token(session: Session, *, token_id: int, token_hash: str) -> None:
    """Record last use (callers check `touch_due` first: no write transaction when not due)."""
    _LAST_TOUCH[token_hash] = time.monotonic()
    session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=utcnow()))
