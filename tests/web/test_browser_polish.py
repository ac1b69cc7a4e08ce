"""Issue 25 (part 2), phone and laptop polish, in Chromium at laptop (1366) and phone (390)
widths, light and dark: no page scrolls sideways, no chart text renders under 12 px, class
codes and ids never wrap, axe finds nothing serious or critical; the history's filters fold on a
phone (and show without script); and the fixed bugs as a person sees them, screenshotted into
test-artifacts/screenshots/polish-*.png."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.servicekit import LiveServer
from tests.web.browserkit import (
    LAPTOP,
    PHONE,
    SCREENSHOTS,
    TRACEBACK,
    Web,
    describe,
    example_upload,
    expect,
    looks,
    screenshot,
    submit,
)

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]

GPU = ROOT / "tests" / "corpus" / "gpu"


@pytest.fixture(scope="module")
def seeded(site: LiveServer) -> dict[str, str]:
    # no host from the hook: the report reads the hosts from the log's own lines
    ecc = submit(site.url, example_upload(), job_id="polish-job-070")
    # the same failure three times: the middle one's "before" is the first alone
    ooms = [submit(site.url, [("train.log", TRACEBACK)], job_id=f"polish-oom-{i}") for i in range(3)]
    hang = submit(site.url, [("console.log", (GPU / "silent-rank-death" / "console.log").read_bytes())])
    desync = submit(site.url, [("console.log", (GPU / "ckpt-gather-deadlock" / "console.log").read_bytes())])
    # two ranks whose every line carries the same second
    same = "".join(
        f"[default{r}]:2026-11-23 20:11:43,{ms:03d} INFO [rank{r}] trainer: step {step} loss 0.9\n"
        for step, ms in ((1, 100), (2, 400))
        for r in (0, 1)
    )
    same += "[default0]:2026-11-23 20:11:43,900 ERROR [rank0] trainer: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    one_time = submit(site.url, [("console.log", same)])
    # issue 23: a cluster of unknown failures (markup in its lines) and a rule drafted from it
    tail = "[rank0]: GizmoError: <b>gizmo</b> {n} jammed on /srv/very/long/path/to/slot-{n}/gizmo.sock at 0x{n:x}\n"
    gizmos = [
        submit(site.url, [("train.log", tail.format(n=n))], job_id=f"polish-gizmo-job-{n}") for n in (1, 2)
    ]
    import httpx

    with httpx.Client(base_url=site.url, timeout=60) as c:
        items = c.get("/api/v1/clusters").json()["items"]
        (cluster,) = [x for x in items if gizmos[0]["id"] in x["analysis_ids"]]
        draft = c.post("/api/v1/rules/drafts", json={"cluster_id": cluster["id"]})
        assert draft.status_code == 201, draft.text
    return {
        "one_time": one_time["id"],
        "ecc": ecc["id"],
        "oom0": ooms[0]["id"],
        "oom1": ooms[1]["id"],
        "oom2": ooms[2]["id"],
        "hang": hang["id"],
        "desync": desync["id"],
        "draft": draft.json()["id"],
    }


# name -> (path, text on the page once it is there, console errors it causes on purpose)
PAGES: dict[str, tuple[str, str, str | None]] = {
    "upload": ("/", "Triage a failed training job", None),
    "history": ("/analyses", "polish-job-070", None),
    "report-ecc": ("/analyses/{ecc}", "uncorrectable ECC error", None),
    "report-oom": ("/analyses/{oom1}", "Same failure before", None),
    "report-timeline": ("/analyses/{hang}", "Timeline: when and where it stopped", None),
    "report-desync": ("/analyses/{desync}", "Evidence", None),
    "rules": ("/rules", "cuda-uncorrectable-ecc", None),
    "rule": ("/rules/cuda-uncorrectable-ecc", "cuda-uncorrectable-ecc", None),
    "trends": ("/trends", "Failures per day", None),
    "login": ("/login", "Sign in", None),
    "docs": ("/docs", "", None),
    "error-404": ("/analyses/01HZZZZZZZZZZZZZZZZZZZZZZZ", "Not found", r"status of 404"),
    "unknowns": ("/unknowns", "GizmoError", None),
    "draft": ("/rules/drafts/{draft}", "Back-test", None),
    # another page's own work: here only for sideways scrolling
    "viewer": ("/analyses/{ecc}/files/0?line=129#L129", "", None),
    "by-time": ("/analyses/{hang}/by-time", "The files by time", None),
    "groups": ("/groups?status=all", "Failure groups", None),
    "by-time-columns": ("/analyses/{hang}/by-time?layout=columns", "The files by time", None),
}
OVERFLOW_ONLY = {"viewer"}

# Elements wider than the viewport are allowed only inside a box that scrolls or clips them
# (a log's <pre>, a table's scrolling wrapper, a visually hidden text).
OVERFLOW_JS = """() => {
  const vw = document.documentElement.clientWidth;
  const page = document.scrollingElement;
  const out = [];
  if (page.scrollWidth > page.clientWidth + 1) out.push(`the page: ${page.scrollWidth} > ${page.clientWidth}`);
  const clipped = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (/(auto|scroll|hidden|clip)/.test(s.overflowX)) return true;
    }
    return false;
  };
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (!r.width || r.right <= vw + 1) continue;  // off to the left scrolls nothing (the skip link)
    if (clipped(el)) continue;
    const name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
      (el.className && typeof el.className === "string" ? "." + el.className.trim().split(/\\s+/).join(".") : "");
    out.push(`${name}: ${Math.round(r.left)}..${Math.round(r.right)} of ${vw}`);
    if (out.length > 8) break;
  }
  return out;
}"""

# every chart's text as rendered: its font size times the scale its SVG draws at
CHART_TEXT_JS = """() => Array.from(document.querySelectorAll("main svg text"))
  .filter((t) => t.getClientRects().length && getComputedStyle(t).display !== "none")
  .map((t) => {
    const m = t.getScreenCTM();
    const scale = m ? Math.hypot(m.a, m.b) : 1;
    return { text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * scale };
  })"""

# class codes, job ids, hosts: one line each (a wrapped one has a taller box than its line)
TOKENS_JS = """() => Array.from(document.querySelectorAll(".tok"))
  .filter((e) => e.getClientRects().length)
  .map((e) => {
    const s = getComputedStyle(e);
    const line = parseFloat(s.lineHeight) || parseFloat(s.fontSize) * 1.5;
    return { text: e.textContent, lines: e.getClientRects().length, tall: e.getBoundingClientRect().height > line * 1.5,
             title: e.getAttribute("title") };
  })"""


def axe_serious(page: Any, exclude: list[str]) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations, leaving out the parts `exclude` names (the
    vendored Swagger UI on /docs fails axe by its own markup: test_browser_pages says which)."""
    from tests.web.browserkit import AXE

    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;undefined")
    found: list[dict[str, Any]] = page.evaluate(
        """async (exclude) => {
          const ctx = exclude.length ? { include: [document], exclude: exclude.map((s) => [s]) } : document;
          const r = await axe.run(ctx, { resultTypes: ["violations"] });
          return r.violations.map((v) => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary })),
          }));
        }""",
        exclude,
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]


def open_page(web: Web, site: LiveServer, seeded: dict[str, str], name: str, **kwargs: Any) -> Any:
    path, text, allowed = PAGES[name]
    page, watch = web.page(site.url, **kwargs)
    if allowed:
        watch.allow(allowed)
    page.goto(path.format(**seeded))
    if name == "docs":
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("logtriage")
    elif name != "viewer":
        expect(page.locator("main h1").first).to_be_attached()
    if text:
        expect(page.locator("main")).to_contain_text(text)
    return page


@pytest.mark.parametrize("name", list(PAGES))
def test_page_fits_every_width_and_theme(
    web: Web, site: LiveServer, seeded: dict[str, str], name: str
) -> None:
    page = open_page(web, site, seeded, name)
    # what is folded shows too: its tables and charts must fit as well
    page.evaluate("() => document.querySelectorAll('main details').forEach((d) => { d.open = true; })")
    problems: list[str] = []
    for theme, width in looks(page):
        label = f"{name}-{width}-{theme}"
        wide = page.evaluate(OVERFLOW_JS)
        if wide:
            problems.append(f"{label} scrolls sideways: " + "; ".join(wide))
        if name in OVERFLOW_ONLY:
            continue
        small = [t for t in page.evaluate(CHART_TEXT_JS) if t["px"] < 12]
        if small:
            problems.append(f"{label}: chart text under 12 px: {small[:5]}")
        for tok in page.evaluate(TOKENS_JS):
            if tok["lines"] != 1 or tok["tall"]:
                problems.append(f"{label}: {tok['text']!r} wraps")
            if tok["title"] != tok["text"].strip() and not tok["title"].startswith(
                tok["text"].split(" +")[0]
            ):
                problems.append(f"{label}: {tok['text']!r} has no title with its whole text")
        bad = axe_serious(page, ["#swagger-ui"] if name == "docs" else [])
        if bad:
            problems.append(f"{label}: axe:\n{describe(bad)}")
        screenshot(page, f"polish-{label}")
    assert not problems, "\n".join(problems)


def test_charts_have_text_and_it_fits(web: Web, site: LiveServer, seeded: dict[str, str]) -> None:
    """The trends and timeline charts draw their labels (the check above passes on no text at
    all), the day labels inside the plot at both ends."""
    for name in ("trends", "report-timeline"):
        page = open_page(web, site, seeded, name)
        for theme, width in looks(page):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            chart = page.locator("main .chart").first
            chart.screenshot(path=str(SCREENSHOTS / f"polish-{name}-chart-{width}-{theme}.png"))
            texts = page.evaluate(CHART_TEXT_JS)
            assert len(texts) >= 5, (name, texts)
            inside = page.evaluate(
                """() => Array.from(document.querySelectorAll("main .chart")).flatMap((c) => {
                  const box = c.getBoundingClientRect();
                  return Array.from(c.querySelectorAll("text")).filter((t) => t.getClientRects().length)
                    .map((t) => t.getBoundingClientRect())
                    .filter((r) => r.left < box.left - 1 || r.right > box.right + 1 ||
                                   r.top < box.top - 1 || r.bottom > box.bottom + 1)
                    .map((r) => [r.left, r.right, r.top, r.bottom, box.left, box.right, box.top, box.bottom]);
                })"""
            )
            assert not inside, f"{name}: chart labels outside their chart: {inside}"
            overlaps = page.evaluate(
                """() => Array.from(document.querySelectorAll("main .chart")).flatMap((c) => {
                  const rs = Array.from(c.querySelectorAll("text")).filter((t) => t.getClientRects().length)
                    .map((t) => [t.textContent, t.getBoundingClientRect()]);
                  const out = [];
                  rs.forEach(([a, p], i) => rs.slice(i + 1).forEach(([b, q]) => {
                    if (p.left < q.right - 1 && q.left < p.right - 1 && p.top < q.bottom - 1 && q.top < p.bottom - 1)
                      out.push([a, b]);
                  }));
                  return out;
                })"""
            )
            assert not overlaps, f"{name} {width}: chart labels overlap: {overlaps}"


def test_history_filters_fold_on_a_phone_and_show_without_script(
    web: Web, site: LiveServer, seeded: dict[str, str]
) -> None:
    phone, _ = web.page(site.url, viewport=PHONE)
    phone.goto("/analyses")
    more = phone.locator("#filter-more")
    expect(more).not_to_have_attribute("open", "")
    expect(phone.locator("#f-class")).to_be_hidden()
    expect(phone.locator("#f-q")).to_be_visible()
    first = phone.locator("table.data tbody tr").first
    expect(first).to_be_visible()
    top = first.bounding_box()
    assert top is not None and top["y"] < PHONE["height"], f"the first result starts at {top['y']:.0f} px"
    screenshot(phone, "polish-history-filters-folded-phone-light")
    more.locator("summary").click()
    expect(phone.locator("#f-class")).to_be_visible()
    # the cards: each cell named by its column, the host the report found shown
    ecc = phone.locator("table.data tbody tr", has_text="polish-job-070")
    expect(ecc.locator('td[data-label="Host"]')).to_contain_text("10.12.0.")
    # the search's placeholder is whole on a phone and on a laptop
    for page in (phone, web.page(site.url, viewport=LAPTOP)[0]):
        if page is not phone:
            page.goto("/analyses")
            expect(page.locator("#filter-more")).to_have_attribute("open", "")
            # the filters' labels in one row sit on one line: tops equal, or a row apart
            tops = sorted(
                page.evaluate(
                    """() => Array.from(document.querySelectorAll(".filter-fields .field > label[for]"))
                      .map((l) => l.getBoundingClientRect().top)"""
                )
            )
            assert len(tops) >= 8
            near = [(a, b) for a, b in itertools.pairwise(tops) if 0.5 < b - a < 30]
            assert not near, f"filter labels misaligned: {tops}"
        fits = page.evaluate(
            """() => { const q = document.getElementById("f-q"); const s = getComputedStyle(q);
              const c = document.createElement("canvas").getContext("2d"); c.font = s.font;
              const room = q.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
              return [c.measureText(q.placeholder).width, room]; }"""
        )
        assert fits[0] <= fits[1], f"the search placeholder is cut: {fits}"
    # without script every field shows, on a phone too
    bare, _ = web.page(site.url, viewport=PHONE, java_script_enabled=False)
    bare.goto("/analyses")
    expect(bare.locator("#f-class")).to_be_visible()


def test_history_shows_job_and_host_whole(web: Web, site: LiveServer, seeded: dict[str, str]) -> None:
    for size, suffix in ((LAPTOP, "laptop"), (PHONE, "phone")):
        page, _ = web.page(site.url, viewport=size)
        page.goto("/analyses?job=polish-job-070")
        row = page.locator("table.data tbody tr").first
        job = row.locator('td[data-label="Job"] .tok')
        expect(job).to_have_text("polish-job-070")
        host = row.locator('td[data-label="Host"] .tok')
        expect(host).to_have_text(re.compile(r"^10\.12\.0\.\d+"))
        screenshot(page, f"polish-history-host-{suffix}-light")


def test_report_lists_only_earlier_analyses_as_before(
    web: Web, site: LiveServer, seeded: dict[str, str]
) -> None:
    page, _ = web.page(site.url, viewport=PHONE)
    page.goto(f"/analyses/{seeded['oom1']}")
    card = page.locator("aside .card", has=page.get_by_role("heading", name="Same failure before"))
    expect(card.locator(f'a[href="/analyses/{seeded["oom0"]}"]')).to_have_count(1)
    expect(card.locator(f'a[href="/analyses/{seeded["oom2"]}"]')).to_have_count(0)
    card.scroll_into_view_if_needed()
    screenshot(page, "polish-report-same-before-phone-light")


def test_the_timeline_quotes_words_and_evidence_its_own_line(
    web: Web, site: LiveServer, seeded: dict[str, str]
) -> None:
    page, _ = web.page(site.url)
    page.goto(f"/analyses/{seeded['hang']}#timeline")
    cells = page.locator("#timeline table.data tbody td.mono.small")
    expect(cells.first).to_be_visible()
    for text in cells.all_text_contents():
        assert re.search(r"[A-Za-z0-9]", text), f"a rank's last line has no words: {text!r}"
    screenshot(page, "polish-report-timeline-laptop-light")
    # each evidence label opens the line whose text it shows
    page.goto(f"/analyses/{seeded['desync']}")
    links = page.locator(".evidence td.where a")
    expect(links.first).to_be_visible()
    screenshot(page, "polish-report-evidence-laptop-light")
    pairs = page.evaluate(
        """() => Array.from(document.querySelectorAll(".evidence tr")).map((tr) =>
             [tr.querySelector("td.where a")?.getAttribute("href"), tr.cells[1].textContent])"""
    )
    assert pairs
    for href, text in pairs[:4]:
        viewer, _ = web.page(site.url)
        viewer.goto(href)
        line = int(href.rsplit("#L", 1)[1])
        row = viewer.locator(f'[id="L{line}"]')
        expect(row).to_contain_text(text.strip()[:60])
        viewer.close()


def test_feedback_sent_is_shown_after_sending(web: Web, site: LiveServer, seeded: dict[str, str]) -> None:
    for scripted in (True, False):
        page, _ = web.page(site.url, viewport=PHONE, java_script_enabled=scripted)
        page.goto(f"/analyses/{seeded['oom2']}")
        form = page.locator("#feedback form")
        form.get_by_role("radio", name="correct").check()
        form.get_by_label("Comment (optional)").fill("right on")
        form.get_by_role("button", name="Send feedback").click()
        expect(page).to_have_url(re.compile(r"\?feedback=thanks#feedback$"))
        sent = page.locator("#feedback-sent")
        expect(sent).to_contain_text("the root cause is correct")
        expect(sent).to_contain_text("right on")
        expect(page.locator("#feedback form")).to_be_hidden()
        page.locator("#feedback").scroll_into_view_if_needed()
        screenshot(page, f"polish-feedback-sent-phone-{'js' if scripted else 'nojs'}")


def test_docs_have_the_site_header(web: Web, site: LiveServer, seeded: dict[str, str]) -> None:
    for size, suffix in ((LAPTOP, "laptop"), (PHONE, "phone")):
        page = open_page(web, site, seeded, "docs", viewport=size)
        expect(page.locator("header.site-header .brand")).to_be_visible()
        api = page.locator("header.site-header").get_by_role("link", name="API", exact=True)
        expect(api).to_have_attribute("aria-current", "page")
        screenshot(page, f"polish-docs-header-{suffix}-light")


@pytest.mark.parametrize("name", ["history", "rules"])
def test_tables_are_cards_on_a_phone(web: Web, site: LiveServer, seeded: dict[str, str], name: str) -> None:
    for size, suffix in ((PHONE, "phone"), (LAPTOP, "laptop")):
        page = open_page(web, site, seeded, name, viewport=size)
        table = page.locator("main table.data.cards")
        expect(table).to_be_visible()
        head = page.evaluate(
            """() => { const th = document.querySelector("main table.cards thead");
              const td = document.querySelector("main table.cards tbody td[data-label]");
              return [th.getBoundingClientRect().height, getComputedStyle(td, "::before").content,
                      getComputedStyle(td).display]; }"""
        )
        if size is PHONE:
            assert head[0] <= 1 and head[2] == "block" and head[1].strip('"') != "none", head
        else:
            assert head[0] > 10 and head[2] == "table-cell", head
        rows = page.locator("main table.cards tbody tr")
        box = rows.nth(min(2, rows.count() - 1)).bounding_box()
        first = rows.first.bounding_box()
        assert box is not None and first is not None
        page.screenshot(
            path=str(SCREENSHOTS / f"polish-{name}-cards-{suffix}-light.png"),
            clip={
                "x": 0,
                "y": max(0, first["y"] - 60),
                "width": size["width"],
                "height": box["y"] + box["height"] - first["y"] + 70,
            },
            full_page=True,
        )


def test_lanes_of_one_second_show_a_window(web: Web, site: LiveServer, seeded: dict[str, str]) -> None:
    for size, suffix in ((PHONE, "phone"), (LAPTOP, "laptop")):
        page, _ = web.page(site.url, viewport=size)
        page.goto(f"/analyses/{seeded['one_time']}#timeline")
        chart = page.locator("#timeline .chart.lanes")
        expect(chart).to_contain_text("all at 20:11:43")
        expect(chart).not_to_contain_text(re.compile(r"^0 s$|\b0 s\b"))
        ends = chart.locator("text").all_text_contents()
        assert "20:11:13" in ends and "20:12:13" in ends, ends
        chart.screenshot(path=str(SCREENSHOTS / f"polish-report-lanes-one-time-{suffix}-light.png"))


def test_report_root_card_on_a_phone(web: Web, site: LiveServer, seeded: dict[str, str]) -> None:
    for theme in ("light", "dark"):
        page, _ = web.page(site.url, viewport=PHONE, theme=theme)
        page.goto(f"/analyses/{seeded['ecc']}")
        code = page.locator(".root-card code.tok")
        expect(code).to_have_text("hardware.gpu_ecc_error")
        expect(code).to_have_attribute("title", "hardware.gpu_ecc_error")
        box = code.bounding_box()
        card = page.locator(".root-card").bounding_box()
        assert box is not None and card is not None
        assert box["height"] < 30 and box["x"] + box["width"] <= card["x"] + card["width"], (box, card)
        page.screenshot(path=str(SCREENSHOTS / f"polish-report-root-card-phone-{theme}.png"))
