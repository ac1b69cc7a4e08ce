"""Markup in a log, a job id, a host, a label or a file name is shown as text and never runs, on
every page that shows it: the report (served, and swapped in place after an upload), the upload
page's recent list, and the log viewer, history and rule pages where they exist.

Each page is visited twice: as served (its CSP forbids inline script, so an injection would also
log a CSP violation, which the `web` fixture fails on) and in a context that bypasses the CSP, so
that markup which escaped escaping would really run and set `window.__xss`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.servicekit import LiveServer
from tests.web.browserkit import ECC_CLASS, Web, expect, expect_report, submit

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCRIPT = "<script>window.__xss=1</script>"
IMG = '<img src=x onerror="window.__xss=1">'
SVG = "<svg onload=window.__xss=1>"
JS_URL = "javascript:window.__xss=1"
MD_LINK = f"[click me]({JS_URL})"
# lines the rules match, each carrying markup where the evidence shows it
HOSTILE_LOG = (
    "step 1 loss 0.9\n"
    f"(WorkerDict pid=90412, ip=10.12.0.33) RuntimeError: CUDA error: uncorrectable ECC error encountered {SCRIPT}\n"
    f"(WorkerDict pid=90413, ip=10.12.0.34) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. {IMG}\n"
    f"[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
    f'timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE) {MD_LINK} {SVG} <a href="{JS_URL}">x</a> ran for 600060 '
    "milliseconds before timing out.\n"
)
JOB_ID = f"job-<b>bold</b>-{IMG}"
FILE_NAME = "<img src=x onerror=window.__xss=1>.log"

INERT = """() => {
  const bad = [];
  if (window.__xss !== undefined) bad.push("window.__xss was set");
  for (const s of document.scripts) {
    const src = s.getAttribute("src") || "";
    if (!src.startsWith("/static/")) bad.push("script element: " + s.outerHTML.slice(0, 120));
  }
  for (const el of document.body.querySelectorAll("*")) {
    for (const a of el.attributes) {
      if (a.name.startsWith("on")) bad.push("event handler attribute: " + el.outerHTML.slice(0, 120));
      if (/^\\s*javascript:/i.test(a.value)) bad.push("javascript: URL: " + el.outerHTML.slice(0, 120));
    }
  }
  for (const el of document.querySelectorAll("iframe, object, embed, svg[onload], img[src='x']"))
    bad.push("injected element: " + el.outerHTML.slice(0, 120));
  for (const el of document.querySelectorAll("b"))
    if (el.textContent === "bold") bad.push("injected element: " + el.outerHTML);
  return bad;
}"""


@pytest.fixture(scope="module")
def hostile(site: LiveServer) -> Iterator[dict[str, Any]]:
    """An analysis whose log, file name, job id, host and labels all carry markup."""
    res = submit(
        site.url,
        [(FILE_NAME, HOSTILE_LOG)],
        job_id=JOB_ID,
        host=SVG,
        label=[f"note={SCRIPT}", f"link={JS_URL}"],
    )
    assert res["root_cause"]["failure_class"] == ECC_CLASS
    yield res


def assert_inert(page: Any, *, shows: list[str]) -> None:
    assert page.evaluate(INERT) == []
    text = page.locator("body").inner_text()
    for s in shows:
        assert s in text, f"{s!r} is not shown as text on {page.url}"


def pages_of(site: LiveServer, res: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """Pages that show the hostile analysis, with what each must show as text: the report and the
    upload page always, the viewer, history and rule pages once they exist."""
    aid = res["id"]
    pages: dict[str, tuple[str, list[str]]] = {
        "report": (f"/analyses/{aid}", [SCRIPT, JOB_ID, SVG, FILE_NAME, JS_URL]),
        "upload (recent analyses)": ("/", [JOB_ID]),
    }
    by_page = {
        "viewer": [
            ("viewer", f"/analyses/{aid}/files/0", [SCRIPT, IMG, MD_LINK]),
            ("viewer at the NCCL line", f"/analyses/{aid}/files/0?line=4#L4", [MD_LINK, SVG]),
        ],
        "history": [
            ("history", "/analyses", [JOB_ID]),
            ("history searched", "/analyses?q=bold", []),
        ],
        "rules": [("rule", f"/rules/{res['root_cause']['rule_id']}", [])],
    }
    for entries in by_page.values():
        pages.update({name: (path, shows) for name, path, shows in entries})
    return pages


@pytest.mark.parametrize("csp", ["as served", "bypassed"])
def test_markup_from_a_log_and_its_metadata_stays_text(
    web: Web, site: LiveServer, hostile: dict[str, Any], csp: str
) -> None:
    page, watch = web.page(site.url, bypass_csp=csp == "bypassed")
    for name, (path, shows) in pages_of(site, hostile).items():
        page.goto(path)
        expect(page.locator("main")).to_be_visible()
        try:
            assert_inert(page, shows=shows)
        except AssertionError as exc:
            raise AssertionError(f"{name} ({path}): {exc}") from None
    # the evidence line with the script tag is shown, highlighted, as text
    page.goto(f"/analyses/{hostile['id']}")
    expect(page.locator(".evidence").first).to_contain_text(SCRIPT)
    expect(page.locator(".evidence mark").first).to_contain_text("uncorrectable ECC error")
    assert watch.dialogs == []


def test_markup_uploaded_in_the_page_stays_text_in_the_in_place_report(web: Web, site: LiveServer) -> None:
    """The report swapped into the upload page (DOMParser + adoptNode) runs nothing either,
    even with the CSP bypassed."""
    page, _ = web.page(site.url, bypass_csp=True)
    page.goto("/")
    page.evaluate(
        """([name, text]) => {
          const dt = new DataTransfer();
          dt.items.add(new File([text], name, { type: "text/plain" }));
          document.getElementById("dropzone").dispatchEvent(
            new DragEvent("drop", { bubbles: true, cancelable: true, dataTransfer: dt }));
        }""",
        [FILE_NAME, HOSTILE_LOG],
    )
    expect(page.locator("#file-list")).to_contain_text(FILE_NAME)
    assert page.evaluate(INERT) == []
    page.get_by_text("Job details (optional)").click()
    page.fill("#job_id", JOB_ID)
    page.click("#upload-submit")
    expect_report(page, failure_class=ECC_CLASS, title="CUDA error: uncorrectable ECC error encountered")
    # give an injected image the time to fail and fire its handler: wait until every image settled
    page.wait_for_function("() => Array.from(document.images).every((i) => i.complete)")
    assert_inert(page, shows=[SCRIPT, JOB_ID, FILE_NAME])
