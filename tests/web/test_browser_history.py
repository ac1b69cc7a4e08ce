"""History, rules and trends in Chromium, on SQLite and PostgreSQL: the history filtered from its
form gives a URL that shows the same view to someone else; a rule's page counts the analyses it
led and links back to them; the trends page draws its charts and each links to the history it
summarises."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.servicekit import LiveServer
from tests.web.browserkit import (
    ECC_TITLE,
    TRACEBACK,
    Web,
    example_upload,
    expect,
    submit,
)

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]

ECC_RULE = "cuda-uncorrectable-ecc"


@pytest.fixture(scope="module")
def history(server: LiveServer) -> dict[str, str]:
    ecc = submit(server.url, example_upload(), job_id="hist-ecc-1", host="10.12.0.33")
    oom = submit(server.url, [("train.log", TRACEBACK)], job_id="hist-oom-1")
    unknown = submit(server.url, [("quiet.log", "step 1 loss 0.5\nstep 2 loss 0.4\n")], job_id="hist-quiet-1")
    return {"ecc": ecc["id"], "oom": oom["id"], "unknown": unknown["id"]}


def rows(page: Any) -> Any:
    return page.locator("table.data tbody tr")


def test_history_filters_make_a_url_that_shares_the_view(
    web: Web, server: LiveServer, history: dict[str, str]
) -> None:
    page, _ = web.page(server.url)
    page.goto("/analyses")
    expect(rows(page)).to_have_count(3)

    page.get_by_label("Who acts").select_option("hardware")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"/analyses\?(.*&)?kind=hardware(&|$)"))
    expect(rows(page)).to_have_count(1)
    expect(rows(page).first).to_contain_text(ECC_TITLE)
    shared = page.url

    # someone else opens the link: the same view, the form showing the filter
    other, _ = web.page(server.url)
    other.goto(shared)
    expect(rows(other)).to_have_count(1)
    expect(rows(other).first).to_contain_text(ECC_TITLE)
    expect(other.get_by_label("Who acts")).to_have_value("hardware")

    # full-text search of job ids, and "unknown only"; Reset clears every filter
    page.goto("/analyses")
    page.get_by_label("Search").fill("hist-oom-1")
    page.get_by_label("Search").press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]q=hist-oom-1"))
    expect(rows(page)).to_have_count(1)
    expect(rows(page).first).to_contain_text("CUDA out of memory")
    page.get_by_role("link", name="Reset").click()
    expect(rows(page)).to_have_count(3)
    page.get_by_label("unknown only").check()
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"[?&]unknown=1"))
    expect(rows(page)).to_have_count(1)
    rows(page).first.get_by_role("link", name="No known failure").click()
    expect(page).to_have_url(re.compile(rf"/analyses/{history['unknown']}$"))
    expect(page.locator("main h1")).to_have_text("No known failure matched")


def test_a_rule_page_from_the_report_counts_and_links_its_analyses(
    web: Web, server: LiveServer, history: dict[str, str]
) -> None:
    page, _ = web.page(server.url)
    page.goto(f"/analyses/{history['ecc']}")
    page.locator(".root-card").get_by_role("link", name=ECC_RULE).click()
    expect(page).to_have_url(re.compile(rf"/rules/{ECC_RULE}$"))
    expect(page.locator("main h1")).to_have_text(ECC_TITLE)
    facts = page.locator("aside")
    expect(facts).to_contain_text(re.compile(r"Fired, 7 days\s*1 analyses \(1 as root cause\)"))
    expect(page.locator("main")).to_contain_text("hardware.gpu_ecc_error")
    page.get_by_role("link", name="Analyses where it fired").click()
    expect(page).to_have_url(re.compile(rf"/analyses\?(.*&)?rule={ECC_RULE}"))
    expect(rows(page)).to_have_count(1)
    expect(rows(page).first).to_contain_text("hist-ecc-1")

    # the library's list: searched, the rule's row shows its activity
    page.goto("/rules")
    page.get_by_label("Search").fill(ECC_RULE)
    page.get_by_role("button", name="Filter").click()
    row = page.locator("table.data tbody tr", has=page.get_by_role("link", name=ECC_RULE, exact=True))
    expect(row).to_have_count(1)
    expect(row).to_contain_text("1 / 1")


def test_trends_render_and_link_to_the_history_they_summarise(
    web: Web, server: LiveServer, history: dict[str, str]
) -> None:
    page, _ = web.page(server.url)
    page.goto("/trends")
    expect(page.locator("main h1")).to_have_text("Trends")
    charts = page.locator("main svg")
    expect(charts.first).to_be_visible()
    assert charts.count() >= 2, "failures per day and the unknown rate"
    # the charts are drawn: bars and points with links into the history
    assert page.locator("main svg a").count() >= 1
    totals = page.locator("a.stat", has_text="analyses").first
    expect(totals).to_contain_text("3")
    expect(page.locator("a.stat", has_text="no known root cause")).to_contain_text("33%")
    # a legend entry opens the history of its class
    page.locator(".legend a", has_text="hardware.gpu_ecc_error").click()
    expect(page).to_have_url(re.compile(r"/analyses\?.*class=hardware\.gpu_ecc_error"))
    expect(rows(page)).to_have_count(1)
    expect(rows(page).first).to_contain_text(ECC_TITLE)
    # the totals open the history they count
    page.go_back()
    page.locator("a.stat", has_text="analyses").first.click()
    expect(page).to_have_url(re.compile(r"/analyses\?since="))
    expect(rows(page)).to_have_count(3)
