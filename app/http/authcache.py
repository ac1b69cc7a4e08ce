"""What this server process last read about API tokens, kept for a few seconds.

Reading the token table cost a web process ~1.3 ms of CPU per request at 50 concurrent hooks
(a session, a pool checkout with its ping, a query, a rollback): a tenth of the request. Tokens
change rarely, and only through `logtriage tokens` in another process, which cannot tell this
one; so a lookup is reused for `ttl` seconds (`LOGTRIAGE_AUTH_CACHE_SECONDS`). The price, and
the documented contract: a revoked token keeps working on a server for at most `ttl` seconds,
and open mode ends at most `ttl` seconds after the first token is created. Expiry is not cached:
it is checked on every use against the clock.

While the database cannot answer, what was last read (at most `STALE_IF_ERROR_S` old) is used
instead of failing the request: a request that needs no other data (the rule list) is served
through an outage, and one that does gets its 503 from its own query. Tokens cannot be created
or revoked without the database, so nothing newer is being missed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from app.service.tokens import KnownToken

STALE_IF_ERROR_S = 300.0  # the oldest lookup used while the database cannot answer
OUTAGE_HOLD_S = 5.0  # after a failed read, use a stale lookup without asking for this long
MAX_ENTRIES = 10_000  # unknown secrets are remembered too; a flood of them must not grow memory


class Miss:
    """Nothing (fresh) is known: read the database."""


MISS = Miss()


class AuthCache:
    def __init__(self, ttl: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[float, KnownToken | None]] = {}
        self._open: tuple[float, bool] | None = None
        self._failed_at: float | None = None

    def token(self, token_hash: str) -> KnownToken | Miss | None:
        """The token with this hash (None: no such active token), or MISS."""
        hit = self._tokens.get(token_hash)
        if hit is None or self._clock() - hit[0] >= self.ttl:
            return MISS
        return hit[1]

    def remember_token(self, token_hash: str, token: KnownToken | None) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if len(self._tokens) >= MAX_ENTRIES:
                self._tokens.clear()
            self._tokens[token_hash] = (self._clock(), token)

    def tokens_exist(self) -> bool | Miss:
        """Whether any active token exists (open mode ends when one does), or MISS."""
        hit = self._open
        if hit is None or self._clock() - hit[0] >= self.ttl:
            return MISS
        return hit[1]

    def remember_tokens_exist(self, exist: bool) -> None:
        if self.ttl > 0:
            self._open = (self._clock(), exist)

    def stale_token(self, token_hash: str) -> KnownToken | Miss | None:
        """The last lookup of this token, however old up to STALE_IF_ERROR_S, or MISS."""
        hit = self._tokens.get(token_hash)
        if hit is None or self._clock() - hit[0] >= STALE_IF_ERROR_S:
            return MISS
        return hit[1]

    def stale_tokens_exist(self) -> bool | Miss:
        hit = self._open
        if hit is None or self._clock() - hit[0] >= STALE_IF_ERROR_S:
            return MISS
        return hit[1]

    def database_failed(self) -> None:
        self._failed_at = self._clock()

    def in_outage(self) -> bool:
        """A read failed within OUTAGE_HOLD_S: don't wait on the database for a stale answer."""
        failed = self._failed_at
        return failed is not None and self._clock() - failed < OUTAGE_HOLD_S
