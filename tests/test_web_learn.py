"""Teaching in the browser's pages, without JavaScript (issue 23), on live servers (SQLite and
PostgreSQL): the unknowns inbox and its triage form, "Draft a rule" from a cluster or from lines
of the log viewer, the draft page's back-test and publish form, the published page's re-triage,
"Similar past failures" on a report, and the Slack reply's "Seen before" line. Bad ids are 404
pages, bad form values 422 pages that say what to fix, a form without its CSRF token 403; log
text (markup included) is shown as inert text everywhere."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servicekit import LiveServer, live_server, make_settings, training_log
from tests.slackfake import BOT_TOKEN, SIGNING_SECRET, FakeSlack, fake_slack, post_form

pytestmark = pytest.mark.slow  # live servers

API = "/api/v1/analyses"
HTML = {"Accept": "text/html"}
FROB = (
    "(WorkerDict pid={pid}, ip=10.0.{n}.7) Traceback (most recent call last):\n"
    '(WorkerDict pid={pid}, ip=10.0.{n}.7)   File "/opt/site/frob.py", line 88, in spin\n'
    "(WorkerDict pid={pid}, ip=10.0.{n}.7) FrobnicatorError: frobnicator 0x{h:x} on /data/run-{n}/shard-{n}.bin "
    "lost its lease after {s} s\n"
)
HOSTILE = (
    '[rank0]: GizmoError: <img src=x onerror="alert(1)"> <script>alert(1)</script> & co '
    "jammed at slot {n} after {s} tries\n"
)


def frob(n: int) -> str:
    return training_log(FROB.format(pid=1000 + n, n=n, h=0x7F00 + n, s=30 + n), job=f"frob-{n}")


def post(c: httpx.Client, text: str, **params: Any) -> dict[str, Any]:
    r = c.post(API, content=text.encode(), params=params, headers={"Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def csrf_of(c: httpx.Client) -> str:
    """The page's CSRF token (bound to this client's session cookie)."""
    m = re.search(r'name="csrf-token" content="([^"]+)"', c.get("/unknowns", headers=HTML).text)
    assert m
    return m.group(1)


def cluster_of(c: httpx.Client, analysis_id: str, status: str = "open") -> dict[str, Any]:
    items = c.get("/api/v1/clusters", params={"status": status}).json()["items"]
    (found,) = [x for x in items if analysis_id in x["analysis_ids"]]
    return dict(found)


def draft_from_cluster(c: httpx.Client, cluster_id: str) -> str:
    r = c.post("/rules/drafts", data={"cluster_id": cluster_id, "csrf_token": csrf_of(c)}, headers=HTML)
    assert r.status_code == 303, r.text
    m = re.fullmatch(r"/rules/drafts/([0-9A-Z]{26})", r.headers["location"])
    assert m, r.headers["location"]
    return m.group(1)


@pytest.fixture(scope="module")
def frobs(server: LiveServer) -> list[dict[str, Any]]:
    with server.client() as c:
        return [post(c, frob(n), job_id=f"frob-{n}") for n in (1, 2, 3)]


def test_unknowns_page_lists_the_cluster_with_its_facts_and_inert_lines(
    client: httpx.Client, frobs: list[dict[str, Any]]
) -> None:
    hostile = [post(client, training_log(HOSTILE.format(n=n, s=n + 3)), job_id=f"gizmo-{n}") for n in (1, 2)]
    r = client.get("/unknowns", headers=HTML)
    assert r.status_code == 200
    page = r.text
    assert '<a href="/unknowns" aria-current="page">Unknowns</a>' in page  # in the nav, current
    assert "3 failures" in page and "FrobnicatorError" in page
    for a in frobs:
        assert f"/analyses/{a['id']}" in page
    assert re.search(r'href="/analyses/[0-9A-Z]{26}/files/0\?line=\d+#L\d+"', page)  # into the viewer
    assert 'title="frob-1">frob-1</span>' in page  # jobs
    assert 'name="cluster_id" value="t:' in page and "Draft a rule" in page
    # the hostile lines: inert text, never markup
    assert hostile[0]["id"] in page
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=" in page
    # the filter: the cluster is open, so it is not among the resolved ones
    assert "FrobnicatorError" not in client.get("/unknowns?status=resolved", headers=HTML).text
    assert "FrobnicatorError" in client.get("/unknowns?status=all", headers=HTML).text
    bad = client.get("/unknowns?status=<b>x</b>", headers=HTML)
    assert bad.status_code == 422 and "<b>x</b>" not in bad.text and "status is one of" in bad.text


def test_the_triage_form_sets_status_note_and_tracker_and_clears_them(
    client: httpx.Client, frobs: list[dict[str, Any]]
) -> None:
    cid = cluster_of(client, frobs[0]["id"])["id"]
    form = {
        "group_id": cid,
        "status": "resolved",
        "assignee": "ana",
        "note": "fixed by renewing <the> lease",
        "tracker_url": "https://tracker.example/FROB-7",
        "back": "open",
    }
    # without the page's CSRF token: refused, nothing stored
    assert client.post("/unknowns/groups", data=form, headers=HTML).status_code == 403
    assert cluster_of(client, frobs[0]["id"])["status"] == "open"
    token = csrf_of(client)
    for bad, code in (
        ({"status": "closed"}, 422),
        ({"tracker_url": "javascript:alert(1)"}, 422),
        ({"group_id": "t:NOT-AN-ID"}, 404),
    ):
        r = client.post("/unknowns/groups", data={**form, **bad, "csrf_token": token}, headers=HTML)
        assert r.status_code == code, (bad, r.status_code)
        assert "text/html" in r.headers["content-type"]
    r = client.post("/unknowns/groups", data={**form, "csrf_token": token}, headers=HTML)
    assert r.status_code == 303 and r.headers["location"].startswith("/unknowns?status=open&saved=t%3A")
    got = cluster_of(client, frobs[0]["id"], status="resolved")
    assert (got["status"], got["assignee"], got["note"]) == ("resolved", "ana", form["note"])
    page = client.get("/unknowns?status=resolved", headers=HTML).text
    assert "fixed by renewing &lt;the&gt; lease" in page and 'href="https://tracker.example/FROB-7"' in page
    # emptied fields are cleared; the status goes back to open
    r = client.post(
        "/unknowns/groups",
        data={"group_id": cid, "status": "open", "csrf_token": token, "back": "all"},
        headers=HTML,
    )
    assert r.status_code == 303
    got = cluster_of(client, frobs[0]["id"])
    assert (got["status"], got["assignee"], got["note"], got["tracker_url"]) == ("open", None, None, None)


def test_draft_from_a_cluster_backtest_publish_and_retriage(
    client: httpx.Client, frobs: list[dict[str, Any]]
) -> None:
    cid = cluster_of(client, frobs[0]["id"])["id"]
    # no CSRF token, a cluster that is not there
    assert client.post("/rules/drafts", data={"cluster_id": cid}, headers=HTML).status_code == 403
    token = csrf_of(client)
    r = client.post("/rules/drafts", data={"cluster_id": "t:ffffffffffff", "csrf_token": token}, headers=HTML)
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    did = draft_from_cluster(client, cid)
    page = client.get(f"/rules/drafts/{did}", headers=HTML)
    assert page.status_code == 200
    html = page.text
    assert "FrobnicatorError" in html and "(?P&lt;" in html  # the pattern, escaped
    assert "matches <strong>3</strong> analyses" in html
    for a in frobs:
        assert f'href="/analyses/{a["id"]}"' in html
    assert f'action="/rules/drafts/{did}/publish"' in html
    assert "Lint: no problems" in html
    # bad ids
    for bad in ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "nope", "%3Cscript%3E"):
        r = client.get(f"/rules/drafts/{bad}", headers=HTML)
        assert r.status_code == 404 and "<script>" not in r.text, bad
    url = f"/rules/drafts/{did}/publish"
    good = {
        "rule_id": "site-frob-lease-web",
        "failure_class": "new",
        "site_id": "site.frob_lease_web",
        "site_kind": "infra",
        "site_summary": "the frob service lost a lease",
        "title": "The frobnicator lost its lease",
        "explanation": "",
        "remediation": "- Renew the frob lease before the job starts.",
    }
    assert client.post(url, data=good, headers=HTML).status_code == 403  # no CSRF token
    for bad, words in (
        ({"failure_class": "", "site_id": ""}, "name the failure class"),
        ({"site_id": "Frob Lease!"}, "site.&lt;name&gt;"),
        ({"site_summary": "x"}, "summary"),
        ({"site_kind": "weather"}, "the kind is one of"),
        ({"rule_id": "Bad Id"}, "rule id is"),
        ({"pattern": "(a+)+$"}, "cannot be published"),
    ):
        r = client.post(url, data={**good, **bad, "csrf_token": token}, headers=HTML)
        assert r.status_code == 422, (bad, r.status_code, r.text[:300])
        assert words in r.text, (bad, words)
        # the form comes back as it was sent
        assert 'value="The frobnicator lost its lease"' in r.text
    assert client.get(f"/api/v1/rules/drafts/{did}").json()["published_version"] is None
    r = client.post(url, data={**good, "csrf_token": token}, headers=HTML)
    assert r.status_code == 303 and r.headers["location"] == f"/rules/drafts/{did}/published"
    pub = client.get(r.headers["location"], headers=HTML)
    assert pub.status_code == 200
    assert "Published: The frobnicator lost its lease" in pub.text
    assert "+failure_class: site.frob_lease_web" in pub.text and "--- /dev/null" in pub.text
    for a in frobs:
        assert f'action="/analyses/{a["id"]}/retriage"' in pub.text  # open mode is an admin
    # published once: the form is gone, the page says so; a second publish is refused
    again = client.get(f"/rules/drafts/{did}", headers=HTML).text
    assert "Published as version 1" in again and 'id="publish-form"' not in again
    r = client.post(url, data={**good, "csrf_token": token}, headers=HTML)
    assert r.status_code == 409
    # the fourth variant is named by the rule at once
    fourth = post(client, frob(7), job_id="frob-7")
    assert fourth["root_cause"]["rule_id"] == "site-frob-lease-web"
    # re-triage from the published page moves an earlier one
    first = frobs[0]["id"]
    back = f"/rules/drafts/{did}/published"
    assert client.post(f"/analyses/{first}/retriage", data={"back": back}, headers=HTML).status_code == 403
    r = client.post(f"/analyses/{first}/retriage", data={"back": back, "csrf_token": token}, headers=HTML)
    assert r.status_code == 303 and r.headers["location"] == f"{back}?retriaged={first}#a-{first}"
    assert client.get(f"{API}/{first}").json()["root_cause"]["rule_id"] == "site-frob-lease-web"
    # a `back` elsewhere is not followed
    r = client.post(
        f"/analyses/{first}/retriage",
        data={"back": "https://evil.example/", "csrf_token": token},
        headers=HTML,
    )
    assert r.status_code == 303 and r.headers["location"] == f"/analyses/{first}"
    assert client.get("/rules/drafts/01ARZ3NDEKTSV4RRFFQ69G5FAV/published", headers=HTML).status_code == 404


def test_make_a_rule_from_lines_in_the_viewer(client: httpx.Client) -> None:
    a = post(client, training_log(HOSTILE.format(n=9, s=77)), job_id="gizmo-9")
    line = a["signals"][0]["line"]
    viewer = client.get(f"/analyses/{a['id']}/files/0?line={line}", headers=HTML).text
    assert 'action="/rules/drafts"' in viewer and "Make a rule from these lines" in viewer
    assert f'name="lines" value="{line}"' in viewer  # the line the page is about, filled in
    token = csrf_of(client)
    data = {"analysis_id": a["id"], "file": "0", "csrf_token": token}
    for bad, code in (
        ({"lines": "abc"}, 422),
        ({"lines": "1-500"}, 422),
        ({"lines": ""}, 422),
        ({"lines": "999999"}, 422),
        ({"lines": "1", "file": "7"}, 404),
        ({"lines": "1", "file": "x"}, 422),
        ({"lines": "1", "analysis_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, 404),
    ):
        r = client.post("/rules/drafts", data={**data, **bad}, headers=HTML)
        assert r.status_code == code, (bad, r.status_code, r.text[:200])
        assert "text/html" in r.headers["content-type"]
    assert (
        client.post("/rules/drafts", data={**data, "lines": str(line), "csrf_token": ""}).status_code == 403
    )
    r = client.post("/rules/drafts", data={**data, "lines": f"L{line}-L{line}"}, headers=HTML)
    assert r.status_code == 303, r.text
    html = client.get(r.headers["location"], headers=HTML).text
    assert f"from lines {line} of" in html
    # the instance and the pattern: the markup is text
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_report_shows_similar_past_failures_only_when_there_are_some(client: httpx.Client) -> None:
    tail = "[rank0]: WidgetError: widget {n} of pool /srv/pool-{n} overheated at {t} C\n"
    first = post(client, training_log(tail.format(n=1, t=91)), job_id="widget-1")
    page = client.get(f"/analyses/{first['id']}", headers=HTML).text
    assert "Similar past failures" not in page
    r = client.post(f"{API}/{first['id']}/feedback", json={"verdict": "wrong", "comment": "it was the <fan>"})
    assert r.status_code == 201, r.text
    second = post(client, training_log(tail.format(n=2, t=95)), job_id="widget-2")
    page = client.get(f"/analyses/{second['id']}", headers=HTML).text
    assert "Similar past failures" in page
    section = page[page.index('id="similar"') :]
    section = section[: section.index("</section>")]
    assert f'href="/analyses/{first["id"]}"' in section and "no named cause" in section
    assert "<strong>wrong</strong>" in section and "it was the &lt;fan&gt;" in section
    assert "WidgetError: widget 1 of pool /srv/pool-1" in section  # the shared line, as it had it


# --- Slack: the reply's "Seen before" line ---------------------------------------------------------


@pytest.fixture(scope="module")
def slack_server(
    db_url: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[LiveServer, FakeSlack]]:
    # a database of its own: the module's server ends its open mode in the last test
    data = tmp_path_factory.mktemp("slack-learn")
    url = f"sqlite:///{data / 'slack.db'}"
    if not db_url.startswith("sqlite"):
        url = request.getfixturevalue("pg_schemas").new()
    with fake_slack() as fake:
        settings = make_settings(
            data,
            url,
            slack_bot_token=BOT_TOKEN,
            slack_signing_secret=SIGNING_SECRET,
            slack_api_url=fake.api_url,
            public_url="http://logtriage.test",
        )
        with live_server(settings) as srv:
            yield srv, fake


def _reply(fake: FakeSlack, channel: str) -> list[dict[str, Any]]:
    return [c.params for c in fake.of("chat.postMessage") if c.params.get("channel") == channel]


def _context_texts(params: dict[str, Any]) -> str:
    blocks = params.get("blocks")
    blocks = json.loads(blocks) if isinstance(blocks, str) else list(blocks or [])
    return "\n".join(e["text"] for b in blocks if b["type"] == "context" for e in b["elements"])


def test_slack_reply_says_seen_before_with_a_link_to_the_first(
    slack_server: tuple[LiveServer, FakeSlack],
) -> None:
    srv, fake = slack_server
    tail = "[rank0]: QuuxBrokerError: quux broker {n}.example lost {k} messages on queue q{n}\n"
    with srv.client() as c:
        earlier = [post(c, training_log(tail.format(n=n, k=n * 7)), job_id=f"quux-{n}") for n in (1, 2)]
        form = {
            "command": "/triage",
            "channel_id": "C0SEENBEF1",
            "user_id": "U0SEEN01",
            "team_id": "T0TESTTEAM",
            "response_url": f"{fake.url}/respond/seen",
            "trigger_id": "1.2.3",
        }
        # the first of its kind: no such line
        r = post_form(c, {**form, "text": training_log(tail.format(n=1, k=1), job="quux-0")})
        assert r.status_code == 200
        fake.wait_for(lambda f: len(_reply(f, "C0SEENBEF1")) == 1)
        r = post_form(c, {**form, "channel_id": "C0SEENBEF2", "text": training_log(tail.format(n=5, k=35))})
        assert r.status_code == 200
        fake.wait_for(lambda f: len(_reply(f, "C0SEENBEF2")) == 1)
    ctx2 = _context_texts(_reply(fake, "C0SEENBEF2")[0])
    # the two API posts and the first reply's analysis came before it
    m = re.search(
        r"Seen before: (\d+) similar failures \(<(http://logtriage\.test/analyses/[0-9A-Z]{26})\|the first>\)",
        ctx2,
    )
    assert m, ctx2
    assert int(m.group(1)) == 3 and m.group(2).endswith(earlier[0]["id"])
    ctx1 = _context_texts(_reply(fake, "C0SEENBEF1")[0])
    assert "Seen before: 2 similar failures" in ctx1


# --- last in this module: it creates a token, which ends the server's open mode -----------------


def test_without_rules_write_the_draft_page_says_why_and_publishing_is_refused(
    server: LiveServer, client: httpx.Client
) -> None:
    from app.db import repo

    a = post(client, training_log(HOSTILE.format(n=11, s=5)), job_id="gizmo-11")
    did = client.post(
        "/api/v1/rules/drafts", json={"analysis_id": a["id"], "lines": [a["signals"][0]["line"]]}
    ).json()["id"]
    with server.ctx.db.write() as s:
        _row, secret = repo.create_token(s, name="drafter", scopes=["read", "ingest"])
    auth = {**HTML, "Authorization": f"Bearer {secret}"}
    page = client.get(f"/rules/drafts/{did}", headers=auth)
    assert page.status_code == 200
    assert "Publishing needs the <code>rules:write</code> scope" in page.text
    assert 'id="publish-form"' not in page.text and "drafter" in page.text
    r = client.post(f"/rules/drafts/{did}/publish", data={"failure_class": "infra.unknown"}, headers=auth)
    assert r.status_code == 403 and "rules:write" in r.text
    assert client.get(f"/api/v1/rules/drafts/{did}", headers=auth).json()["published_version"] is None
