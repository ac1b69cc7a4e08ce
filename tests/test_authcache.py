"""The per-process token cache: entries lapse after `ttl`, expiry is never cached."""

from __future__ import annotations

import datetime as dt

from app.http.authcache import MAX_ENTRIES, AuthCache, KnownToken, Miss


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def token(expires_at: dt.datetime | None = None) -> KnownToken:
    return KnownToken(
        id=7, name="hooks", scopes=frozenset({"ingest"}), token_hash="h" * 64, expires_at=expires_at
    )


def test_a_lookup_is_reused_until_it_is_ttl_old() -> None:
    clock = Clock()
    cache = AuthCache(5.0, clock=clock)
    assert isinstance(cache.token("h" * 64), Miss)
    cache.remember_token("h" * 64, token())
    clock.now += 4.9
    assert cache.token("h" * 64) == token()
    clock.now += 0.1
    assert isinstance(cache.token("h" * 64), Miss)


def test_unknown_secrets_are_remembered_as_none() -> None:
    clock = Clock()
    cache = AuthCache(5.0, clock=clock)
    cache.remember_token("u" * 64, None)
    assert cache.token("u" * 64) is None
    clock.now += 5
    assert isinstance(cache.token("u" * 64), Miss)


def test_open_mode_answer_lapses() -> None:
    clock = Clock()
    cache = AuthCache(2.0, clock=clock)
    assert isinstance(cache.tokens_exist(), Miss)
    cache.remember_tokens_exist(False)
    assert cache.tokens_exist() is False
    clock.now += 2
    assert isinstance(cache.tokens_exist(), Miss)


def test_ttl_zero_remembers_nothing() -> None:
    cache = AuthCache(0)
    cache.remember_token("h" * 64, token())
    cache.remember_tokens_exist(True)
    assert isinstance(cache.token("h" * 64), Miss)
    assert isinstance(cache.tokens_exist(), Miss)


def test_expiry_is_checked_at_use_not_cached() -> None:
    now = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
    t = token(expires_at=now + dt.timedelta(seconds=1))
    assert not t.expired(now)
    assert t.expired(now + dt.timedelta(seconds=1))
    assert not token().expired(now)


def test_a_flood_of_unknown_secrets_keeps_memory_bounded() -> None:
    cache = AuthCache(60)
    for i in range(MAX_ENTRIES + 10):
        cache.remember_token(f"{i:064d}", None)
    assert len(cache._tokens) <= MAX_ENTRIES
