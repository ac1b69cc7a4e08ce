"""The files of an analysis by time (/analyses/{id}/by-time, app.service.logmerge), on live
servers (SQLite and PostgreSQL): lines interleaved by their clocks, paging both ways by cursor,
opening at a time, a file without clocks named and left out, bad input a clear error."""

from __future__ import annotations

import calendar
import random
import re
import time
from typing import Any

import httpx
import pytest

from tests.servicekit import NCCL_TIMEOUT

pytestmark = pytest.mark.slow  # a live server

API = "/api/v1/analyses"
T0 = calendar.timegm((2026, 11, 27, 4, 0, 0, 0, 0, 0))


def printed(whole: int, digits: str) -> float:
    """The time a printed clock says (whole seconds and a fraction's digits), as it reads back."""
    return whole + float("0." + digits)


def iso(ms: int) -> str:
    y, mo, d, h, mi, sec = time.gmtime(ms // 1000)[:6]
    return f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{sec:02d},{ms % 1000:03d}"


def glog(ms: int) -> str:
    _y, mo, d, h, mi, sec = time.gmtime(ms // 1000)[:6]
    return f"I{mo:02d}{d:02d} {h:02d}:{mi:02d}:{sec:02d}.{ms % 1000 * 1000:06d}"


def make_files() -> tuple[list[tuple[str, str]], list[tuple[float, int, int]]]:
    """rank0 (ISO clocks, with traceback lines that have none), rank1 (glog clocks, no year:
    the year comes from rank0), notes.txt (no clock at all); and the true order of the two
    ranks' lines as (time, file, line)."""
    rng = random.Random(4)
    truth: list[tuple[float, int, int]] = []
    r0, r1 = [], []
    t = T0 * 1000  # milliseconds: the clocks print exactly
    for i in range(700):
        t += rng.choice([250, 500, 1000])
        r0.append(f"{iso(t)} INFO rank0 step {i} loss {rng.random():.4f}")
        shown_t = printed(t // 1000, iso(t).rsplit(",", 1)[1])
        truth.append((shown_t, 0, len(r0)))
        if i % 97 == 5:  # a traceback: its lines have no clock and stay with the header
            for k in range(3):
                r0.append(f'  File "train.py", line {100 + k}, in step')
                truth.append((shown_t, 0, len(r0)))
    t = T0 * 1000 + 100
    for i in range(650):
        t += rng.choice([300, 600, 900])
        r1.append(f"{glog(t)} 4242 train.cc:12] rank1 step {i} throughput {rng.randint(900, 1300)}")
        shown_t = printed(t // 1000, glog(t).rsplit(".", 1)[1])
        truth.append((shown_t, 1, len(r1)))
    r1.append("  watchdog: " + NCCL_TIMEOUT.split("] ", 1)[1].rstrip("\n"))  # no clock of its own
    truth.append((shown_t, 1, len(r1)))
    notes = "a file with no clock\n" * 40
    truth.sort(key=lambda e: (e[0], e[1], e[2]))
    return [
        ("rank0.log", "\n".join(r0) + "\n"),
        ("rank1.log", "\n".join(r1) + "\n"),
        ("notes.txt", notes),
    ], truth


@pytest.fixture(scope="module")
def merged(server: Any) -> dict[str, Any]:
    files, truth = make_files()
    with server.client() as c:
        r = c.post(API, files=[("log", (n, body.encode(), "text/plain")) for n, body in files])
        assert r.status_code == 201, r.text
        return {"id": r.json()["id"], "truth": truth}


def page(c: httpx.Client, path: str) -> tuple[int, str]:
    r = c.get(path, headers={"Accept": "text/html"})
    return r.status_code, r.text


def shown(html: str, aid: str) -> list[tuple[int, int]]:
    return [
        (int(p), int(n)) for p, n in re.findall(rf'href="/analyses/{aid}/files/(\d+)\?line=(\d+)#L\2"', html)
    ]


def link(html: str, rel: str) -> str | None:
    m = re.search(rf'href="([^"]+)" rel="{rel}"', html)
    return m.group(1).replace("&amp;", "&") if m else None


def test_lines_of_every_clocked_file_come_in_time_order_and_page_both_ways(
    client: httpx.Client, merged: dict[str, Any]
) -> None:
    aid, truth = merged["id"], merged["truth"]
    order = [(p, n) for _t, p, n in truth]
    # by default the page opens at the root cause (rank1's NCCL timeout, its last line)
    status, html = page(client, f"/analyses/{aid}/by-time")
    assert status == 200
    root = shown(html, aid)
    assert (1, 651) in root and re.search(r'<tr id="root" class="f1', html)
    assert root == order[order.index(root[0]) :][: len(root)]
    start = link(html, "start")
    assert start and "from=0%3A1%2C1%3A1" in start
    status, html = page(client, start)
    assert status == 200
    first = shown(html, aid)
    assert first == order[: len(first)] and len(first) == 300
    # the file without a clock is named, linked on its own, and not merged
    assert "No clock in" in html and f'href="/analyses/{aid}/files/2"' in html
    assert not any(p == 2 for p, _n in first)
    later = link(html, "next")
    assert later and "from=" in later
    status, html2 = page(client, later)
    second = shown(html2, aid)
    assert status == 200 and second == order[300 : 300 + len(second)] and second
    earlier = link(html2, "prev")
    assert earlier and "before=" in earlier
    status, back = page(client, earlier)
    assert status == 200 and shown(back, aid) == first
    # on to the end: every line once, in order, then no "Later"
    seen, nxt = first + second, link(html2, "next")
    while nxt:
        status, h = page(client, nxt)
        seen += shown(h, aid)
        nxt = link(h, "next")
    assert seen == order


def test_a_page_opens_at_a_time_with_a_few_lines_before_it(
    client: httpx.Client, merged: dict[str, Any]
) -> None:
    aid, truth = merged["id"], merged["truth"]
    t, p, n = truth[len(truth) // 2]
    status, html = page(client, f"/analyses/{aid}/by-time?at={iso(round(t * 1000)).replace(',', '.')}")
    assert status == 200
    got = shown(html, aid)
    assert (p, n) in got  # the first line at that time is on the page, after a little context
    assert got.index((p, n)) == 2 * 8  # eight lines a file, from both files together
    order = [(q, m) for _t, q, m in truth]
    assert got == order[order.index(got[0]) : order.index(got[0]) + len(got)]
    # epoch seconds, as the page's own links carry them, land in the same place
    status, html2 = page(client, f"/analyses/{aid}/by-time?at={t}")
    assert shown(html2, aid)[: len(got)] == got


def test_picked_files_and_a_column_per_file(client: httpx.Client, merged: dict[str, Any]) -> None:
    aid, truth = merged["id"], merged["truth"]
    status, html = page(client, f"/analyses/{aid}/by-time?files=1&from=1:1")
    only = [(p, n) for _t, p, n in truth if p == 1]
    assert status == 200 and shown(html, aid) == only[:300]
    status, html = page(client, f"/analyses/{aid}/by-time?files=0&files=1&layout=columns&from=0:1,1:1")
    assert status == 200 and "merged-cols" in html
    assert re.search(r"<th scope=\"col\" class=\"file-tag f0\">rank0.log</th>", html)
    assert shown(html, aid) == [(p, n) for _t, p, n in truth][:300]


def test_bad_input_is_a_clear_page(client: httpx.Client, merged: dict[str, Any]) -> None:
    aid = merged["id"]
    for query, code, words in (
        ("at=yesterday", 422, "at is a time"),
        ("from=0:x", 422, "FILE:LINE"),
        ("files=9", 404, "no file 9"),
        ("files=a", 422, "file numbers"),
        ("layout=diagonal", 422, "layout is lines or columns"),
    ):
        status, html = page(client, f"/analyses/{aid}/by-time?{query}")
        assert status == code and words in html, (query, status)
    status, _ = page(client, "/analyses/01NOTANANALYSIS0000000000/by-time")
    assert status == 404
    # the viewer of one file links here
    status, html = page(client, f"/analyses/{aid}/files/0")
    assert status == 200 and f'href="/analyses/{aid}/by-time"' in html
