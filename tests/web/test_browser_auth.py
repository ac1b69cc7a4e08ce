"""Sign-in in Chromium, with API tokens (SQLite and PostgreSQL): / sends a stranger to /login, a
wrong token is refused on the page, a right one becomes an HttpOnly SameSite=Lax session cookie
that holds no token; a read-only token cannot upload, an ingest token can; requests without the
page's CSRF token are refused; sign-out ends the session."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.db import repo
from app.db.session import Database
from tests.servicekit import LiveServer, live_server, make_settings
from tests.web.browserkit import OOM_CLASS, TRACEBACK, Web, axe_and_screenshots, expect, expect_report

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def secured(
    db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """A service with tokens (so no open mode) on a database of its own; the tokens by name."""
    data: Path = tmp_path_factory.mktemp("web-auth")
    settings = make_settings(data, db_url, auth_cache_seconds=0)
    with live_server(settings) as srv:
        db = Database(settings.effective_database_url)
        try:
            with db.write() as s:
                tokens = {
                    name: repo.create_token(s, name=name, scopes=scopes)[1]
                    for name, scopes in (("reader", ["read"]), ("uploader", ["ingest", "read"]))
                }
        finally:
            db.dispose()
        yield srv, tokens


def session_of(cookie: dict[str, Any]) -> dict[str, Any]:
    """The signed session cookie's payload (its body is base64 JSON; its signature is not checked here)."""
    body = cookie["value"].split(".")[0]
    data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return data


def sign_in(page: Any, token: str) -> None:
    page.fill("#token", token)
    page.get_by_role("button", name="Sign in").click()


def test_sign_in_with_a_read_token_then_out(web: Web, secured: tuple[LiveServer, dict[str, str]]) -> None:
    srv, tokens = secured
    ctx, watch = web.context(srv.url)
    # the wrong token's page answers 401, the refused upload and the forged form 403: on purpose
    watch.allow(r"status of 40[13]")
    page = ctx.new_page()
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login\?next=/$"))
    expect(page.locator("h1")).to_have_text("Sign in")
    axe_failures = axe_and_screenshots(page, "login-tokens")

    sign_in(page, "lt_" + "x" * 43)
    expect(page.get_by_role("alert")).to_contain_text("unknown, revoked or expired")
    expect(page.locator("h1")).to_have_text("Sign in")
    assert not [c for c in ctx.cookies() if c["name"] == "lt_session" and tokens["reader"] in c["value"]]

    sign_in(page, tokens["reader"])
    expect(page).to_have_url(srv.url + "/")
    expect(page.locator(".site-header")).to_contain_text("Signed in as reader")
    (cookie,) = [c for c in ctx.cookies() if c["name"] == "lt_session"]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Lax"
    assert tokens["reader"] not in cookie["value"] and tokens["reader"][3:] not in cookie["value"]
    payload = session_of(cookie)
    assert payload["t"] == repo.hash_token(tokens["reader"]) and tokens["reader"] not in json.dumps(payload)
    assert "lt_session" not in page.evaluate("() => document.cookie")  # HttpOnly: scripts cannot read it

    # read-only: the page says so and the button is off; the API refuses the upload all the same
    expect(page.locator("#upload-submit")).to_be_disabled()
    expect(page.get_by_role("status").first).to_contain_text("cannot upload")
    axe_failures += axe_and_screenshots(page, "upload-read-only")
    refused = page.evaluate(
        """async () => {
          const csrf = document.querySelector('meta[name="csrf-token"]').content;
          const r = await fetch("/api/v1/analyses", { method: "POST", body: "x",
            headers: { "Content-Type": "text/plain", "X-CSRF-Token": csrf } });
          return [r.status, (await r.json()).detail];
        }"""
    )
    assert refused[0] == 403 and "ingest" in refused[1]
    # the history is readable
    assert page.request.get("/api/v1/analyses").status == 200

    # a sign-out form whose CSRF token was tampered with is refused, and the session stays
    page.evaluate(
        "() => { document.querySelector('form[action=\"/logout\"] input[name=csrf_token]').value = 'forged'; }"
    )
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("main h1")).to_have_text("Forbidden")
    page.goto("/")
    expect(page.locator(".site-header")).to_contain_text("Signed in as reader")

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/login$"))
    # what is left is an anonymous session (for the login form's CSRF token): no token hash
    assert all(session_of(c)["t"] is None for c in ctx.cookies() if c["name"] == "lt_session")
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login\?next=/$"))
    assert not axe_failures, "\n".join(axe_failures)


def test_an_ingest_token_uploads_and_csrf_is_required(
    web: Web, secured: tuple[LiveServer, dict[str, str]]
) -> None:
    srv, tokens = secured
    ctx, watch = web.context(srv.url)
    watch.allow(r"status of 403")  # the requests without the CSRF token, refused on purpose
    page = ctx.new_page()
    page.goto("/login?next=/")
    sign_in(page, tokens["uploader"])
    expect(page.locator(".site-header")).to_contain_text("Signed in as uploader")
    expect(page.locator("#upload-submit")).to_be_enabled()

    # the cookie alone does not make an unsafe request: the page's CSRF token must come with it
    no_csrf = page.evaluate(
        """async () => (await fetch("/api/v1/analyses", { method: "POST", body: "x",
             headers: { "Content-Type": "text/plain" } })).status"""
    )
    assert no_csrf == 403
    form_without_csrf = page.request.post("/upload", form={"text": TRACEBACK})
    assert form_without_csrf.status == 403

    page.fill("#paste", TRACEBACK)
    page.click("#upload-submit")
    aid = expect_report(page, failure_class=OOM_CLASS, title="CUDA out of memory")
    # the analysis is readable with the session, not without it
    assert page.request.get(f"/api/v1/analyses/{aid}").status == 200
    anonymous = web.browser.new_context(base_url=srv.url)
    try:
        assert anonymous.request.get(f"/api/v1/analyses/{aid}").status == 401
    finally:
        anonymous.close()
