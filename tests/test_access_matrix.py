"""Every route of the app x every kind of credential -> the status the access policy gives.

The routes are read from the FastAPI app itself (API, web pages, /static, /problems, and
/slack/events when the Slack bot is installed), so a new route is covered at once: a route
without an entry in `ROUTES` fails the test. The policy is the one in app/http/deps.py
(`authenticate`, `require`), app/service/access.py (`check_can_read`: an ingest token reads only
what it posted) and app/web/pages.py (a page without a sign-in redirects to /login; forms need
the page's CSRF token): `expected()` below writes it down once, each route says what it needs.

Credential kinds: open mode (no token exists, loopback), no credentials while tokens exist, an
invalid, an expired and a revoked token, ingest / read / admin tokens (Bearer), a read token as
HTTP Basic, a browser session cookie (an admin's sign-in) with and without the CSRF token on
unsafe methods, and the same cookie from another site (Sec-Fetch-Site: cross-site).

Also here: tokens are compared by a hash lookup (constant time in the secret), and what an
ingest token is answered never names another token nor another token's analyses.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from app.db import repo
from app.http.session import COOKIE, CSRF_HEADER
from app.web.pages import STATIC_DIR
from tests.servicekit import ECC, OOM, LiveServer, live_server, make_settings, training_log

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"


# --- the routes and what each needs ------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    """What a route asks of the principal.

    access: public | any | own (any principal; an ingest token only its own analyses) |
            ingest | read | admin | ingest-or-read
    kind:   api (no sign-in -> 401) | page (-> 303 to /login)
    form:   a web form: needs the page's CSRF token in its fields (a browser session)
    ok:     the status of a valid request that is allowed
    """

    access: str
    kind: str = "api"
    ok: int = 200
    form: bool = False


ROUTES: dict[tuple[str, str], Need] = {
    # REST API
    ("POST", "/api/v1/analyses"): Need("ingest", ok=201),
    ("GET", "/api/v1/analyses"): Need("read"),
    ("GET", "/api/v1/analyses/{analysis_id}"): Need("own"),
    ("GET", "/api/v1/analyses/{analysis_id}/report.md"): Need("own"),
    ("GET", "/api/v1/analyses/{analysis_id}/report.html"): Need("own"),
    ("GET", "/api/v1/analyses/{analysis_id}/log"): Need("own"),
    ("GET", "/api/v1/analyses/{analysis_id}/log/search"): Need("own"),
    ("POST", "/api/v1/analyses/{analysis_id}/feedback"): Need("read", ok=201),
    ("POST", "/api/v1/analyses/{analysis_id}/retriage"): Need("admin"),
    ("GET", "/api/v1/rules"): Need("read"),
    ("GET", "/api/v1/rules/{rule_id}"): Need("read"),
    ("GET", "/api/v1/library"): Need("read"),
    ("GET", "/api/v1/stats"): Need("read"),
    # issue 24: outcomes come from the same hooks as failures; the ledger is read and cleared
    ("POST", "/api/v1/jobs/{job_id}/outcomes"): Need("ingest", ok=201),
    ("GET", "/api/v1/jobs/{job_id}/outcomes"): Need("read"),
    ("GET", "/api/v1/hosts/exclude"): Need("read"),
    ("POST", "/api/v1/hosts/{host}/clear"): Need("admin"),
    # issue 23: the unknowns inbox and failure groups are a reader's; similar failures follow the report
    ("GET", "/api/v1/clusters"): Need("read"),
    ("PATCH", "/api/v1/groups/{group_id}"): Need("read"),
    ("GET", "/api/v1/analyses/{analysis_id}/similar"): Need("own"),
    # drafting needs read and ingest; publishing a scope of its own (rules:write, or admin)
    ("POST", "/api/v1/rules/drafts"): Need("read+ingest", ok=201),
    ("GET", "/api/v1/rules/drafts/{draft_id}"): Need("read+ingest"),
    ("POST", "/api/v1/rules/drafts/{draft_id}/publish"): Need("rules:write", ok=201),
    ("GET", "/api/v1/rules/site"): Need("read"),
    ("GET", "/api/v1/feedback/summary"): Need("read"),
    ("GET", "/groups"): Need("read", kind="page"),
    # public: health, the API document and its docs, problem types, static assets, sign-in
    ("GET", "/healthz"): Need("public"),
    ("GET", "/readyz"): Need("public"),
    ("GET", "/openapi.json"): Need("public"),
    ("GET", "/docs"): Need("public", kind="page"),
    ("GET", "/problems"): Need("public"),
    ("GET", "/problems/{slug}"): Need("public"),
    ("GET", "/static"): Need("public", kind="page"),
    ("GET", "/login"): Need("public", kind="page"),
    ("POST", "/login"): Need("public", kind="page", ok=303, form=True),
    ("POST", "/logout"): Need("public", kind="page", ok=303, form=True),
    # web pages
    ("GET", "/"): Need("any", kind="page"),
    ("POST", "/upload"): Need("ingest", kind="page", ok=303, form=True),
    ("GET", "/analyses"): Need("ingest-or-read", kind="page"),
    ("GET", "/analyses/{analysis_id}"): Need("own", kind="page"),
    ("POST", "/analyses/{analysis_id}/feedback"): Need("read", kind="page", ok=303, form=True),
    ("GET", "/analyses/{analysis_id}/files/{position}"): Need("own", kind="page"),
    ("GET", "/analyses/{analysis_id}/by-time"): Need("own", kind="page"),
    ("GET", "/rules"): Need("read", kind="page"),
    ("GET", "/rules/{rule_id}"): Need("read", kind="page"),
    ("GET", "/trends"): Need("read", kind="page"),
    ("GET", "/hosts"): Need("read", kind="page"),
    ("POST", "/hosts/clear"): Need("admin", kind="page", ok=303, form=True),
    # issue 23 in the browser: the inbox is a reader's, drafting needs read and ingest, publishing
    # rules:write (or admin), the published page's re-triage an admin (as the API's)
    ("GET", "/unknowns"): Need("read", kind="page"),
    ("POST", "/unknowns/groups"): Need("read", kind="page", ok=303, form=True),
    ("POST", "/rules/drafts"): Need("read+ingest", kind="page", ok=303, form=True),
    ("GET", "/rules/drafts/{draft_id}"): Need("read+ingest", kind="page"),
    ("POST", "/rules/drafts/{draft_id}/publish"): Need("rules:write", kind="page", ok=303, form=True),
    ("GET", "/rules/drafts/{draft_id}/published"): Need("read+ingest", kind="page"),
    ("POST", "/analyses/{analysis_id}/retriage"): Need("admin", kind="page", ok=303, form=True),
    # the Slack bot (when installed): Slack's signature is its only credential
    ("POST", "/slack/events"): Need("slack"),
}

KINDS = [
    "open",
    "none",
    "invalid",
    "expired",
    "revoked",
    "ingest",
    "read",
    "admin",
    "basic-read",
    "cookie+csrf",
    "cookie-no-csrf",
    "cookie-cross-site",
]
SCOPES = {
    "open": {"ingest", "read", "admin"},
    "ingest": {"ingest"},
    "read": {"read"},
    "admin": {"ingest", "read", "admin"},
    "basic-read": {"read"},
    "cookie+csrf": {"ingest", "read", "admin"},  # an admin's sign-in
    "cookie-no-csrf": {"ingest", "read", "admin"},
    "cookie-cross-site": {"ingest", "read", "admin"},
}
COOKIE_KINDS = {"cookie+csrf", "cookie-no-csrf", "cookie-cross-site"}
SLACK_SECRET = "access-matrix-signing-secret"


def expected(method: str, need: Need, kind: str) -> int | set[int]:
    """The policy (deps.authenticate + require + access.check_can_read + pages)."""
    unsafe = method in ("POST", "PUT", "PATCH", "DELETE")
    if need.access == "slack":  # no token, cookie or open mode gets past the signature check
        return {401, 403, 503}
    if need.access == "public":
        if need.form and kind == "cookie-no-csrf":
            return 403  # the sign-in/out forms check their CSRF token
        if need is ROUTES[("POST", "/login")] and kind == "open":
            return 401  # in open mode no token exists to sign in with
        return need.ok
    if kind == "cookie-cross-site" and unsafe:
        return 403  # Sec-Fetch-Site: a browser's unsafe request from another site, before anything
    scopes = SCOPES.get(kind)
    if scopes is None:  # none, invalid, expired, revoked: not signed in
        return 401 if need.kind == "api" else 303
    if kind == "cookie-no-csrf" and unsafe:
        return 403  # a cookie authenticates an unsafe request only with the page's CSRF token
    allowed = {
        "any": True,
        "own": True,
        "ingest": "ingest" in scopes or "admin" in scopes,
        "read": "read" in scopes or "admin" in scopes,
        "admin": "admin" in scopes,
        "ingest-or-read": bool(scopes & {"ingest", "read", "admin"}),
        "read+ingest": {"read", "ingest"} <= scopes or "admin" in scopes,
        "rules:write": "rules:write" in scopes or "admin" in scopes,
    }[need.access]
    if not allowed:
        return 403
    if need.access == "own" and not (scopes & {"read", "admin"}):
        return 403  # the analysis asked for was posted by another token
    if need.form and kind not in COOKIE_KINDS and kind != "open":
        return 403  # a web form's CSRF token is bound to a browser session; a Bearer has none
    return need.ok


def app_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, included routers and mounts too."""

    def walk(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
        for r in routes:
            if hasattr(r, "original_router"):  # FastAPI >= 0.16x: an included router
                yield from walk(r.original_router.routes, prefix + r.include_context.prefix)
            elif isinstance(r, Mount):
                yield "GET", prefix + r.path
            elif isinstance(r, APIRoute | Route):
                for m in sorted(r.methods or ()):
                    if m != "HEAD":
                        yield m, prefix + r.path

    return sorted(set(walk(app.routes)))


# --- servers, tokens, sessions ----------------------------------------------------------------


@dataclass
class World:
    srv: LiveServer
    open_srv: LiveServer
    tokens: dict[str, str]  # kind -> secret
    names: dict[str, str]  # kind -> token name
    other_id: str  # posted by the admin token
    open_id: str  # posted in open mode
    own_id: str  # posted by the ingest token
    cookie: str  # the admin's signed-in session
    csrf: str
    open_cookie: str
    open_csrf: str
    rule_id: str
    draft_id: str = ""  # a rule draft (issue 23), on each server
    open_draft_id: str = ""


def _token(srv: LiveServer, name: str, scopes: list[str], *, expires: dt.datetime | None = None) -> str:
    with srv.ctx.db.write() as s:
        _row, secret = repo.create_token(s, name=name, scopes=scopes, expires_at=expires)
    return secret


def _csrf(html: str) -> str:
    m = re.search(r'name="csrf-token" content="([^"]+)"', html) or re.search(
        r'name="csrf_token" value="([^"]+)"', html
    )
    assert m, "no CSRF token on the page"
    return m.group(1)


def _post_log(srv: LiveServer, token: str | None, tail: str) -> str:
    headers = {"Content-Type": "text/plain"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with srv.client() as c:
        r = c.post(API, content=training_log(tail, job=uuid.uuid4().hex), headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _draft(srv: LiveServer, token: str | None, analysis_id: str) -> str:
    """A publishable draft: from the ECC error line of an analysis."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with srv.client() as c:
        line = c.get(f"{API}/{analysis_id}", headers=headers).json()["root_cause"]["evidence"][0]["line"]
        r = c.post(
            "/api/v1/rules/drafts", json={"analysis_id": analysis_id, "lines": [line]}, headers=headers
        )
    assert r.status_code == 201 and not r.json()["problems"], r.text
    return str(r.json()["id"])


_PUBLISHED: dict[str, str] = {}  # server url -> a draft published there


def _published_draft(w: World, srv: LiveServer, kind: str, analysis_id: str) -> str:
    if srv.url not in _PUBLISHED:
        token = None if kind == "open" else w.tokens["admin"]
        did = _draft(srv, token, analysis_id)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with srv.client() as c:
            r = c.post(
                f"/api/v1/rules/drafts/{did}/publish",
                json={"id": "site-matrix-published", "failure_class": "hardware.gpu_ecc_error"},
                headers=headers,
            )
        assert r.status_code == 201, r.text
        _PUBLISHED[srv.url] = did
    return _PUBLISHED[srv.url]


@pytest.fixture(scope="module")
def world(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # a fresh database for open mode (no token may ever exist there)
    open_url = db_url
    if db_url.startswith("sqlite"):
        open_url = f"sqlite:///{tmp_path_factory.mktemp('open-db') / 'open.db'}"
    else:
        from tests.servicekit import PgSchemas

        pg = PgSchemas()
        open_url = pg.new()
    # the Slack bot installed, its Web API nowhere (port 9, discard): an unsigned request must
    # be refused before the bot would call anything
    slack = {
        "slack_bot_token": "xoxb-1-2-access",
        "slack_signing_secret": SLACK_SECRET,
        "slack_api_url": "http://127.0.0.1:9/api/",
    }
    settings = make_settings(tmp_path_factory.mktemp("access-data"), db_url, auth_cache_seconds=0, **slack)
    open_settings = make_settings(tmp_path_factory.mktemp("open-data"), open_url, **slack)
    try:
        with live_server(settings) as srv, live_server(open_settings) as open_srv:
            tag = uuid.uuid4().hex[:6]
            names = {k: f"{k}-{tag}" for k in ("ingest", "read", "admin", "expired", "revoked")}
            tokens = {
                "ingest": _token(srv, names["ingest"], ["ingest"]),
                "read": _token(srv, names["read"], ["read"]),
                "admin": _token(srv, names["admin"], ["admin"]),
                "expired": _token(
                    srv, names["expired"], ["admin"], expires=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
                ),
                "revoked": _token(srv, names["revoked"], ["admin"]),
            }
            with srv.ctx.db.write() as s:
                repo.revoke_token(s, name_or_id=names["revoked"])
            other_id = _post_log(srv, tokens["admin"], ECC.format(ip="10.9.9.9"))
            own_id = _post_log(srv, tokens["ingest"], OOM.format(gib="2.00"))
            with srv.client() as c:  # a browser signs in with the admin token
                csrf = _csrf(c.get("/login").text)
                r = c.post("/login", data={"token": tokens["admin"], "csrf_token": csrf, "next": "/"})
                assert r.status_code == 303, r.text
                cookie = c.cookies[COOKIE]
                csrf = _csrf(c.get("/").text)  # the signed-in session's own CSRF token
            with open_srv.client() as c:
                open_csrf = _csrf(c.get("/").text)
                open_cookie = c.cookies[COOKIE]
            open_id = _post_log(open_srv, None, ECC.format(ip="10.8.8.8"))
            rule_id = srv.ctx.library.rules[0].rule.id
            draft_id = _draft(srv, tokens["admin"], other_id)
            open_draft_id = _draft(open_srv, None, open_id)
            yield World(
                srv,
                open_srv,
                tokens,
                names,
                other_id,
                open_id,
                own_id,
                cookie,
                csrf,
                open_cookie,
                open_csrf,
                rule_id,
                draft_id,
                open_draft_id,
            )
    finally:
        if not db_url.startswith("sqlite"):
            pg.drop_all()


# --- requests ---------------------------------------------------------------------------------


def _static_file() -> str:
    return next(p.name for p in sorted(STATIC_DIR.iterdir()) if p.is_file())


def request_for(w: World, method: str, path: str, kind: str) -> tuple[LiveServer, dict[str, Any]]:
    """A valid request to (method, path) carrying the credentials of `kind`."""
    srv = w.open_srv if kind == "open" else w.srv
    analysis = w.open_id if kind == "open" else w.other_id
    url = (
        path.replace("{analysis_id}", analysis)
        .replace("{rule_id}", w.rule_id)
        .replace("{position}", "0")
        .replace("{slug}", "not-found")
        .replace("{job_id}", f"matrix-{uuid.uuid4().hex[:10]}")
        .replace("{host}", "10.250.0.1")
        .replace("{group_id}", "t:0123456789ab")
        .replace("{draft_id}", w.open_draft_id if kind == "open" else w.draft_id)
    )
    if path == "/static":
        url = f"/static/{_static_file()}"
    if (method, path) == ("POST", "/rules/drafts/{draft_id}/publish"):
        # a draft is published once: each request publishes a fresh one
        url = path.replace("{draft_id}", _draft(srv, None if kind == "open" else w.tokens["admin"], analysis))
    elif (method, path) == ("GET", "/rules/drafts/{draft_id}/published"):
        url = path.replace("{draft_id}", _published_draft(w, srv, kind, analysis))
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}
    csrf = ""
    if kind in ("ingest", "read", "admin", "expired", "revoked"):
        headers["Authorization"] = f"Bearer {w.tokens[kind]}"
    elif kind == "invalid":
        headers["Authorization"] = "Bearer lt_" + "x" * 43
    elif kind == "basic-read":
        headers["Authorization"] = "Basic " + base64.b64encode(f"me:{w.tokens['read']}".encode()).decode()
    elif kind in COOKIE_KINDS:
        cookies[COOKIE] = w.cookie
        if kind != "cookie-no-csrf":
            csrf = w.csrf
            headers[CSRF_HEADER] = csrf
        if kind == "cookie-cross-site":
            headers["Sec-Fetch-Site"] = "cross-site"
    elif kind == "open":
        cookies[COOKIE] = w.open_cookie
        csrf = w.open_csrf
    if ROUTES[(method, path)].kind == "page":
        headers["Accept"] = "text/html"  # a browser: a page without a sign-in redirects to /login
    req: dict[str, Any] = {"method": method, "url": url, "headers": headers, "cookies": cookies}
    if (method, path) == ("POST", "/api/v1/analyses"):
        req["content"] = training_log(ECC.format(ip="10.1.1.1"), job=uuid.uuid4().hex)
        headers["Content-Type"] = "text/plain"
    elif (method, path) == ("POST", "/api/v1/analyses/{analysis_id}/feedback"):
        req["json"] = {"verdict": "correct"}
    elif (method, path) == ("POST", "/upload"):
        req["files"] = [("log", ("job.log", training_log(OOM.format(gib="1.00"), job=uuid.uuid4().hex)))]
        req["data"] = {"csrf_token": csrf}
    elif (method, path) == ("POST", "/analyses/{analysis_id}/feedback"):
        req["data"] = {"verdict": "correct", "csrf_token": csrf}
    elif (method, path) == ("POST", "/login"):
        if kind in COOKIE_KINDS:  # signing in again from the signed-in browser
            req["data"] = {"token": w.tokens["read"], "csrf_token": csrf, "next": "/"}
        else:  # a browser's first visit: the login page's anonymous session and its token
            with srv.client() as c:
                fresh = _csrf(c.get("/login").text)
                req["cookies"] = {COOKIE: c.cookies[COOKIE]}
            req["data"] = {"token": w.tokens["read"], "csrf_token": fresh, "next": "/"}
    elif (method, path) == ("POST", "/logout"):
        req["data"] = {"csrf_token": csrf}
    elif (method, path) == ("POST", "/api/v1/jobs/{job_id}/outcomes"):
        req["json"] = {"status": "succeeded", "attempt_id": uuid.uuid4().hex}
    elif (method, path) == ("POST", "/api/v1/hosts/{host}/clear"):
        req["json"] = {"note": "access matrix"}
    elif (method, path) == ("POST", "/api/v1/rules/drafts"):
        req["json"] = {"analysis_id": analysis, "lines": [1]}
    elif (method, path) == ("POST", "/api/v1/rules/drafts/{draft_id}/publish"):
        # each allowed caller publishes it again: a new version of the same site rule
        req["json"] = {"id": "site-matrix-ecc", "failure_class": "hardware.gpu_ecc_error", "again": True}
    elif (method, path) == ("PATCH", "/api/v1/groups/{group_id}"):
        req["json"] = {"status": "open"}
    elif (method, path) == ("POST", "/hosts/clear"):
        req["data"] = {"host": "10.250.0.2", "csrf_token": csrf}
    elif (method, path) == ("POST", "/unknowns/groups"):
        req["data"] = {"group_id": "t:0123456789ab", "status": "open", "csrf_token": csrf}
    elif (method, path) == ("POST", "/rules/drafts"):
        req["data"] = {"analysis_id": analysis, "lines": "1", "csrf_token": csrf}
    elif (method, path) == ("POST", "/rules/drafts/{draft_id}/publish"):
        req["data"] = {
            "rule_id": "site-matrix-ecc-web",
            "failure_class": "hardware.gpu_ecc_error",
            "title": "ECC, from the access matrix",
            "csrf_token": csrf,
        }
    elif (method, path) == ("POST", "/analyses/{analysis_id}/retriage"):
        req["data"] = {"csrf_token": csrf}
    elif (method, path) == ("POST", "/slack/events"):
        req["json"] = {"type": "url_verification", "challenge": "x"}
    return srv, req


# --- the tests --------------------------------------------------------------------------------


def test_every_route_has_an_expectation(world: World) -> None:
    routes = app_routes(world.srv.app)
    missing = [r for r in routes if r not in ROUTES]
    assert not missing, f"routes without an access expectation (add them to ROUTES): {missing}"
    assert len(routes) >= 30


def test_access_matrix(world: World) -> None:
    routes = app_routes(world.srv.app)
    wrong: list[str] = []
    cells = 0
    for method, path in routes:
        need = ROUTES[(method, path)]
        for kind in KINDS:
            want = expected(method, need, kind)
            srv, req = request_for(world, method, path, kind)
            with httpx.Client(base_url=srv.url, timeout=60, follow_redirects=False) as c:
                cookies = req.pop("cookies")
                for name, value in cookies.items():
                    c.cookies.set(name, value)
                r = c.request(**req)
            cells += 1
            ok = r.status_code in want if isinstance(want, set) else r.status_code == want
            if ok and r.status_code == 303 and need.access != "public" and kind not in SCOPES:
                ok = r.headers["location"].startswith("/login")
            if ok and r.status_code in (401, 403) and need.kind == "api":
                ok = r.headers["content-type"].startswith("application/problem+json")
            if not ok:
                wrong.append(
                    f"{method} {path} as {kind}: {r.status_code}, expected {want} ({r.text[:120]!r})"
                )
    print(f"\naccess matrix: {len(routes)} routes x {len(KINDS)} credential kinds = {cells} requests")
    assert not wrong, "\n".join(wrong)


def test_slack_route_takes_a_signature_and_nothing_else(world: World) -> None:
    """The one credential /slack/events accepts: Slack's signature, made with the secret."""
    from tests.slackfake import sign

    body = '{"type": "url_verification", "challenge": "c-123"}'
    for srv in (world.srv, world.open_srv):
        with srv.client() as c:
            headers = {"Content-Type": "application/json"}
            ok = c.post("/slack/events", content=body, headers={**headers, **sign(body, secret=SLACK_SECRET)})
            assert ok.status_code == 200 and "c-123" in ok.text
            bad = c.post("/slack/events", content=body, headers={**headers, **sign(body, secret="guess")})
            assert bad.status_code == 401
            auth = {"Authorization": f"Bearer {world.tokens['admin']}"}
            assert c.post("/slack/events", content=body, headers={**headers, **auth}).status_code == 401


def test_an_ingest_token_reads_its_own_analyses(world: World) -> None:
    auth = {"Authorization": f"Bearer {world.tokens['ingest']}"}
    with world.srv.client() as c:
        for path in ("", "/report.md", "/report.html", "/log"):
            assert c.get(f"{API}/{world.own_id}{path}", headers=auth).status_code == 200, path
        assert c.get(f"/analyses/{world.own_id}", headers=auth).status_code == 200
        assert c.get(f"/analyses/{world.own_id}/files/0", headers=auth).status_code == 200


def test_ingest_answers_name_no_other_token_nor_its_analyses(world: World) -> None:
    """Posting a log another token posted (a duplicate, the same failure recurring), reading
    its own analysis and being refused another's: no answer names another token or carries
    the other analyses' ids (the refusal's `instance` is the path the client itself asked)."""
    auth = {"Authorization": f"Bearer {world.tokens['ingest']}"}
    others = [world.names[k] for k in ("read", "admin", "expired", "revoked")]
    with world.srv.client() as c:
        admin = {"Authorization": f"Bearer {world.tokens['admin']}"}
        body = training_log(ECC.format(ip="10.7.7.7"), job="shared")
        first = c.post(
            API, content=body, headers={**admin, "Content-Type": "text/plain"}, params={"host": "n1"}
        )
        assert first.status_code == 201
        first_id = first.json()["id"]
        answers = [
            c.post(API, content=body, headers={**auth, "Content-Type": "text/plain"}, params={"host": "n1"}),
        ]
        mine = answers[0].json()
        assert answers[0].status_code == 201 and mine["duplicate_of"] is None
        assert mine["links"]["duplicate_of"] is None
        assert mine["recurrence"] is None or mine["recurrence"]["first_analysis_id"] is None
        answers += [
            c.get(f"{API}/{mine['id']}", headers=auth),
            c.get(f"{API}/{mine['id']}/report.md", headers=auth),
            c.get(f"{API}/{mine['id']}/report.html", headers=auth),
            c.get(f"/analyses/{mine['id']}", headers=auth),
            c.get(f"{API}/{first_id}", headers=auth),
            c.get(f"{API}/{first_id}/log", headers=auth),
            c.get(API, headers=auth),
            c.post(f"{API}/{first_id}/retriage", headers=auth),
            c.post(f"{API}/{first_id}/feedback", headers=auth, json={"verdict": "wrong"}),
            # the same failure's earlier analysis is another token's: not among its similar ones
            c.get(f"{API}/{mine['id']}/similar", headers=auth),
        ]
        for r in answers:
            text = r.text
            if r.headers.get("content-type", "").startswith("application/problem+json"):
                text = text.replace(r.json().get("instance") or "\0", "")
            for name in others:
                assert name not in text, (r.request.url, name)
            assert first_id not in text and world.other_id not in text, (r.request.url, r.status_code)
            assert '"token_id"' not in text


def test_tokens_are_found_by_hash_not_compared(world: World) -> None:
    """A secret is never compared with a stored secret: its SHA-256 is looked up (the database
    index, the auth cache's dict). The time a lookup takes depends on the hash, which an
    attacker cannot steer towards a stored one byte by byte, so it leaks nothing about any
    token; only the hash is stored. (Session cookies and CSRF tokens use hmac.compare_digest.)"""
    import inspect

    from app.http import deps, session

    src = inspect.getsource(deps.principal_of) + inspect.getsource(deps.read_token)  # authenticate's body
    assert "hash_token(secret)" in src and "== secret" not in src
    assert "compare_digest" in inspect.getsource(session.SessionCodec)
    with world.srv.ctx.db.read() as s:
        rows = repo.list_tokens(s)
    stored = " ".join(f"{r.token_hash} {r.prefix}" for r in rows)
    for secret in world.tokens.values():
        assert secret not in stored and len(repo.hash_token(secret)) == 64


def test_app_routes_reads_the_app(tmp_path: Path) -> None:
    """The enumeration sees a route added to the app (so the matrix would demand its entry)."""
    from app.asgi import create_app

    app = create_app(make_settings(tmp_path, None))

    @app.get("/api/v1/brand-new")
    def brand_new() -> dict[str, str]:
        return {}

    assert ("GET", "/api/v1/brand-new") in app_routes(app)
    assert ("GET", "/api/v1/brand-new") not in ROUTES
