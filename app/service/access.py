"""Who is asking, and what they may see: the same rules for the API, the web pages and Slack."""

from __future__ import annotations

from dataclasses import dataclass

from app.db.models import Analysis
from app.db.repo.tokens import SCOPES
from app.errors import ForbiddenError

ALL_SCOPES = frozenset(SCOPES)


@dataclass(frozen=True)
class Principal:
    token_id: int | None
    name: str
    scopes: frozenset[str]
    open_mode: bool = False
    via: str = "token"  # token | session | open | slack: how the request authenticated

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes

    @property
    def idempotency_scope(self) -> str:
        return f"token:{self.token_id}" if self.token_id is not None else "open"


def check_can_read(principal: Principal, row: Analysis) -> None:
    """`read` sees everything; an `ingest` token sees the analyses it posted (hooks poll them)."""
    if principal.allows("read"):
        return
    if principal.token_id is not None and row.token_id == principal.token_id:
        return
    raise ForbiddenError(f"token {principal.name!r} lacks the `read` scope for analyses it did not post")
