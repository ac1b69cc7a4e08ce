"""The web edge without a browser: sessions and CSRF, security headers, the no-JavaScript upload
form, the report page's content, feedback, and HTML vs problem+json errors (live servers on
SQLite and PostgreSQL)."""

from __future__ import annotations

import gzip
import re
import time
from pathlib import Path

import httpx
import pytest

from app.db import repo
from app.db.session import Database
from app.http.session import BrowserSession, SessionCodec, load_secret
from app.settings import Settings
from tests.servicekit import (
    ECC,
    NCCL_TIMEOUT,
    OOM,
    ROOT,
    LiveServer,
    live_server,
    make_settings,
    tmp_leftovers,
    training_log,
)

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
EXAMPLE = ROOT / "examples" / "ecc-cascade"


def csrf_of(html: str) -> str:
    m = re.search(r'<meta name="csrf-token" content="([^"]+)"', html)
    assert m, "page has no CSRF token"
    return m.group(1)


def page(c: httpx.Client, path: str) -> httpx.Response:
    return c.get(path, headers={"Accept": "text/html"})


# --- sessions (pure) ----------------------------------------------------------------------------


def test_session_cookie_is_signed_expires_and_binds_csrf() -> None:
    codec = SessionCodec(b"k" * 32, hours=1, secure=False)
    s = codec.signed_in(token_hash="ab" * 32, token_name="alice", token_expires=None)
    value = codec.dumps(s)
    back = codec.loads(value)
    assert back is not None and back.token_hash == s.token_hash and back.nonce == s.nonce
    assert "lt_" not in value  # never the token itself
    body, sig = value.split(".")
    tampered = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + sig
    assert codec.loads(tampered) is None
    assert SessionCodec(b"other" * 8, hours=1, secure=False).loads(value) is None
    assert codec.loads(value, now=time.time() + 7200) is None  # expired
    assert codec.loads("garbage") is None and codec.loads(None) is None
    token = codec.csrf_token(s)
    assert codec.csrf_ok(s, token)
    assert not codec.csrf_ok(s, token[:-1] + "x")
    assert not codec.csrf_ok(codec.anonymous(), token)  # bound to the session's nonce
    assert not codec.csrf_ok(None, token) and not codec.csrf_ok(s, None)
    # a token's own expiry ends the web session with it
    soon = codec.signed_in(token_hash="cd" * 32, token_name="bob", token_expires=time.time() + 60)
    assert soon.expires <= time.time() + 61


def test_session_key_is_created_once_and_shared(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    first = load_secret(settings)
    assert load_secret(settings) == first and len(first) == 32
    assert (tmp_path / "session.key").stat().st_mode & 0o777 == 0o600
    fixed = Settings(data_dir=tmp_path, session_secret="from-the-environment")  # type: ignore[arg-type]
    assert load_secret(fixed) == b"from-the-environment"


def test_browser_session_dataclass_is_anonymous_until_signed_in() -> None:
    assert not BrowserSession(nonce="n").signed_in
    assert BrowserSession(nonce="n", token_hash="x").signed_in


# --- pages on a live server ------------------------------------------------------------------------


def test_every_page_carries_security_headers_and_no_external_asset(client: httpx.Client) -> None:
    for path in ["/", "/docs", "/login", API, "/healthz", "/static/app.css"]:
        r = client.get(path, headers={"Accept": "text/html"})
        assert r.status_code == 200, (path, r.status_code)
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "same-origin"
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp.split("script-src", 1)[1].split(";", 1)[0]
        if r.headers["content-type"].startswith("text/html"):
            assert not re.search(r"""(src|href)=["']https?://""", r.text), path
            assert "<script>" not in r.text.replace("<script src=", "")  # no inline script
            assert ' style="' not in r.text, path  # the CSP forbids inline styles too
    docs = client.get("/docs").text
    assert "/static/vendor/swagger-ui-5.35.0/swagger-ui-bundle.js" in docs
    for asset in re.findall(r'(?:src|href)="(/static/[^"]+)"', docs):
        assert client.get(asset).status_code == 200, asset


def test_upload_form_without_javascript_analyses_and_redirects(client: httpx.Client) -> None:
    home = page(client, "/")
    token = csrf_of(home.text)
    files = [("log", (p.name, p.read_bytes(), "text/plain")) for p in sorted(EXAMPLE.glob("rank*.log"))] + [
        ("config", ("", b"", "application/octet-stream"))
    ]  # an empty file input, as a form sends it
    r = client.post(
        "/upload",
        data={"csrf_token": token, "text": "", "framework": "", "job_id": "web-form-1"},
        files=files,
    )
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    assert re.fullmatch(r"/analyses/[0-9A-Z]{26}", location)
    report = page(client, location)
    assert report.status_code == 200
    assert "CUDA error: uncorrectable ECC error encountered" in report.text
    assert "hardware.gpu_ecc_error" in report.text
    data = client.get(API + "/" + location.rsplit("/", 1)[1]).json()
    assert data["source"] == "web" and data["metadata"]["job_id"] == "web-form-1"
    assert [f["name"] for f in data["files"]] == ["rank0.log", "rank1.log", "rank2.log", "rank3.log"]


def test_upload_form_takes_a_pasted_traceback(client: httpx.Client) -> None:
    token = csrf_of(page(client, "/").text)
    r = client.post("/upload", data={"csrf_token": token, "text": training_log(OOM.format(gib="2.5"))})
    assert r.status_code == 303
    data = client.get(API + "/" + r.headers["location"].rsplit("/", 1)[1]).json()
    assert data["root_cause"]["failure_class"] == "cuda.out_of_memory"
    assert data["files"][0]["name"] == "pasted.log"


def test_upload_form_errors_are_shown_inline_not_as_json(client: httpx.Client) -> None:
    token = csrf_of(page(client, "/").text)
    empty = client.post("/upload", data={"csrf_token": token, "text": ""}, headers={"Accept": "text/html"})
    assert empty.status_code == 400 and empty.headers["content-type"].startswith("text/html")
    assert "choose a log file" in empty.text and 'role="alert"' in empty.text
    binary = client.post(
        "/upload",
        data={"csrf_token": token},
        files=[("log", ("core.bin", bytes(range(256)) * 64, "application/octet-stream"))],
        headers={"Accept": "text/html"},
    )
    assert binary.status_code == 415 and "binary content" in binary.text
    forged = client.post("/upload", data={"csrf_token": "nope", "text": "x"}, headers={"Accept": "text/html"})
    assert forged.status_code == 403 and "CSRF" in forged.text


def test_upload_form_refuses_an_archive_by_name(client: httpx.Client) -> None:
    from tests.hostile.corpus import TAR_OF_LOGS, ZIP_OF_ZEROS

    token = csrf_of(page(client, "/").text)
    for name, data, fmt in (
        ("logs.zip", ZIP_OF_ZEROS, "zip"),
        ("logs.tar.gz", gzip.compress(TAR_OF_LOGS), "tar"),
    ):
        r = client.post(
            "/upload",
            data={"csrf_token": token},
            files=[("log", (name, data, "text/plain"))],
            headers={"Accept": "text/html"},
        )
        assert r.status_code == 415 and r.headers["content-type"].startswith("text/html"), name
        assert f"{name}: a {fmt} archive, not a log" in r.text and "send the log files themselves" in r.text


def test_cross_site_browser_posts_are_refused_in_open_mode(client: httpx.Client) -> None:
    body = OOM.format(gib="1").encode()
    evil = client.post(
        API, content=body, headers={"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}
    )
    assert evil.status_code == 403 and "cross-site" in evil.json()["detail"]
    other_origin = client.post(
        API, content=body, headers={"Content-Type": "text/plain", "Origin": "https://evil.example"}
    )
    assert other_origin.status_code == 403
    same = client.post(
        API, content=body, headers={"Content-Type": "text/plain", "Sec-Fetch-Site": "same-origin"}
    )
    assert same.status_code == 201
    hook = client.post(API, content=body, headers={"Content-Type": "text/plain"})  # curl: neither header
    assert hook.status_code == 201


def test_report_page_shows_evidence_patches_and_takes_feedback(
    client: httpx.Client, server: LiveServer
) -> None:
    log = training_log(ECC.format(ip="10.1.2.3") + NCCL_TIMEOUT * 3 + "<script>alert(1)</script>\n")
    up = client.post(
        API, content=log.encode(), headers={"Content-Type": "text/plain"}, params={"job_id": "j<b>"}
    )
    aid = up.json()["id"]
    html = page(client, f"/analyses/{aid}").text
    # evidence: the matched part highlighted, the line links into the log viewer
    assert "<mark>" in html and f'href="/analyses/{aid}/files/0?line=21#L21"' in html
    assert "j&lt;b&gt;" in html and "j<b>" not in html
    assert "Who acts:" in html and "Hardware" in html
    # the job's action, with the host the log names
    assert (
        ">The job: Retry elsewhere</h2>" in html
        and "<strong>Retry the job without 10.1.2.3.</strong>" in html
    )
    assert "symptom" in html  # the NCCL timeouts fold under the ECC error
    assert 'id="report-md"' in html and "# logtriage report" in html  # "copy as Markdown" source
    assert "<script>alert(1)</script>" not in html
    token = csrf_of(html)
    r = client.post(
        f"/analyses/{aid}/feedback",
        data={
            "csrf_token": token,
            "verdict": "wrong",
            "correct_class": "nccl.collective_timeout",
            "comment": "hm",
        },
    )
    assert r.status_code == 303 and r.headers["location"].endswith("?feedback=thanks#feedback")
    fb = client.get(f"{API}/{aid}").json()["feedback"]
    assert fb[-1]["verdict"] == "wrong" and fb[-1]["correct_class"] == "nccl.collective_timeout"
    thanks = page(client, r.headers["location"]).text
    assert "your feedback is stored" in thanks
    bad = client.post(f"/analyses/{aid}/feedback", data={"csrf_token": "x", "verdict": "correct"})
    assert bad.status_code == 403
    assert len(client.get(f"{API}/{aid}").json()["feedback"]) == len(fb)


def test_report_page_lists_the_facts_with_links_to_their_lines(client: httpx.Client) -> None:
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity"
        " of 79.11 GiB of which 6.25 GiB is free. Including non-PyTorch memory, this process has 31.80 GiB"
        " memory in use. Of the allocated memory 30.10 GiB is allocated by PyTorch, and 300.00 MiB is reserved"
        " by PyTorch but unallocated.\n"
    )
    up = client.post(
        API, content=("step 1 loss 2.0\n" + oom).encode(), headers={"Content-Type": "text/plain"}
    )
    aid = up.json()["id"]
    facts = client.get(f"{API}/{aid}").json()["facts"]
    assert {f["name"]: f["line"] for f in facts}["oom_free"] == 2
    html = page(client, f"/analyses/{aid}").text
    section = html.split('id="facts"', 1)[1].split("</details>", 1)[0]
    assert re.search(r"<code>oom_free</code></td><td[^>]*>6\.25 GiB</td>", section)
    assert f'href="/analyses/{aid}/files/0?line=2#L2"' in section
    assert "computed: oom_total - oom_free - oom_this_process" in section


def test_errors_are_pages_for_browsers_and_problems_for_clients(client: httpx.Client) -> None:
    html = page(client, "/analyses/01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert html.status_code == 404 and html.headers["content-type"].startswith("text/html")
    assert "Not found" in html.text
    js = client.get("/analyses/01ARZ3NDEKTSV4RRFFQ69G5FAV", headers={"Accept": "application/json"})
    assert js.status_code == 404 and js.headers["content-type"] == "application/problem+json"
    api = client.get(f"{API}/nope", headers={"Accept": "text/html"})  # the API always answers JSON
    assert api.headers["content-type"] == "application/problem+json"
    unknown = page(client, "/no/such/page")
    assert unknown.status_code == 404 and "<h1" in unknown.text


def test_sign_in_exchanges_a_token_for_a_session(tmp_path: Path, fresh_db_url: str) -> None:
    settings = make_settings(tmp_path, fresh_db_url, auth_cache_seconds=0)
    with live_server(settings) as srv, srv.client() as c:
        db = Database(settings.effective_database_url)
        try:
            with db.write() as s:
                _r, reader = repo.create_token(s, name="reader", scopes=["read"])
                _r, uploader = repo.create_token(s, name="uploader", scopes=["ingest", "read"])
        finally:
            db.dispose()
        first = page(c, "/")
        assert first.status_code == 303 and first.headers["location"] == "/login?next=/"
        login = page(c, "/login?next=/analyses")
        token = csrf_of(login.text)
        wrong = c.post("/login", data={"token": "lt_" + "x" * 43, "csrf_token": token, "next": "/"})
        assert wrong.status_code == 401 and "unknown, revoked or expired" in wrong.text
        ok = c.post("/login", data={"token": reader, "csrf_token": token, "next": "https://evil.example/"})
        assert ok.status_code == 303 and ok.headers["location"] == "/"  # no open redirect
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=lax" in cookie.lower() and reader not in cookie
        home = page(c, "/")
        assert home.status_code == 200 and "Signed in as" in home.text and "reader" in home.text
        assert "cannot upload" in home.text  # read-only
        session_csrf = csrf_of(home.text)
        # the page's own API calls: the cookie authenticates, the CSRF header is required
        body = OOM.format(gib="1").encode()
        no_csrf = c.post(API, content=body, headers={"Content-Type": "text/plain"})
        assert no_csrf.status_code == 403
        denied = c.post(
            API, content=body, headers={"Content-Type": "text/plain", "X-CSRF-Token": session_csrf}
        )
        assert denied.status_code == 403 and "ingest" in denied.json()["detail"]
        assert c.get(API).status_code == 200  # reading needs no CSRF token
        out = c.post("/logout", data={"csrf_token": session_csrf})
        assert out.status_code == 303
        assert page(c, "/").status_code == 303
        # an uploader's session can upload through the API with the page's token
        token = csrf_of(page(c, "/login").text)
        c.post("/login", data={"token": uploader, "csrf_token": token, "next": "/"})
        session_csrf = csrf_of(page(c, "/").text)
        up = c.post(API, content=body, headers={"Content-Type": "text/plain", "X-CSRF-Token": session_csrf})
        assert up.status_code == 201
        # revoking the token ends the session (no auth cache here)
        db = Database(settings.effective_database_url)
        try:
            with db.write() as s:
                repo.revoke_token(s, name_or_id="uploader")
        finally:
            db.dispose()
        assert page(c, "/").status_code == 303


def test_signed_in_forms_without_javascript_send_the_token_as_a_field(
    tmp_path: Path, fresh_db_url: str
) -> None:
    """A browser without JavaScript posts the forms with their `csrf_token` field and no
    X-CSRF-Token header: urlencoded (feedback, a pasted log) and multipart (files) are accepted
    with the right token, refused with none or a wrong one, and a multipart body whose token is
    missing, wrong or after its files is refused before any file byte is kept."""
    settings = make_settings(tmp_path, fresh_db_url, auth_cache_seconds=0)
    with live_server(settings) as srv, srv.client() as c:
        db = Database(settings.effective_database_url)
        try:
            with db.write() as s:
                _r, uploader = repo.create_token(s, name="uploader", scopes=["ingest", "read"])
        finally:
            db.dispose()
        login_csrf = csrf_of(page(c, "/login").text)
        assert (
            c.post("/login", data={"token": uploader, "csrf_token": login_csrf, "next": "/"}).status_code
            == 303
        )
        token = csrf_of(page(c, "/").text)
        html = {"Accept": "text/html"}
        log = training_log(OOM.format(gib="3"))
        # urlencoded: the paste box
        pasted = c.post("/upload", data={"csrf_token": token, "text": log}, headers=html)
        assert pasted.status_code == 303, pasted.text[:300]
        # multipart: files, the token first as the page's form puts it
        files = [("log", ("rank0.log", log.encode(), "text/plain"))]
        sent = c.post("/upload", data={"csrf_token": token, "job_id": "nojs-1"}, files=files, headers=html)
        assert sent.status_code == 303, sent.text[:300]
        aid = sent.headers["location"].rsplit("/", 1)[1]
        assert c.get(f"{API}/{aid}").json()["metadata"]["job_id"] == "nojs-1"
        # the feedback form (urlencoded)
        fb = c.post(f"/analyses/{aid}/feedback", data={"csrf_token": token, "verdict": "correct"})
        assert fb.status_code == 303 and fb.headers["location"].endswith("?feedback=thanks#feedback")
        n_feedback = len(c.get(f"{API}/{aid}").json()["feedback"])
        blobs = sorted((tmp_path / "blobs").rglob("*.zst"))
        n_analyses = len(c.get(API, params={"limit": 100}).json()["items"])

        def refused(r: httpx.Response) -> None:
            assert r.status_code == 403, (r.status_code, r.text[:300])
            assert "CSRF" in r.text

        for bad in ("", "nope", token[:-1] + ("A" if token[-1] != "A" else "B")):
            data = {"csrf_token": bad} if bad else {}
            refused(c.post("/upload", data={**data, "text": log}, headers=html))
            refused(c.post("/upload", data=data, files=files, headers=html))
            refused(c.post(f"/analyses/{aid}/feedback", data={**data, "verdict": "wrong"}))
        # the token after the files: refused as the first file part begins (a hand-made body)
        late = (
            b'--b\r\nContent-Disposition: form-data; name="log"; filename="x.log"\r\n\r\n'
            + log.encode()
            + b'\r\n--b\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\n'
            + token.encode()
            + b"\r\n--b--\r\n"
        )
        refused(
            c.post(
                "/upload", content=late, headers={**html, "Content-Type": "multipart/form-data; boundary=b"}
            )
        )
        # a raw body cannot carry the field
        refused(c.post("/upload", content=log.encode(), headers={**html, "Content-Type": "text/plain"}))
        # a wrong header is wrong even when the field is right; the API still wants the header
        refused(
            c.post("/upload", data={"csrf_token": token, "text": log}, headers={**html, "X-CSRF-Token": "x"})
        )
        api = c.post(API, files=files, data={"csrf_token": token})
        assert api.status_code == 403 and "x-csrf-token" in api.json()["detail"]
        assert len(c.get(f"{API}/{aid}").json()["feedback"]) == n_feedback
        assert len(c.get(API, params={"limit": 100}).json()["items"]) == n_analyses
        assert sorted((tmp_path / "blobs").rglob("*.zst")) == blobs
        assert tmp_leftovers(tmp_path) == []  # and nothing spooled was left


@pytest.fixture
def fresh_db_url(db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of its own (tokens change open mode for everyone sharing it)."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'own.db'}"
    schemas = request.getfixturevalue("pg_schemas")
    url: str = schemas.new()
    return url


def test_pages_are_compiled_at_start_not_by_the_first_visitor(server: LiveServer) -> None:
    from app.web.edge import TEMPLATES

    env = server.app.state.templates
    pages = {p.name for p in TEMPLATES.glob("*.html")}
    deadline = time.monotonic() + 60  # the start-up warm-up runs beside the first requests
    while not pages <= {name for _, name in env.cache} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pages <= {name for _, name in env.cache}


def test_report_page_says_when_ray_folded_more_ranks_into_the_lines(client: httpx.Client) -> None:
    line = (
        "(WorkerDict pid=4121, ip=10.0.0.5) [rank30]:[E ProcessGroupNCCL.cpp:616] [Rank 30] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=10800000) ran for 10800058 milliseconds before timing out. [repeated 27x across cluster]\n"
    )
    up = client.post(
        API, content=("step 1 loss 2.0\n" + line).encode(), headers={"Content-Type": "text/plain"}
    )
    aid = up.json()["id"]
    assert client.get(f"{API}/{aid}").json()["root_cause"]["ranks_folded"] == 27
    html = page(client, f"/analyses/{aid}").text
    assert "Ray&#39;s log dedup folded 27 alike lines into these" in html  # (autoescaped quote)
