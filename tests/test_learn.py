"""Issue 23's reading half on live servers (SQLite and PostgreSQL): the unknowns inbox groups
failures no rule names by the error line they end with, similar past failures link a report to
earlier ones, and failure groups carry a triage state."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.servicekit import OOM, training_log

pytestmark = pytest.mark.slow  # a live server

API = "/api/v1/analyses"

# an unknown failure, three times with other numbers, paths and hosts; another unknown one
FROB = (
    "(WorkerDict pid={pid}, ip=10.0.{n}.7) Traceback (most recent call last):\n"
    '(WorkerDict pid={pid}, ip=10.0.{n}.7)   File "/opt/site/frob.py", line 88, in spin\n'
    "(WorkerDict pid={pid}, ip=10.0.{n}.7) FrobnicatorError: frobnicator 0x{h:x} on /data/run-{n}/shard-{n}.bin "
    "lost its lease after {s} s\n"
)
QUUX = "[rank{n}]: QuuxStallError: the quux pipeline stalled at stage {n} of 12 (queue depth {d})\n"


def post(c: httpx.Client, text: str, **params: Any) -> dict[str, Any]:
    r = c.post(API, content=text.encode(), params=params, headers={"Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture(scope="module")
def posted(server: Any) -> dict[str, Any]:
    with server.client() as c:
        frob = [
            post(
                c,
                training_log(FROB.format(pid=1000 + n, n=n, h=0x7F00 + n, s=30 + n), job=f"frob-{n}"),
                job_id=f"frob-{n}",
                host=f"node-{n}",
            )
            for n in range(1, 4)
        ]
        quux = [
            post(c, training_log(QUUX.format(n=n, d=10 * n), job=f"quux-{n}"), job_id=f"quux-{n}")
            for n in (1, 2)
        ]
        oom = post(c, training_log(OOM.format(gib="1.96")), job_id="oom-1")
        # a named failure a person marked wrong lands in the inbox too
        wrong = post(c, training_log(OOM.format(gib="2.50")), job_id="oom-wrong")
        r = c.post(f"{API}/{wrong['id']}/feedback", json={"verdict": "wrong", "correct_class": "unknown"})
        assert r.status_code in (200, 201), r.text
    return {"frob": frob, "quux": quux, "oom": oom, "wrong": wrong}


def test_unknowns_are_grouped_by_the_line_they_end_with(client: httpx.Client, posted: dict[str, Any]) -> None:
    frob = [a["id"] for a in posted["frob"]]
    quux = [a["id"] for a in posted["quux"]]
    for a in posted["frob"] + posted["quux"]:
        assert a["root_cause"] is None and a["signals"], a["id"]
    r = client.get("/api/v1/clusters", params={"unknown": "true"})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    by_member = {aid: c for c in items for aid in c["analysis_ids"]}
    # each failure in one group, the two failures apart, the named one nowhere
    assert len({by_member[a]["id"] for a in frob}) == 1 and len({by_member[a]["id"] for a in quux}) == 1
    f, q = by_member[frob[0]], by_member[quux[0]]
    assert f["id"] != q["id"] and f["count"] == 3 and q["count"] == 2
    assert posted["oom"]["id"] not in by_member
    assert posted["wrong"]["id"] in by_member  # marked wrong: back in the inbox
    # largest first, members newest first
    assert [c["count"] for c in items] == sorted((c["count"] for c in items), reverse=True)
    assert f["analysis_ids"] == frob[::-1]
    assert "FrobnicatorError" in f["template"] and "<" in f["template"]
    assert sorted(f["jobs"]) == ["frob-1", "frob-2", "frob-3"] and sorted(f["hosts"]) == [
        "node-1",
        "node-2",
        "node-3",
    ]
    assert f["first_seen"] <= f["last_seen"]
    sample = f["samples"][0]
    assert "FrobnicatorError" in sample["text"] and sample["url"].startswith(
        f"/analyses/{sample['analysis_id']}/files/0?line="
    )
    line = int(sample["url"].split("line=")[1].split("#")[0])
    page = client.get(sample["url"], headers={"Accept": "text/html"})
    assert page.status_code == 200 and f'id="L{line}"' in page.text


def test_similar_failures_are_earlier_ones_sharing_the_lines(
    client: httpx.Client, posted: dict[str, Any]
) -> None:
    frob = [a["id"] for a in posted["frob"]]
    r = client.get(f"{API}/{frob[2]}/similar")
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [s["analysis_id"] for s in items] == [frob[1], frob[0]]  # earlier only, newest first
    assert all(s["same_first"] and s["shared"] >= 1 for s in items)
    assert "FrobnicatorError" in items[0]["lines"][0]
    # the first one has nothing before it; another failure shares nothing
    assert client.get(f"{API}/{frob[0]}/similar").json()["items"] == []
    assert (
        client.get(f"{API}/{posted['quux'][1]['id']}/similar").json()["items"][0]["analysis_id"]
        == posted["quux"][0]["id"]
    )
    assert client.get(f"{API}/01ARZ3NDEKTSV4RRFFQ69G5FAV/similar").status_code == 404


def test_a_group_is_triaged_like_an_issue(client: httpx.Client, posted: dict[str, Any]) -> None:
    frob = [a["id"] for a in posted["frob"]]
    items = client.get("/api/v1/clusters").json()["items"]
    gid = next(c["id"] for c in items if frob[0] in c["analysis_ids"])
    r = client.patch(
        f"/api/v1/groups/{gid}",
        json={
            "status": "resolved",
            "assignee": "ana",
            "note": "fixed by renewing the frob lease",
            "tracker_url": "https://tracker.example/T-12",
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "resolved" and r.json()["assignee"] == "ana"
    open_ids = {c["id"] for c in client.get("/api/v1/clusters").json()["items"]}
    assert gid not in open_ids
    resolved = client.get("/api/v1/clusters", params={"status": "resolved"}).json()["items"]
    (g,) = [c for c in resolved if c["id"] == gid]
    assert (
        g["note"] == "fixed by renewing the frob lease" and g["tracker_url"] == "https://tracker.example/T-12"
    )
    # the note reaches the next report's similar failures
    sim = client.get(f"{API}/{frob[2]}/similar").json()["items"]
    assert sim[0]["group_note"] == "fixed by renewing the frob lease" and sim[0]["group_status"] == "resolved"
    # clearing a field, reopening
    r = client.patch(f"/api/v1/groups/{gid}", json={"status": "open", "clear": ["assignee"]})
    assert r.status_code == 200 and r.json()["assignee"] is None and r.json()["note"]
    # bad input: a clear problem, nothing changed
    for body, code in (
        ({"status": "done"}, 422),
        ({"tracker_url": "javascript:alert(1)"}, 422),
        ({"note": "   "}, 422),
        ({"bogus": 1}, 422),
    ):
        r = client.patch(f"/api/v1/groups/{gid}", json=body)
        assert r.status_code == code and r.headers["content-type"] == "application/problem+json", body
    assert client.patch("/api/v1/groups/x:nope", json={"status": "open"}).status_code == 404
    g = next(c for c in client.get("/api/v1/clusters").json()["items"] if c["id"] == gid)
    assert g["status"] == "open" and g["note"] == "fixed by renewing the frob lease"


def test_known_failures_group_by_fingerprint(client: httpx.Client, posted: dict[str, Any]) -> None:
    items = client.get("/api/v1/clusters", params={"unknown": "false", "status": "all"}).json()["items"]
    oom = next(c for c in items if posted["oom"]["id"] in c["analysis_ids"])
    assert oom["id"].startswith("f:") and posted["wrong"]["id"] in oom["analysis_ids"]
    assert "out of memory" in oom["template"].lower()
    assert client.get("/api/v1/clusters", params={"status": "closed"}).status_code == 422


def test_feedback_counts_per_rule_and_proposes_a_rule(client: httpx.Client, server: Any) -> None:
    from tests.servicekit import cli_env, run_cli

    job = "fb"
    ids = [
        post(client, training_log(OOM.format(gib=f"{3 + n}.00")), job_id=f"{job}-{n}")["id"] for n in range(4)
    ]
    rule = client.get(f"{API}/{ids[0]}").json()["root_cause"]["rule_id"]
    assert client.post(f"{API}/{ids[0]}/feedback", json={"verdict": "correct"}).status_code in (200, 201)
    for aid in ids[1:]:
        r = client.post(
            f"{API}/{aid}/feedback", json={"verdict": "wrong", "correct_class": "host.oom_killed"}
        )
        assert r.status_code in (200, 201), r.text
    out = client.get("/api/v1/feedback/summary").json()
    (mine,) = [x for x in out["rules"] if x["rule_id"] == rule]
    assert mine["correct"] >= 1 and mine["wrong"] >= 3 and mine["flagged"] and mine["precision"] < 0.8
    (prop,) = [
        p for p in out["proposals"] if p["rule_id"] == rule and p["correct_class"] == "host.oom_killed"
    ]
    assert set(ids[1:]) <= set(prop["analysis_ids"]) and "marked wrong as host.oom_killed" in prop["why"]
    assert out["labelled"] >= 4 and 0 <= out["accuracy"] < 1 and out["months"]
    # the rules page flags it
    page = client.get("/rules", params={"q": rule}, headers={"Accept": "text/html"}).text
    row = page[page.index(f'href="/rules/{rule}"') :].split("</tr>", 1)[0]
    assert ">check it</span>" in row
    # the proposal drafts a rule from those analyses, its class suggested by the verdicts
    r = client.post("/api/v1/rules/drafts", json={"analysis_ids": ids[1:]})
    assert r.status_code == 201, r.text
    assert r.json()["class_suggested"] == "host.oom_killed"
    # the same figures offline
    res = run_cli("eval", "--site", "--json", env=cli_env(server.settings))
    assert res.returncode == 0, res.stderr
    offline = __import__("json").loads(res.stdout)
    assert offline["labelled"] == out["labelled"] and offline["accuracy"] == out["accuracy"]


def test_a_report_shows_its_failure_group_and_changes_it(client: httpx.Client) -> None:
    import re

    html = {"Accept": "text/html"}
    a = post(client, training_log(OOM.format(gib="7.25")), job_id="group-card")
    page = client.get(f"/analyses/{a['id']}", headers=html).text
    m = re.search(r'<h2 id="group-h">Failure group <code class="small tok" title="(f:[0-9a-z]+)"', page)
    assert m, "a named failure's group is its fingerprint's"
    gid = m.group(1)
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = client.post(
        "/unknowns/groups",
        data={
            "group_id": gid,
            "status": "resolved",
            "assignee": "ana",
            "note": "fixed by a smaller micro-batch",
            "tracker_url": "https://tracker.example/T-9",
            "csrf_token": token,
            "back": f"a:{a['id']}",
        },
        headers=html,
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == f"/analyses/{a['id']}#group"
    page = client.get(f"/analyses/{a['id']}", headers=html).text
    card = page[page.index('id="group"') :].split("</section>", 1)[0]
    assert '<span class="chip">resolved</span>' in card and "fixed by a smaller micro-batch" in card
    assert 'href="https://tracker.example/T-9"' in card
    # the same state through the API, for known failures
    items = client.get("/api/v1/clusters", params={"unknown": "false", "status": "resolved"}).json()["items"]
    assert any(c["id"] == gid and c["note"] == "fixed by a smaller micro-batch" for c in items)


def test_named_failures_are_triaged_as_groups_on_their_page(client: httpx.Client) -> None:
    import re

    html = {"Accept": "text/html"}
    a = post(client, training_log(OOM.format(gib="9.75")), job_id="groups-page")
    page = client.get("/groups", params={"status": "all"}, headers=html).text
    report = client.get(f"/analyses/{a['id']}", headers=html).text
    gid = re.search(
        r'<h2 id="group-h">Failure group <code class="small tok" title="(f:[0-9a-z]+)"', report
    ).group(1)  # type: ignore[union-attr]
    cid = "c-" + gid.replace(":", "-")
    assert (
        f'id="{cid}"' in page
        and "Draft a rule" not in page.split(f'id="{cid}"', 1)[1].split("</section>", 1)[0]
    )
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = client.post(
        "/unknowns/groups",
        data={
            "group_id": gid,
            "status": "ignored",
            "note": "a known quota",
            "csrf_token": token,
            "back": "g:all",
        },
        headers=html,
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"].startswith("/groups?status=all&saved=")
    ignored = client.get("/groups", params={"status": "ignored"}, headers=html).text
    assert f'id="{cid}"' in ignored and "a known quota" in ignored
    assert f'id="{cid}"' not in client.get("/groups", headers=html).text  # open only, by default
    assert client.get("/groups", params={"status": "done"}, headers=html).status_code == 422
    assert 'href="/groups"' in client.get("/analyses", headers=html).text


def test_a_group_shows_each_sample_line_once(client: httpx.Client) -> None:
    """Samples show how a failure's line varies; the same line from three jobs says it once."""
    same = "[rank0]: BlorpStallError: the blorp queue stalled at its last stage\n"
    ids = [post(client, training_log(same, job=f"blorp-{n}"), job_id=f"blorp-{n}")["id"] for n in range(3)]
    r = client.get("/api/v1/clusters", params={"unknown": "true"})
    assert r.status_code == 200, r.text
    group = next(c for c in r.json()["items"] if ids[0] in c["analysis_ids"])
    assert group["count"] == 3
    assert [s["text"] for s in group["samples"]] == [same.rstrip("\n")]
