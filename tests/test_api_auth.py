"""Tokens and scopes over real HTTP: tokens come from `logtriage tokens create` (a subprocess)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from app.db import repo
from app.db.session import Database
from tests.servicekit import (
    OOM,
    LiveServer,
    PgSchemas,
    cli_env,
    live_server,
    make_settings,
    run_cli,
    training_log,
)

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
CACHE_TTL = 0.5
TEXT = {"Content-Type": "text/plain"}


@pytest.fixture(scope="module")
def auth_server(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # a short token cache, so that revocation shows within the test (the default is 5 s)
    settings = make_settings(tmp_path_factory.mktemp("auth-data"), db_url, auth_cache_seconds=CACHE_TTL)
    with live_server(settings) as srv:
        yield srv


@pytest.fixture
def fresh_db_url(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """An empty database on the same backend as `db_url` (no tokens yet)."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    schemas: PgSchemas = request.getfixturevalue("pg_schemas")
    return schemas.new()


def uname(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_token(srv: LiveServer, name: str, *scopes: str) -> str:
    args = ["tokens", "create", "--name", name, "--quiet"]
    for s in scopes:
        args += ["--scope", s]
    res = run_cli(*args, env=cli_env(srv.settings))
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def until_status(c: httpx.Client, status: int, *, headers: dict[str, str] | None = None) -> float:
    """Seconds until GET /analyses answers `status` (what the server's token cache allows)."""
    start = time.monotonic()
    while (code := c.get(API, headers=headers).status_code) != status:
        assert time.monotonic() - start < CACHE_TTL + 2, f"still {code} after the token cache's ttl"
        time.sleep(0.05)
    return time.monotonic() - start


def test_open_mode_serves_loopback_only_until_a_token_exists(tmp_path: Path, fresh_db_url: str) -> None:
    settings = make_settings(tmp_path, fresh_db_url, auth_cache_seconds=CACHE_TTL)
    with live_server(settings) as srv, srv.client() as c:
        r = c.post(API, content=training_log(OOM.format(gib="1")).encode(), headers=TEXT)
        assert r.status_code == 201, r.text
        assert c.get(f"{API}/{r.json()['id']}").status_code == 200
        # a client on another machine, behind a trusted reverse proxy: refused
        remote = c.get(API, headers={"X-Forwarded-For": "203.0.113.9"})
        assert remote.status_code == 401
        assert "loopback" in remote.json()["detail"]
        token = create_token(srv, "first", "read")
        until_status(c, 401)  # open mode ends within the token cache's ttl
        anon = c.get(API)
        assert anon.status_code == 401 and "requires an API token" in anon.json()["detail"]
        assert c.get(API, headers=bearer(token)).status_code == 200


def test_scopes(auth_server: LiveServer) -> None:
    srv = auth_server
    with srv.client() as c:
        admin = create_token(srv, uname("ops"), "admin")
        open_id = c.post(
            API, content=training_log(OOM.format(gib="1")).encode(), headers={**TEXT, **bearer(admin)}
        ).json()["id"]
        reader_name = uname("dash")
        ingest = create_token(srv, uname("hook"), "ingest")
        reader = create_token(srv, reader_name, "read")
        assert ingest.startswith("lt_") and len({ingest, reader, admin}) == 3

        # tokens exist: anonymous requests are refused with a problem and a challenge
        anon = c.get(API)
        assert anon.status_code == 401
        assert anon.headers["content-type"] == "application/problem+json"
        assert anon.headers["www-authenticate"].startswith("Bearer")
        assert c.get(API, headers=bearer("lt_wrong")).status_code == 401
        assert c.get(API, headers={"Authorization": "Token abc"}).status_code == 401

        # ingest: post, and read back only what it posted
        posted = c.post(
            API, content=training_log(OOM.format(gib="2")).encode(), headers={**TEXT, **bearer(ingest)}
        )
        assert posted.status_code == 201
        pid = posted.json()["id"]
        assert c.get(f"{API}/{pid}", headers=bearer(ingest)).status_code == 200
        assert c.get(f"{API}/{pid}/report.md", headers=bearer(ingest)).status_code == 200
        assert c.get(f"{API}/{open_id}", headers=bearer(ingest)).status_code == 403
        forbidden = c.get(API, headers=bearer(ingest))
        assert forbidden.status_code == 403 and forbidden.json()["type"] == "/problems/forbidden"

        # read: everything readable, nothing writable
        assert c.get(API, headers=bearer(reader)).status_code == 200
        assert c.get(f"{API}/{open_id}", headers=bearer(reader)).status_code == 200
        assert c.get("/api/v1/stats", headers=bearer(reader)).status_code == 200
        assert c.post(API, content=b"x\n", headers={**TEXT, **bearer(reader)}).status_code == 403
        assert c.post(f"{API}/{pid}/retriage", headers=bearer(reader)).status_code == 403
        fb = c.post(f"{API}/{pid}/feedback", json={"verdict": "correct"}, headers=bearer(reader))
        assert fb.status_code == 201

        # admin: everything
        assert c.post(f"{API}/{pid}/retriage", headers=bearer(admin)).status_code == 200
        assert (
            c.post(
                API, content=training_log(OOM.format(gib="3")).encode(), headers={**TEXT, **bearer(admin)}
            ).status_code
            == 201
        )

        # a browser opening the permalink: HTTP Basic with the token as password
        basic = base64.b64encode(f"me:{reader}".encode()).decode()
        html = c.get(f"{API}/{pid}/report.html", headers={"Authorization": f"Basic {basic}"})
        assert html.status_code == 200 and "text/html" in html.headers["content-type"]

        # health endpoints stay open for probes
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200

        # revoked tokens stop working within the token cache's ttl
        res = run_cli("tokens", "revoke", reader_name, env=cli_env(srv.settings))
        assert res.returncode == 0, res.stderr
        until_status(c, 401, headers=bearer(reader))

        # idempotency keys are per token: the same key from two tokens makes two analyses
        body = training_log(OOM.format(gib="9")).encode()
        h = {**TEXT, "Idempotency-Key": uname("key")}
        a = c.post(API, content=body, headers={**h, **bearer(ingest)}).json()["id"]
        b = c.post(API, content=body, headers={**h, **bearer(admin)}).json()["id"]
        assert a != b


def test_only_a_hash_is_stored(auth_server: LiveServer) -> None:
    srv = auth_server
    name = uname("hash-check")
    secret = create_token(srv, name, "read")
    engine = create_engine(srv.settings.effective_database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT name, prefix, token_hash, scopes FROM api_tokens")).all()
    finally:
        engine.dispose()
    dump = json.dumps([list(r) for r in rows])
    assert secret not in dump
    assert secret[:10] in dump  # the prefix identifies it in lists
    listed = run_cli("tokens", "list", "--json", env=cli_env(srv.settings))
    assert listed.returncode == 0 and secret not in listed.stdout
    names = {t["name"]: t for t in json.loads(listed.stdout)}
    assert names[name]["scopes"] == ["read"] and names[name]["last_used_at"] is None
    # a request records the token's use (once a minute at most: the second one writes nothing)
    with srv.client() as c:
        for _ in range(2):
            assert c.get(API, headers=bearer(secret)).status_code == 200
    listed = run_cli("tokens", "list", "--json", env=cli_env(srv.settings))
    assert {t["name"]: t for t in json.loads(listed.stdout)}[name]["last_used_at"] is not None


def test_require_tokens_setting_closes_open_mode(tmp_path: Path, fresh_db_url: str) -> None:
    with live_server(make_settings(tmp_path, fresh_db_url, require_tokens=True)) as srv, srv.client() as c:
        r = c.get(API)
        assert r.status_code == 401 and "requires an API token" in r.json()["detail"]


def test_token_cli_errors(auth_server: LiveServer) -> None:
    env = cli_env(auth_server.settings)
    name = uname("dup")
    assert run_cli("tokens", "create", "--name", name, env=env).returncode == 0
    dup = run_cli("tokens", "create", "--name", name, env=env)
    assert dup.returncode == 1 and "exists" in dup.stderr
    bad = run_cli("tokens", "create", "--name", "x", "--scope", "root", env=env)
    assert bad.returncode == 2
    missing = run_cli("tokens", "revoke", "nobody", env=env)
    assert missing.returncode == 1 and "no token" in missing.stderr


def test_httpx_client_sees_auth_problem_shape(auth_server: LiveServer) -> None:
    create_token(auth_server, uname("shape"), "read")  # a token exists: no longer open mode
    with httpx.Client(base_url=auth_server.url) as c:
        r = c.get(API)
    assert r.json()["type"] == "/problems/unauthorized"


def test_token_lookups_are_reused_for_the_cache_ttl(tmp_path: Path, fresh_db_url: str) -> None:
    """The documented price of not reading the token table per request: a revoked token keeps
    working on a running server until its cached lookup is `auth_cache_seconds` old."""
    settings = make_settings(tmp_path, fresh_db_url, auth_cache_seconds=3600)
    with live_server(settings) as srv, srv.client() as c:
        name = uname("cached")
        token = create_token(srv, name, "read")
        assert c.get(API, headers=bearer(token)).status_code == 200
        res = run_cli("tokens", "revoke", name, env=cli_env(srv.settings))
        assert res.returncode == 0, res.stderr
        assert c.get(API, headers=bearer(token)).status_code == 200
        # an unknown secret is refused, and so is it on the next request (remembered as unknown)
        for _ in range(2):
            assert c.get(API, headers=bearer("lt_" + "x" * 43)).status_code == 401
        # expiry is not cached: a token expiring in a second stops working then
        db = Database(srv.settings.effective_database_url)
        try:
            with db.write() as s:
                expiry = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
                _row, short = repo.create_token(s, name=uname("short"), scopes=["read"], expires_at=expiry)
        finally:
            db.dispose()
        before = c.get(API, headers=bearer(short)).status_code
        if dt.datetime.now(dt.UTC) < expiry:  # answered before the expiry (a loaded machine may be later)
            assert before == 200
        # the wait is for the clock to pass the expiry, which is what is tested, not for the server
        time.sleep(max(0.0, (expiry - dt.datetime.now(dt.UTC)).total_seconds()) + 0.1)
        assert c.get(API, headers=bearer(short)).status_code == 401
    with live_server(settings.model_copy(update={"auth_cache_seconds": 0})) as srv, srv.client() as c:
        assert c.get(API, headers=bearer(token)).status_code == 401
