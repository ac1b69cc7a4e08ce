"""The bugs of issue 25 (part 2) as a browser without JavaScript sees them: "Same failure
before" lists only earlier analyses, the history shows the host a report found, the page after
sending feedback shows what was sent, /docs carries the site's header; and the report's
lanes chart when every line carries one time."""

from __future__ import annotations

import re

import httpx
import pytest

from app.web.timeline_view import lanes_svg
from tests.servicekit import ECC, NCCL_TIMEOUT, training_log

# slow: a live server per module
pytestmark = pytest.mark.slow

API = "/api/v1/analyses"


def page(c: httpx.Client, path: str) -> str:
    r = c.get(path, headers={"Accept": "text/html"})
    assert r.status_code == 200, r.text[:500]
    return r.text


def post(c: httpx.Client, log: str, **params: str) -> str:
    r = c.post(API, content=log.encode(), headers={"Content-Type": "text/plain"}, params=params)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def aside_section(html: str, heading: str) -> str:
    m = re.search(rf"<h2>{re.escape(heading)}</h2>(.*?)</div>", html, re.S)
    return m.group(1) if m else ""


def test_same_failure_before_lists_only_earlier_analyses(client: httpx.Client) -> None:
    log = training_log(ECC.format(ip="10.7.7.7") + NCCL_TIMEOUT, job="before")
    ids = [post(client, log, job_id=f"before-{i}") for i in range(3)]
    middle = aside_section(page(client, f"/analyses/{ids[1]}"), "Same failure before")
    assert ids[0] in middle
    assert ids[2] not in middle, "a later analysis is listed as 'before'"
    first = page(client, f"/analyses/{ids[0]}")
    assert ids[1] not in aside_section(first, "Same failure before")
    assert ids[2] not in aside_section(first, "Same failure before")


def test_history_shows_the_host_the_report_found(client: httpx.Client) -> None:
    # no host from the hook: the report reads 10.8.8.8 from the log's own lines
    aid = post(client, training_log(ECC.format(ip="10.8.8.8")), job_id="hostless")
    report = page(client, f"/analyses/{aid}")
    assert "10.8.8.8" in report
    history = page(client, "/analyses?job=hostless")
    row = re.search(rf'<tr>\s*<td[^>]*><a href="/analyses/{aid}">.*?</tr>', history, re.S)
    assert row is not None
    host_cell = re.search(r'<td[^>]*data-label="Host"[^>]*>(.*?)</td>', row.group(0), re.S)
    assert host_cell is not None and "10.8.8.8" in host_cell.group(1), row.group(0)


def test_the_page_after_feedback_shows_what_was_sent(client: httpx.Client) -> None:
    aid = post(client, training_log(ECC.format(ip="10.9.1.1")))
    html = page(client, f"/analyses/{aid}")
    token = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert token is not None
    r = client.post(
        f"/analyses/{aid}/feedback",
        data={
            "csrf_token": token.group(1),
            "verdict": "wrong",
            "correct_class": "nccl.collective_timeout",
            "comment": "the switch",
        },
    )
    assert r.status_code == 303
    after = page(client, r.headers["location"])
    sent = re.search(r'id="feedback-sent">(.*?)</div>', after, re.S)
    assert sent is not None, "no sent state after sending"
    text = sent.group(1)
    assert "<strong>wrong</strong>" in text and "nccl.collective_timeout" in text and "the switch" in text
    # the form is still there for another answer, folded away
    assert re.search(r"<details[^>]*><summary>Send another answer</summary>\s*<form", after)


def test_docs_carry_the_site_header(client: httpx.Client) -> None:
    html = page(client, "/docs")
    assert 'class="site-header"' in html and 'href="/analyses"' in html
    assert re.search(r'<a href="/docs" aria-current="page">API</a>', html)
    assert 'id="swagger-ui"' in html and "swagger-ui-bundle.js" in html
    assert "<script>" not in html  # the CSP allows no inline script


def _timeline(first: str, last: str) -> dict[str, object]:
    return {
        "verdict": {"ranks": [1]},
        "ranks": [
            {"rank": 0, "first_time": first, "last_time": last},
            {"rank": 1, "first_time": first, "last_time": last},
        ],
    }


def test_lanes_with_one_time_for_every_line_show_a_window_not_zero_seconds() -> None:
    t = "2026-11-23T20:11:43Z"
    svg = str(lanes_svg({"id": "A", "files": []}, _timeline(t, t)))
    assert "0 s<" not in svg
    assert "all at 20:11:43" in svg
    times = re.findall(r">(\d\d:\d\d:\d\d)<", svg)
    assert len(times) == 2 and times[0] != times[1], times
    assert "its timed lines all at 20:11:43" in svg


def test_lanes_of_a_real_span_say_how_long() -> None:
    svg = str(lanes_svg({"id": "A", "files": []}, _timeline("2026-11-23T20:11:43Z", "2026-11-23T20:12:43Z")))
    assert ">60 s<" in svg and ">20:11:43<" in svg and ">20:12:43<" in svg
