"""The log viewer in Chromium: search (the form, then n/N on the page and across pages), wrap
(remembered, on by default on a phone), next error, folded repeats, ANSI colours, a line range's
permalink copied; without JavaScript the search form still lands on the hit. At laptop and
phone widths, light and dark: no horizontal overflow of the page, axe finds nothing serious or
critical, screenshots in test-artifacts/screenshots/viewer-*."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.servicekit import LiveServer
from tests.web.browserkit import PHONE, Web, axe_and_screenshots, expect, looks, submit

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = "x" * 400


def viewer_log() -> str:
    """Timestamped steps (alike: they fold), a coloured ERROR, a traceback, a long line and the
    word 'needle' on lines 40, 45 and 700 (the last on the second page)."""
    out = []
    for i in range(1, 801):
        ts = f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}.000Z"
        if i in (40, 45, 700):
            out.append(f"{ts} found the needle at step {i}")
        elif i == 60:
            out.append(f"{ts} \x1b[1;31mERROR\x1b[0m worker \x1b[32mrank 3\x1b[0m lost")
        elif i == 62:
            out.append(f"{ts} Traceback (most recent call last):")
        elif i == 80:
            out.append(f"{ts} long {LONG} end")
        else:
            out.append(f"{ts} [INFO] step {i} loss {1 / i:.4f} lr 1e-5")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def logged(site: LiveServer) -> dict[str, Any]:
    res = submit(site.url, [("train.log", viewer_log())], job_id="viewer-1")
    res["here"] = f"/analyses/{res['id']}/files/0"
    return res


def no_overflow(page: Any) -> None:
    wide = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert wide <= 0, f"the page scrolls sideways by {wide}px"


def current_line(page: Any) -> int:
    m = re.search(r"#L(\d+)$", page.url)
    assert m, page.url
    return int(m.group(1))


def test_search_hops_between_hits_on_the_page_and_across_pages(
    web: Web, site: LiveServer, logged: dict[str, Any]
) -> None:
    page, _ = web.page(site.url)
    page.goto(logged["here"])
    page.keyboard.press("/")
    expect(page.locator("#viewer-q")).to_be_focused()
    page.keyboard.type("needle")
    page.keyboard.press("Enter")  # the form's first button: Find next
    expect(page).to_have_url(re.compile(r"\?q=needle&line=40#L40$"))
    row = page.locator("#L40")
    expect(row).to_have_class(re.compile(r"\bmatch\b"))
    expect(row.locator("mark")).to_have_text("needle")
    expect(page.locator("#viewer-status")).to_contain_text("3 lines match")
    page.keyboard.press("n")  # the next hit is on this page: no request
    expect(page).to_have_url(re.compile(r"line=40#L45$"))
    expect(page.locator("#L45")).to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("n")  # past this page's hits: the server finds the next
    expect(page).to_have_url(re.compile(r"\?q=needle&line=700#L700$"))
    expect(page.locator("#L700")).to_be_in_viewport()
    page.keyboard.press("N")
    expect(page).to_have_url(re.compile(r"line=45#L45$"))
    failures = axe_and_screenshots(page, "viewer-search")
    assert not failures, "\n".join(failures)
    for _theme, _width in looks(page):
        no_overflow(page)


def test_next_error_colours_and_folds(web: Web, site: LiveServer, logged: dict[str, Any]) -> None:
    page, _ = web.page(site.url)
    page.goto(logged["here"])
    page.get_by_role("link", name="Next error ↓").click()  # on this page: no request
    expect(page).to_have_url(re.compile(r"/files/0#L60$"))
    row = page.locator("#L60")
    expect(row).to_have_class(re.compile(r"\berr\b"))
    expect(row.locator(".a-fg1.a-b")).to_have_text("ERROR")
    expect(row.locator(".a-fg2")).to_have_text("rank 3")
    assert "\x1b" not in row.inner_text() and "[0m" not in row.inner_text()
    page.keyboard.press("e")  # the traceback, on this page
    expect(page).to_have_url(re.compile(r"#L62$"))
    # the steps before the error are alike but for their numbers: folded after the first
    fold = page.locator("details.fold").first
    expect(fold.locator("summary")).to_contain_text("more lines like the one above")
    hidden = fold.locator("tr[data-line]").first
    expect(hidden).to_be_hidden()
    fold.locator("summary").click()
    expect(hidden).to_be_visible()
    page.keyboard.press("f")  # every fold open, then closed again
    expect(page.locator("details.fold:not([open])")).to_have_count(0)
    page.keyboard.press("f")
    expect(page.locator("details.fold[open]")).to_have_count(0)
    # timestamps hidden and shown
    ts = page.locator("#L60 td.ts")
    expect(ts).to_have_text(re.compile(r"^2024-05-01T12:01:00\.000Z\s*$"))
    page.keyboard.press("t")
    expect(ts).to_be_hidden()
    page.keyboard.press("t")
    expect(ts).to_be_visible()
    page.keyboard.press("?")
    expect(page.locator("#viewer-keys")).to_have_attribute("open", "")
    expect(page.locator("#viewer-keys")).to_contain_text("next / previous error")
    failures = axe_and_screenshots(page, "viewer-error")
    assert not failures, "\n".join(failures)


def test_wrap_is_remembered_and_on_by_default_on_a_phone(
    web: Web, site: LiveServer, logged: dict[str, Any]
) -> None:
    page, _ = web.page(site.url)
    page.goto(f"{logged['here']}?line=80#L80")
    cell = page.locator("#L80 td.txt")
    white = "(el) => getComputedStyle(el).whiteSpace"
    assert cell.evaluate(white) == "pre"
    page.get_by_role("link", name="Wrap lines").click()
    assert cell.evaluate(white) == "pre-wrap"
    expect(page.get_by_role("link", name="Unwrap lines")).to_be_visible()
    page.reload()
    assert page.locator("#L80 td.txt").evaluate(white) == "pre-wrap"  # remembered in this browser
    page.keyboard.press("w")
    assert page.locator("#L80 td.txt").evaluate(white) == "pre"
    phone, _ = web.page(site.url, viewport=PHONE)
    phone.goto(f"{logged['here']}?line=80#L80")
    assert phone.locator("#L80 td.txt").evaluate(white) == "pre-wrap"
    no_overflow(phone)
    failures = axe_and_screenshots(phone, "viewer-wrap")
    assert not failures, "\n".join(failures)


def test_a_line_range_updates_the_url_and_copies_its_permalink(
    web: Web, site: LiveServer, logged: dict[str, Any]
) -> None:
    page, _ = web.page(site.url, permissions=["clipboard-read", "clipboard-write"])
    here = logged["here"]
    page.goto(f"{here}?line=62#L62")
    page.get_by_role("link", name="Unfold repeats").click()  # line 58 is in a folded run
    page.locator("#L58 a.ln-link").click()
    page.locator("#L66 a.ln-link").click(modifiers=["Shift"])
    expect(page).to_have_url(re.compile(r"#L58-L66$"))
    expect(page.locator("tr.selected")).to_have_count(9)
    page.get_by_role("button", name="Copy permalink").click()
    expect(page.locator("#viewer-status")).to_contain_text("Permalink copied")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == f"{site.url.rstrip('/')}{here}?line=58#L58-L66"
    # the permalink opens on the range, from another page of the log
    other, _ = web.page(site.url)
    other.goto(f"{here}?offset=0")
    other.goto(copied)
    expect(other.locator("tr.selected")).to_have_count(9)
    expect(other.locator("#L58")).to_be_visible()  # its fold opened
    expect(other.locator("#L58")).to_be_in_viewport()


def test_without_javascript_the_search_form_lands_on_the_hit(
    web: Web, site: LiveServer, logged: dict[str, Any]
) -> None:
    page, watch = web.page(site.url, java_script_enabled=False)
    watch.allow(r"status of 422")  # the page that says the pattern cannot be used
    page.goto(logged["here"])
    page.get_by_role("searchbox", name="Search the log").fill("NEEDLE")
    page.get_by_role("button", name="Find next").click()
    expect(page).to_have_url(re.compile(r"\?q=NEEDLE&line=40#L40$"))
    expect(page.locator("#L40 mark")).to_have_text("needle")
    page.get_by_role("link", name="Next match ↓").click()
    expect(page).to_have_url(re.compile(r"line=45#L45$"))
    page.get_by_label("Match case").check()
    page.get_by_role("button", name="Find next").click()
    expect(page.locator("#viewer-status")).to_contain_text("No match of “NEEDLE”")
    page.get_by_role("searchbox", name="Search the log").fill("step (")
    page.get_by_label("Regex").check()
    page.get_by_role("button", name="Find next").click()
    expect(page.get_by_role("alert")).to_contain_text("cannot be used")
