"""Teaching the service through the API on live servers (SQLite and PostgreSQL): unknown
failures -> their cluster -> a drafted rule with its back-test -> published into the site pack
-> the next variant of the failure is named, by every scan worker, without a restart."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.servicekit import LiveServer, cli_env, live_server, make_settings, run_cli, training_log

pytestmark = pytest.mark.slow  # live servers

API = "/api/v1/analyses"
FROB = (
    "(WorkerDict pid={pid}, ip=10.0.{n}.7) Traceback (most recent call last):\n"
    '(WorkerDict pid={pid}, ip=10.0.{n}.7)   File "/opt/site/frob.py", line 88, in spin\n'
    "(WorkerDict pid={pid}, ip=10.0.{n}.7) FrobnicatorError: frobnicator 0x{h:x} on /data/run-{n}/shard-{n}.bin "
    "lost its lease after {s} s\n"
)


def frob(n: int) -> str:
    return training_log(FROB.format(pid=1000 + n, n=n, h=0x7F00 + n, s=30 + n), job=f"frob-{n}")


@pytest.fixture(scope="module")
def teach(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = tmp_path_factory.mktemp("teach")
    with live_server(make_settings(data, db_url)) as srv:
        yield srv


def post(c: httpx.Client, text: str, **params: Any) -> dict[str, Any]:
    r = c.post(API, content=text.encode(), params=params, headers={"Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def test_three_unknowns_teach_a_rule_that_names_the_fourth(teach: LiveServer) -> None:
    with teach.client() as c:
        first = [post(c, frob(n), job_id=f"frob-{n}") for n in (1, 2, 3)]
        assert all(a["root_cause"] is None for a in first)
        items = c.get("/api/v1/clusters").json()["items"]
        (cluster,) = [x for x in items if first[0]["id"] in x["analysis_ids"]]
        assert cluster["count"] == 3
        r = c.post("/api/v1/rules/drafts", json={"cluster_id": cluster["id"]})
        assert r.status_code == 201, r.text
        draft = r.json()
        assert draft["problems"] == [], draft["problems"]
        pattern = draft["rule"]["match"]["any"][0]
        assert "FrobnicatorError" in pattern and "(?P<" in pattern
        for a in first:  # it matches the lines it came from
            line = a["signals"][0]["text"]
            assert re.search(pattern, line), (pattern, line)
        bt = draft["backtest"]
        assert set(bt["analysis_ids"]) == {a["id"] for a in first} and set(bt["unknown"]) == set(
            bt["analysis_ids"]
        )
        assert bt["conflicts"] == [] and bt["complete"]
        assert draft["rule"]["failure_class"] == "unknown"  # nobody said what it is yet
        # publishing needs a class
        r = c.post(f"/api/v1/rules/drafts/{draft['id']}/publish", json={})
        assert r.status_code == 422 and "failure class" in r.json()["detail"]
        r = c.post(
            f"/api/v1/rules/drafts/{draft['id']}/publish",
            json={
                "id": "site-frob-lease-lost",
                "site_class": {
                    "id": "site.frob_lease",
                    "kind": "infra",
                    "summary": "the frob service lost a lease",
                },
                "title": "The frobnicator lost its lease",
                "remediation": "- Renew the frob lease (frobctl renew) before the job starts; it lasts {num1}.",
            },
        )
        assert r.status_code == 201, r.text
        pub = r.json()
        assert pub["rule_id"] == "site-frob-lease-lost" and pub["version"] == 1
        assert pub["diff"].startswith("--- /dev/null") and "+failure_class: site.frob_lease" in pub["diff"]
        assert set(pub["retriage"]["analysis_ids"]) == {a["id"] for a in first}
        # at once: the next variant, other numbers, other paths, is named
        fourth = post(c, frob(7), job_id="frob-7")
        root = fourth["root_cause"]
        assert (
            root and root["rule_id"] == "site-frob-lease-lost" and root["failure_class"] == "site.frob_lease"
        )
        assert "+site." in fourth["library_version"]
        assert "lasts 37 s" in "\n".join(fourth["next_steps"]) or "37 s" in str(root.get("remediation", ""))
        # the audit trail
        site = c.get("/api/v1/rules/site").json()["items"]
        assert [(x["rule_id"], x["version"], x["draft_id"]) for x in site] == [
            ("site-frob-lease-lost", 1, draft["id"])
        ]
        assert site[0]["author"] and site[0]["published_at"]
        # published once; again is a new version
        r = c.post(f"/api/v1/rules/drafts/{draft['id']}/publish", json={"failure_class": "infra.unknown"})
        assert r.status_code in (409, 422)
        # re-triage moves the three earlier ones
        r = c.post(f"{API}/{first[0]['id']}/retriage")
        assert r.status_code == 200, r.text
        again = c.get(f"{API}/{first[0]['id']}").json()
        assert again["root_cause"]["rule_id"] == "site-frob-lease-lost"
    # the pack as rule files with fixtures: they pass `rules test`, and the offline CLI names
    # a fifth variant with them (and not without)
    out = teach.settings.data_dir / "exported-pack"
    env = cli_env(teach.settings)
    r = run_cli("rules", "export", "--format", "pack", "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    assert (out / "site-frob-lease-lost.yaml").is_file() and (out / "classes.yaml").is_file()
    assert sorted(p.name for p in out.glob("*.log")) == [
        f"site-frob-lease-lost.match-{i}.log" for i in (1, 2, 3)
    ]
    r = run_cli("rules", "test", "-v", "--pack", str(out), env=env)
    assert r.returncode == 0 and r.stdout.rstrip().endswith(", 0 failed"), r.stdout
    for i in (1, 2, 3):  # the pack's own fixtures ran (and the baseline), not the bundled ones
        assert "ok   site-frob-lease-lost" in r.stdout and f"site-frob-lease-lost.match-{i}.log" in r.stdout
    assert "cuda-device-side-assert" not in r.stdout
    log = out.parent / "fifth.log"
    log.write_text(frob(9))
    with_pack = run_cli("analyze", str(log), "--format", "json", "--pack", str(out), env=env)
    assert with_pack.returncode == 0, with_pack.stderr
    assert json.loads(with_pack.stdout)["root_cause"]["rule_id"] == "site-frob-lease-lost"
    bare = run_cli("analyze", str(log), "--format", "json", env=env)
    assert json.loads(bare.stdout)["root_cause"] is None
    # a broken pack is a clear error, not a traceback
    (out / "broken.yaml").write_text("id: broken\nversion: 1\n")
    r = run_cli("analyze", str(log), "--pack", str(out), env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "broken" in r.stderr


def test_a_draft_from_picked_lines_and_hostile_lines_are_inert(teach: LiveServer) -> None:
    hostile = training_log(
        "[rank0]: PayloadError: <script>alert(1)</script> (a+)+$ [x]{9999} \\ `rm -rf /` failed after 12 tries\n",
        job="hostile",
    )
    with teach.client() as c:
        a = post(c, hostile, job_id="hostile")
        line = a["signals"][0]["line"]
        r = c.post("/api/v1/rules/drafts", json={"analysis_id": a["id"], "lines": [line]})
        assert r.status_code == 201, r.text
        d = r.json()
        pattern = d["rule"]["match"]["any"][0]
        assert d["problems"] == [] and "<script>" in pattern.replace("\\", "")
        # the text is escaped: the metacharacters are literal, nothing backtracks
        assert re.search(pattern, a["signals"][0]["text"]) and not re.search(
            pattern, "aaaaaaaaaaaaaaaaaaaaaaaa!"
        )
        for body, code in (
            ({"analysis_id": a["id"], "lines": [10**6]}, 422),
            ({"analysis_id": a["id"], "lines": []}, 422),
            ({"analysis_id": a["id"], "lines": [1], "file": 3}, 404),
            ({}, 422),
            ({"cluster_id": "t:ffffffffffff"}, 404),
            ({"cluster_id": "t:x", "analysis_id": a["id"]}, 422),
        ):
            r = c.post("/api/v1/rules/drafts", json=body)
            assert r.status_code == code and r.headers["content-type"] == "application/problem+json", (
                body,
                r.text,
            )
        assert c.get("/api/v1/rules/drafts/01ARZ3NDEKTSV4RRFFQ69G5FAV").status_code == 404
        assert c.get(f"/api/v1/rules/drafts/{d['id']}").json()["id"] == d["id"]


def test_a_publish_that_fails_midway_leaves_nothing_published(teach: LiveServer) -> None:
    """The version row is written, then the database fails before the commit: no version, the
    draft still unpublished, the pack unchanged; publishing again then works."""
    from sqlalchemy import event

    from app.db.models import SiteRule
    from app.service import drafts
    from app.service.access import ALL_SCOPES, Principal

    ctx = teach.ctx
    with teach.client() as c:
        a = post(c, frob(11), job_id="crash-1")
        line = a["signals"][0]["line"]
        d = c.post("/api/v1/rules/drafts", json={"analysis_id": a["id"], "lines": [line]}).json()
        before = c.get("/api/v1/rules/site").json()["items"]
    who = Principal(None, "crash-test", ALL_SCOPES)

    def fail(session: Any, _flush_context: Any) -> None:
        if any(isinstance(o, SiteRule) for o in session.new) or any(
            isinstance(o, SiteRule) for o in session.identity_map.values()
        ):
            raise RuntimeError("the database went away")

    from sqlalchemy.orm import Session

    event.listen(Session, "after_flush", fail)
    try:
        with pytest.raises(RuntimeError, match="went away"):
            drafts.publish_draft(
                ctx,
                draft_id=d["id"],
                principal=who,
                overrides={"id": "site-crash-rule", "failure_class": "nccl.error"},
            )
    finally:
        event.remove(Session, "after_flush", fail)
    with teach.client() as c:
        assert c.get("/api/v1/rules/site").json()["items"] == before
        assert c.get(f"/api/v1/rules/drafts/{d['id']}").json()["published_version"] is None
    out = drafts.publish_draft(
        ctx,
        draft_id=d["id"],
        principal=who,
        overrides={"id": "site-crash-rule", "failure_class": "nccl.error"},
    )
    assert out["version"] == 1
