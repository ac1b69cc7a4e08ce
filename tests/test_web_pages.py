"""History, rules, trends and the log viewer as a browser gets them (no JavaScript needed), on
SQLite and PostgreSQL: filters narrow, pages neither repeat nor skip, counts match what was
stored, links point at the views they summarise, markup in logs and metadata stays text."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from tests.servicekit import ECC, NCCL_TIMEOUT, OOM, LiveServer, training_log

# slow: live servers (the app under uvicorn), started per module or per test
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"
XSS_LINE = '<script>window.__xss=1</script> <img src=x onerror="alert(1)"> javascript:alert(1)\n'


def page(c: httpx.Client, path: str) -> httpx.Response:
    return c.get(path, headers={"Accept": "text/html"})


def ids_on(html: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r'href="/analyses/([0-9A-Z]{26})"', html)))


@pytest.fixture(scope="module")
def seeded(server: LiveServer) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"oom": [], "ecc": [], "unknown": [], "all": []}
    with server.client() as c:
        for i in range(7):
            r = c.post(
                API,
                content=training_log(OOM.format(gib=f"{i + 1}.5")).encode(),
                headers={"Content-Type": "text/plain"},
                params={"job_id": f"pages-oom-{i}", "host": f"node-{i % 2}", "framework": "verl"},
            )
            assert r.status_code == 201
            out["oom"].append(r.json()["id"])
        for i in range(3):
            log = training_log(ECC.format(ip="10.9.9.9") + NCCL_TIMEOUT)
            r = c.post(
                API,
                content=log.encode(),
                headers={"Content-Type": "text/plain"},
                params={"job_id": f"pages-ecc-{i}", "host": "gpu-bad"},
            )
            out["ecc"].append(r.json()["id"])
        r = c.post(
            API,
            content=("step 1 loss 0.5\n" + XSS_LINE).encode(),
            headers={"Content-Type": "text/plain"},
            params={"job_id": "<b>job</b>", "label": "team=<i>x</i>"},
        )
        out["unknown"].append(r.json()["id"])
        # feedback: two of the OOM analyses right, one wrong
        for aid, verdict in [
            (out["oom"][0], "correct"),
            (out["oom"][1], "correct"),
            (out["oom"][2], "wrong"),
        ]:
            assert c.post(f"{API}/{aid}/feedback", json={"verdict": verdict}).status_code == 201
    out["all"] = out["oom"] + out["ecc"] + out["unknown"]
    return out


def test_history_filters_narrow_and_combine(client: httpx.Client, seeded: dict[str, list[str]]) -> None:
    everything = set(ids_on(page(client, "/analyses?limit=100").text))
    assert set(seeded["all"]) <= everything
    hw = set(ids_on(page(client, "/analyses?kind=hardware&limit=100").text))
    assert set(seeded["ecc"]) <= hw and not (hw & set(seeded["oom"]))
    oom_node0 = set(ids_on(page(client, "/analyses?class=cuda.out_of_memory&host=node-0&limit=100").text))
    assert oom_node0 == {a for i, a in enumerate(seeded["oom"]) if i % 2 == 0} | (
        oom_node0 - set(seeded["all"])
    )
    searched = ids_on(page(client, "/analyses?q=pages-ecc-1").text)
    assert searched == [seeded["ecc"][1]]
    # a search ignores case on both databases (SQLite's LIKE, PostgreSQL's ILIKE) and keeps
    # LIKE's wildcards literal
    assert ids_on(page(client, "/analyses?q=PAGES-ECC-1").text) == [seeded["ecc"][1]]
    assert ids_on(page(client, "/analyses?q=pages_ecc").text) == []
    unknown = set(ids_on(page(client, "/analyses?unknown=1&limit=100").text))
    assert seeded["unknown"][0] in unknown and not (unknown & set(seeded["oom"] + seeded["ecc"]))
    with_fb = set(ids_on(page(client, "/analyses?feedback=yes&limit=100").text))
    assert set(seeded["oom"][:3]) <= with_fb and not (with_fb & set(seeded["ecc"]))
    by_rule = set(ids_on(page(client, "/analyses?rule=cuda-uncorrectable-ecc&limit=100").text))
    assert set(seeded["ecc"]) <= by_rule and not (by_rule & set(seeded["oom"]))


def test_history_pages_neither_repeat_nor_skip(client: httpx.Client, seeded: dict[str, list[str]]) -> None:
    full = ids_on(page(client, "/analyses?limit=100").text)
    seen: list[str] = []
    url = "/analyses?limit=25&framework=verl"
    want = ids_on(page(client, "/analyses?limit=100&framework=verl").text)
    while url:
        html = page(client, url).text
        seen += ids_on(html)
        m = re.search(r'href="(/analyses\?[^"]*cursor=[^"]*)" rel="next"', html)
        url = m.group(1).replace("&amp;", "&") if m else ""
    assert seen == want and len(set(seen)) == len(seen)
    assert [a for a in full if a in set(want)] == want  # newest first, same order
    # the count says how many match
    html = page(client, "/analyses?class=cuda.out_of_memory&job=pages-oom-3").text
    assert re.search(r">\s*1 analysis match", html)


def test_history_rejects_bad_filters_inline(client: httpx.Client) -> None:
    for q in ["since=99999999999d", "kind=nonsense", "since=2026-01-02&until=2026-01-01", "cursor=%%%"]:
        r = page(client, f"/analyses?{q}")
        assert r.status_code in (404, 422) and "text/html" in r.headers["content-type"], q
        if r.status_code == 422:
            assert 'role="alert"' in r.text


def test_rule_pages_count_what_fired_and_its_precision(
    client: httpx.Client, seeded: dict[str, list[str]]
) -> None:
    html = page(client, "/rules/cuda-out-of-memory").text
    m = re.search(r"Fired, 7 days</dt><dd>(\d+) analyses \((\d+) as root cause\)", html)
    assert m and int(m.group(1)) >= 7 and int(m.group(2)) >= 7
    assert "67% (2 correct, 1 wrong)" in html
    assert 'href="/analyses?rule=cuda-out-of-memory"' in html
    assert "Main signature" in html and "OutOfMemoryError" in html  # its patterns
    listing = page(client, "/rules?q=ecc").text
    assert "cuda-uncorrectable-ecc" in listing and "cuda-out-of-memory" not in listing
    assert page(client, "/rules/no-such-rule").status_code == 404


def test_trends_count_what_was_stored_and_link_to_history(
    client: httpx.Client, seeded: dict[str, list[str]]
) -> None:
    html = page(client, "/trends?days=7").text
    stats = client.get("/api/v1/stats", params={"days": 7}).json()
    assert f">{stats['analyses']:,}</div>" in html
    bars = re.findall(r'<a href="(/analyses\?[^"]*)" aria-label="([^"]*)"><rect', html)
    assert bars, "no bars"
    for href, label in bars:
        q = parse_qs(urlparse(href.replace("&amp;", "&")).query)
        day, count, cls = re.match(r"(\S+): (\d+) (\S+)", label).groups()  # type: ignore[union-attr]
        assert q["since"] == [day]
        if cls != "other":
            assert q["class"] == [cls]
            listed = ids_on(page(client, href.replace("&amp;", "&") + "&limit=100").text)
            assert len(listed) == int(count)


def test_viewer_opens_at_the_evidence_line_and_pages(
    client: httpx.Client, seeded: dict[str, list[str]]
) -> None:
    aid = seeded["ecc"][0]
    res = client.get(f"{API}/{aid}").json()
    line = res["root_cause"]["evidence"][0]["line"]
    html = page(client, f"/analyses/{aid}/files/0?line={line}").text
    assert f'id="L{line}"' in html and f'data-line="{line}" class="hit' in html  # hit (and err)
    assert "uncorrectable ECC error" in html
    assert 'href="/api/v1/analyses/' in html or "/log?file=0" in html  # the download
    assert page(client, f"/analyses/{aid}/files/9").status_code == 404
    assert page(client, f"/analyses/{aid}/files/0?line=0").status_code == 422


def test_markup_from_logs_and_metadata_is_inert_everywhere(
    client: httpx.Client, seeded: dict[str, list[str]]
) -> None:
    aid = seeded["unknown"][0]
    for path in [f"/analyses/{aid}", f"/analyses/{aid}/files/0", "/analyses?q=job", "/analyses?limit=100"]:
        html = page(client, path).text
        assert "<script>window.__xss" not in html and 'onerror="alert' not in html, path
        assert "<b>job</b>" not in html, path
    viewer = page(client, f"/analyses/{aid}/files/0").text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in viewer


def test_an_ingest_token_sees_only_its_own_history(
    tmp_path: Path, db_url: str, request: pytest.FixtureRequest
) -> None:
    from app.db import repo
    from app.db.session import Database
    from tests.servicekit import live_server, make_settings

    if db_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'own.db'}"
    else:
        url = request.getfixturevalue("pg_schemas").new()
    settings = make_settings(tmp_path, url, auth_cache_seconds=0)
    with live_server(settings) as srv, srv.client() as c:
        db = Database(settings.effective_database_url)
        try:
            with db.write() as s:
                _r, mine = repo.create_token(s, name="hook-a", scopes=["ingest"])
                _r, other = repo.create_token(s, name="hook-b", scopes=["ingest"])
        finally:
            db.dispose()
        body = OOM.format(gib="1").encode()
        a = c.post(
            API, content=body, headers={"Authorization": f"Bearer {mine}", "Content-Type": "text/plain"}
        )
        b = c.post(
            API,
            content=body + b"x\n",
            headers={"Authorization": f"Bearer {other}", "Content-Type": "text/plain"},
        )
        html = c.get("/analyses", headers={"Authorization": f"Bearer {mine}", "Accept": "text/html"}).text
        assert a.json()["id"] in html and b.json()["id"] not in html
        assert "the ones your token posted" in html
        assert (
            c.get("/rules", headers={"Authorization": f"Bearer {mine}", "Accept": "text/html"}).status_code
            == 403
        )


def _upload_case(c: httpx.Client, case: Path, names: list[str]) -> str:
    files = [("log", (n, (case / n).read_bytes(), "text/plain")) for n in names]
    r = c.post(API, files=files, params={"job_id": f"tl-{case.name}"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_report_shows_the_timeline_lanes_table_and_a_chart_with_the_failure(client: httpx.Client) -> None:
    from tests.conftest import ROOT

    case = ROOT / "tests" / "corpus" / "gpu" / "silent-rank-death"
    aid = _upload_case(client, case, ["console.log"])
    html = page(client, f"/analyses/{aid}").text
    section = html.split('id="timeline"', 1)[1].split("</section>", 1)[0]
    assert "rank 1 printed no error" in section and "phase: train" in section
    # one lane per rank, the named one marked; its last progress dot opens that line in the viewer
    assert section.count('class="lane named"') == 1 and section.count('class="lane"') == 1
    links = re.findall(rf'href="(/analyses/{aid}/files/0\?line=(\d+)#L\d+)"', section)
    assert len(links) == 2
    line_of = {int(n) for _h, n in links}
    viewer = page(client, links[0][0].replace("&amp;", "&")).text
    assert viewer.count("train: update on 16 sequences") >= 1 and min(line_of) > 1
    # the table: the named rank first-marked, its last line 90 s before the other's
    rows = re.findall(
        r"<tr( class=\"named\")?><td>(.*?)</td>.*?<td class=\"mono\">([\d:]+)</td><td>(.*?)</td>", section
    )
    by_rank = {re.sub(r"<[^>]+>|▶ ", "", r[1]).strip(): r for r in rows}
    assert by_rank["1"][0] and not by_rank["0"][0]
    assert (by_rank["1"][2], by_rank["0"][2]) == ("20:12:00", "20:13:30")
    assert by_rank["1"][3] in ("90 s", "91 s")
    # the loss and step-time history, the failure marked at the step the named rank reached
    assert "loss (loss:" in section and "step time (step_time:" in section
    charts = section.count("<h3>")
    assert charts >= 2 and section.count('class="marker"') == charts and ">failure<" in section


def test_a_single_process_log_gets_its_chart_but_no_rank_lanes(client: httpx.Client) -> None:
    r = client.post(
        API, content=training_log(OOM.format(gib="2.5")).encode(), headers={"Content-Type": "text/plain"}
    )
    section = (
        page(client, f"/analyses/{r.json()['id']}").text.split('id="timeline"', 1)[1].split("</section>")[0]
    )
    assert (
        "loss (loss:" in section and 'class="lane' not in section and "Where each rank stopped" not in section
    )
    bare = 'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nValueError: bad\n'
    r = client.post(API, content=bare.encode(), headers={"Content-Type": "text/plain"})
    assert 'id="timeline"' not in page(client, f"/analyses/{r.json()['id']}").text
