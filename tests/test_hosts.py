"""The Host header: which names the service answers to, and that it never steers a link.

Open mode answers loopback names only (DNS rebinding); LOGTRIAGE_PUBLIC_URL decides every
absolute link; without it a link comes from the request only when its Host is trusted (loopback
or LOGTRIAGE_ALLOWED_HOSTS), else it is relative. Live servers on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.db import repo
from app.db.session import Database
from app.http.hosts import HostPolicy, host_name, is_loopback_name, policy_of
from app.settings import Settings
from tests.servicekit import OOM, LiveServer, blob_files, live_server, make_settings, training_log

API = "/api/v1/analyses"
LOG = training_log(OOM.format(gib="2")).encode()
TEXT = {"Content-Type": "text/plain"}


# --- pure -------------------------------------------------------------------------------------------


def test_host_names_are_parsed_without_port_brackets_or_final_dot() -> None:
    assert host_name("LocalHost:8000") == "localhost"
    assert host_name("[::1]:8000") == "::1" and host_name("[::1]") == "::1"
    assert host_name("127.0.0.1") == "127.0.0.1" and host_name("example.com.") == "example.com"
    assert host_name("evil.example:abc") == "evil.example:abc"  # not a port: the name as sent
    assert all(is_loopback_name(n) for n in ("localhost", "127.0.0.1", "127.8.9.10", "::1"))
    assert not any(is_loopback_name(n) for n in ("0.0.0.0", "localhost.evil.example", "10.0.0.1", ""))


def test_policy_from_settings(tmp_path: Path) -> None:
    none = policy_of(Settings(data_dir=tmp_path))
    assert none == HostPolicy(frozenset(), (), False, False)
    assert none.listed("localhost") and not none.listed("evil.example") and not none.trusted("evil.example")
    p = policy_of(
        Settings(
            data_dir=tmp_path,
            allowed_hosts=" Hooks.Internal:8000, .corp.example ,*.lab.example",
            public_url="https://logtriage.example.com/base",
        )
    )
    assert p.configured and not p.any_host
    for name in ("hooks.internal", "a.corp.example", "x.y.lab.example", "logtriage.example.com", "::1"):
        assert p.listed(name), name
    for name in ("corp.example.evil", "evil.example", "internal", "xcorp.example"):
        assert not p.listed(name), name
    star = policy_of(Settings(data_dir=tmp_path, allowed_hosts="*"))
    assert star.any_host and star.trusted("anything.example") and not star.listed("anything.example")
    with pytest.raises(ValueError):
        Settings(data_dir=tmp_path, public_url="logtriage.example.com")  # a URL, with its scheme


# --- live servers -----------------------------------------------------------------------------------


@pytest.fixture
def fresh_db_url(db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of its own (a token ends open mode for everyone sharing it)."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'own.db'}"
    url: str = request.getfixturevalue("pg_schemas").new()
    return url


def with_token(settings: Settings) -> str:
    db = Database(settings.effective_database_url)
    try:
        with db.write() as s:
            _row, secret = repo.create_token(s, name="hooks", scopes=["ingest", "read"])
    finally:
        db.dispose()
    return secret


@pytest.fixture
def tokened(tmp_path: Path, fresh_db_url: str) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """Tokens exist, nothing else configured: any Host served, none trusted for links."""
    settings = make_settings(tmp_path, fresh_db_url, auth_cache_seconds=0)
    with live_server(settings) as srv:
        yield srv, {"Authorization": f"Bearer {with_token(settings)}"}


def _refused(r: httpx.Response, words: str) -> None:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == "/problems/host-not-allowed" and words in body["detail"], body
    assert r.headers["x-frame-options"] == "DENY"  # the security headers still apply


def _no_host_in(r: httpx.Response, name: str) -> None:
    assert name not in r.text and name not in str(r.headers), (r.headers, r.text[:500])


@pytest.mark.slow  # a live server
def test_open_mode_answers_loopback_names_only(server: LiveServer, client: httpx.Client) -> None:
    rows = len(client.get(API, params={"limit": 100}).json()["items"])
    blobs = blob_files(server.settings.data_dir)
    for host in ("evil.example", "evil.example:8000", "0.0.0.0", "10.1.2.3", "localhost.evil.example"):
        _refused(client.get(API, headers={"Host": host}), "DNS rebinding")
        _refused(client.get("/", headers={"Host": host, "Accept": "text/html"}), "loopback")
        _refused(client.post(API, content=LOG, headers={**TEXT, "Host": host}), "loopback")
    assert len(client.get(API, params={"limit": 100}).json()["items"]) == rows
    for probe in ("/healthz", "/readyz"):  # a probe addresses the service by IP
        assert client.get(probe, headers={"Host": "10.1.2.3:8000"}).status_code == 200
    assert blob_files(server.settings.data_dir) == blobs  # nothing stored
    for host in (
        "127.0.0.1",
        f"127.0.0.1:{server.port}",
        "localhost:1",
        "LOCALHOST",
        "[::1]:8000",
        "127.0.0.2",
    ):
        assert client.get(API, headers={"Host": host}).status_code == 200, host
    # a link from a loopback Host is that Host's (no public URL is set)
    r = client.post(API, content=LOG, headers={**TEXT, "Host": "localhost:9999"})
    assert r.status_code == 201 and r.headers["location"].startswith("http://localhost:9999/api/v1/analyses/")


@pytest.mark.slow  # a live server
def test_with_tokens_any_host_is_served_but_links_are_relative(
    tokened: tuple[LiveServer, dict[str, str]],
) -> None:
    srv, auth = tokened
    with srv.client() as c:
        r = c.post(
            API, content=LOG, headers={**TEXT, **auth, "Host": "evil.example"}, params={"job_id": "h1"}
        )
        assert r.status_code == 201, r.text
        aid = r.json()["id"]
        assert r.headers["location"] == f"/api/v1/analyses/{aid}"
        _no_host_in(r, "evil.example")
        one = c.get(f"{API}/{aid}", headers={**auth, "Host": "evil.example"})
        assert one.status_code == 200 and one.json()["links"]
        _no_host_in(one, "evil.example")
        c.post(API, content=LOG, headers={**TEXT, **auth})
        listed = c.get(API, params={"limit": 1}, headers={**auth, "Host": "evil.example"})
        assert listed.status_code == 200 and listed.headers["link"].startswith("</api/v1/analyses?")
        _no_host_in(listed, "evil.example")
        # the request's own base for a loopback Host
        mine = c.post(API, content=LOG, headers={**TEXT, **auth})
        assert mine.headers["location"].startswith(f"{srv.url}/api/v1/analyses/")


@pytest.mark.slow  # a live server
def test_public_url_decides_every_link_and_the_allowed_hosts(tmp_path: Path, fresh_db_url: str) -> None:
    settings = make_settings(
        tmp_path, fresh_db_url, auth_cache_seconds=0, public_url="https://logtriage.example.com/"
    )
    with live_server(settings) as srv, srv.client() as c:
        auth = {"Authorization": f"Bearer {with_token(settings)}"}
        _refused(c.post(API, content=LOG, headers={**TEXT, **auth, "Host": "evil.example"}), "not one")
        for host in ("logtriage.example.com", "127.0.0.1", f"localhost:{srv.port}"):
            r = c.post(API, content=LOG, headers={**TEXT, **auth, "Host": host})
            assert r.status_code == 201, (host, r.text)
            assert r.headers["location"].startswith("https://logtriage.example.com/api/v1/analyses/"), host
            assert r.json()["links"]["self"].startswith("https://logtriage.example.com/"), r.json()["links"]


@pytest.mark.slow  # a live server
def test_allowed_hosts_are_strict_and_trusted_for_links(tmp_path: Path, fresh_db_url: str) -> None:
    settings = make_settings(
        tmp_path, fresh_db_url, auth_cache_seconds=0, allowed_hosts="hooks.internal,.corp.example"
    )
    with live_server(settings) as srv, srv.client() as c:
        auth = {"Authorization": f"Bearer {with_token(settings)}"}
        _refused(c.get(API, headers={**auth, "Host": "evil.example"}), "LOGTRIAGE_ALLOWED_HOSTS")
        _refused(c.get(API, headers={**auth, "Host": "corp.example.evil"}), "not one")
        r = c.post(API, content=LOG, headers={**TEXT, **auth, "Host": "hooks.internal:8000"})
        assert r.headers["location"].startswith("http://hooks.internal:8000/api/v1/analyses/")
        r = c.post(API, content=LOG, headers={**TEXT, **auth, "Host": "node7.corp.example"})
        assert r.headers["location"].startswith("http://node7.corp.example/api/v1/analyses/")


@pytest.mark.slow  # a live server
def test_open_mode_ignores_a_wildcard_but_takes_named_hosts(tmp_path: Path, fresh_db_url: str) -> None:
    settings = make_settings(tmp_path, fresh_db_url, allowed_hosts="*,logtriage.lan")
    with live_server(settings) as srv, srv.client() as c:
        _refused(c.get(API, headers={"Host": "evil.example"}), "DNS rebinding")
        assert c.get(API, headers={"Host": "logtriage.lan"}).status_code == 200
