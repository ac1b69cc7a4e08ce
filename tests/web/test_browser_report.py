"""The report page in Chromium, on SQLite and PostgreSQL: feedback given on the page is stored
(read back through the API), shown on the report and counted on the rule's page; an evidence
line opens the log viewer at that line."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.servicekit import LiveServer
from tests.web.browserkit import ECC_CLASS, Web, example_upload, expect, submit

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]

RIGHT_CLASS = "nccl.collective_timeout"
COMMENT = "dcgmi diag passed on 10.12.0.33; the switch port flapped"


@pytest.fixture(scope="module")
def ecc(server: LiveServer) -> dict[str, Any]:
    res = submit(server.url, example_upload(), job_id="report-ecc-1")
    assert res["root_cause"]["failure_class"] == ECC_CLASS
    return res


def test_feedback_is_stored_shown_and_counted(web: Web, server: LiveServer, ecc: dict[str, Any]) -> None:
    aid, rule_id = ecc["id"], ecc["root_cause"]["rule_id"]
    page, _ = web.page(server.url)
    page.goto(f"/analyses/{aid}")
    form = page.locator("#feedback form")
    form.get_by_role("radio", name="wrong").check()
    form.get_by_label("If wrong, the right class").select_option(RIGHT_CLASS)
    form.get_by_label("Comment (optional)").fill(COMMENT)
    form.get_by_role("button", name="Send feedback").click()

    expect(page).to_have_url(re.compile(rf"/analyses/{aid}\?feedback=thanks#feedback$"))
    expect(page.locator("#feedback [role=status]")).to_contain_text("your feedback is stored")
    expect(page.locator("#feedback")).to_contain_text("1 answer so far")
    expect(page.locator("#feedback")).to_contain_text("0 correct, 1 wrong")

    stored = page.request.get(f"/api/v1/analyses/{aid}").json()["feedback"]
    assert [(f["verdict"], f["correct_class"], f["comment"]) for f in stored] == [
        ("wrong", RIGHT_CLASS, COMMENT)
    ]

    # the page after sending shows what was sent, not the same form blank again
    sent = page.locator("#feedback-sent")
    expect(sent).to_contain_text("the root cause is wrong")
    expect(sent).to_contain_text(RIGHT_CLASS)
    expect(sent).to_contain_text(COMMENT)
    expect(page.locator("#feedback form")).to_be_hidden()

    # a second answer, "correct", through the same form (unfolded again)
    page.locator("#feedback summary", has_text="Send another answer").click()
    page.locator("#feedback form").get_by_role("radio", name="correct").check()
    page.locator("#feedback form").get_by_role("button", name="Send feedback").click()
    expect(page.locator("#feedback")).to_contain_text("2 answers so far")
    expect(page.locator("#feedback")).to_contain_text("1 correct, 1 wrong")
    stored = page.request.get(f"/api/v1/analyses/{aid}").json()["feedback"]
    assert sorted(f["verdict"] for f in stored) == ["correct", "wrong"]

    # the rule's page counts the answers and gives its precision from them (1 of 2 right)
    page.goto(f"/rules/{rule_id}")
    main = page.locator("main")
    expect(main).to_contain_text(rule_id)
    expect(main).to_contain_text(re.compile(r"precision", re.I))
    expect(main).to_contain_text(re.compile(r"50\s*%|0\.50|1\s*(of|/)\s*2"))


def test_an_evidence_line_opens_the_viewer_at_that_line(
    web: Web, server: LiveServer, ecc: dict[str, Any]
) -> None:
    aid = ecc["id"]
    evidence = ecc["root_cause"]["evidence"][0]
    page, _ = web.page(server.url)
    page.goto(f"/analyses/{aid}")
    link = page.locator(".evidence a").first
    expect(link).to_have_text(f"{evidence['file']}:{evidence['line']}")
    link.click()
    line = int(evidence["line"])
    expect(page).to_have_url(re.compile(rf"/analyses/{aid}/files/\d+\?line={line}#L{line}$"))
    row = page.locator(f"tr[data-line='{line}']")
    expect(row).to_have_class(re.compile(r"\bselected\b"))
    expect(row).to_be_in_viewport()
    expect(row).to_contain_text("uncorrectable ECC error")
