"""The upload page in Chromium: drag-and-drop, the file and folder pickers, a pasted traceback; the
report replaces the page in place (no reload); copy buttons put the exact text on the clipboard."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.servicekit import LiveServer, live_server, make_settings
from tests.web.browserkit import (
    ECC_CLASS,
    ECC_TITLE,
    EXAMPLE,
    OOM_CLASS,
    RAY_TRACEBACK,
    TRACEBACK,
    Web,
    drop_files,
    example_files,
    expect,
    expect_report,
)

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def open_upload(web: Web, site: LiveServer, **kwargs: Any) -> Any:
    page, _ = web.page(site.url, **kwargs)
    page.goto("/")
    expect(page.locator("body")).to_have_attribute("data-page", "upload")
    # a marker of this document: it survives only if the report comes without a reload
    page.evaluate("() => { window.__sameDocument = 'yes'; }")
    return page


def same_document(page: Any) -> bool:
    return bool(page.evaluate("() => window.__sameDocument === 'yes'"))


def test_drop_several_rank_logs_shows_the_report_in_place(web: Web, site: LiveServer) -> None:
    page = open_upload(web, site)
    drop_files(page, "#dropzone", [(p.name, p.read_text()) for p in example_files()])
    items = page.locator("#file-list li")
    expect(items).to_have_count(4)
    expect(items.first).to_contain_text("rank0.log")
    page.click("#upload-submit")
    aid = expect_report(page, failure_class=ECC_CLASS, title=ECC_TITLE)
    assert same_document(page), "the report page was loaded anew, not swapped in place"
    assert page.url.endswith(f"/analyses/{aid}")
    # the ECC fault's evidence names the rank that saw it; the NCCL timeouts are its symptoms
    expect(page.locator(".evidence").first).to_contain_text("rank2.log")
    expect(page.locator("details", has_text="symptom")).to_contain_text("NCCL")
    # back and forward keep working (the upload page comes back)
    page.go_back()
    expect(page.locator("body")).to_have_attribute("data-page", "upload")


def test_file_picker_uploads_several_logs(web: Web, site: LiveServer) -> None:
    page = open_upload(web, site)
    page.set_input_files("#log-files", [str(p) for p in example_files()])
    expect(page.locator("#file-list li")).to_have_count(4)
    # one removed and added again is not listed twice
    page.get_by_role("button", name="Remove rank3.log").click()
    expect(page.locator("#file-list li")).to_have_count(3)
    page.set_input_files("#log-files", [str(p) for p in example_files()])
    expect(page.locator("#file-list li")).to_have_count(4)
    page.get_by_text("Job details (optional)").click()
    page.fill("#job_id", "picker-job-1")
    page.click("#upload-submit")
    expect_report(page, failure_class=ECC_CLASS, title=ECC_TITLE)
    assert same_document(page)
    expect(page.locator("main")).to_contain_text("picker-job-1")


def test_folder_picker_uploads_the_folder(web: Web, site: LiveServer) -> None:
    page = open_upload(web, site)
    page.set_input_files("#log-folder", str(EXAMPLE))
    items = page.locator("#file-list li")
    # the folder's logs and its README, each named with the folder
    expect(items).to_have_count(len(list(EXAMPLE.iterdir())))
    expect(page.locator("#file-list")).to_contain_text("ecc-cascade/rank2.log")
    page.click("#upload-submit")
    expect_report(page, failure_class=ECC_CLASS, title=ECC_TITLE)
    assert same_document(page)


def test_pasted_traceback_gives_its_root_cause_and_patch(web: Web, site: LiveServer) -> None:
    page = open_upload(web, site)
    page.fill("#paste", TRACEBACK)
    page.click("#upload-submit")
    expect_report(page, failure_class=OOM_CLASS, title="CUDA out of memory")
    assert same_document(page)
    patch = page.locator('[role="tabpanel"]:not([hidden]) pre code').first
    expect(patch).to_contain_text("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def test_nothing_chosen_is_an_inline_error(web: Web, site: LiveServer) -> None:
    page = open_upload(web, site)
    page.click("#upload-submit")
    expect(page.locator("#upload-error")).to_be_visible()
    expect(page.locator("#upload-error")).to_contain_text("Nothing to analyse")
    assert page.url.rstrip("/") == site.url


def test_copy_a_patch_and_the_report_as_markdown(web: Web, site: LiveServer) -> None:
    page = open_upload(web, site, permissions=["clipboard-read", "clipboard-write"])
    page.fill("#paste", TRACEBACK)
    page.click("#upload-submit")
    expect_report(page, failure_class=OOM_CLASS, title="CUDA out of memory")
    panel = page.locator('[role="tabpanel"]:not([hidden])').first
    code = panel.locator("pre code").first
    button = panel.get_by_role("button", name="Copy this patch").first
    button.click()
    expect(button).to_have_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == code.text_content()
    # the report as Markdown: exactly the report.md the API serves
    md_button = page.locator('button[data-copy-from="report-md"]')
    expect(md_button).to_have_text("Copy report as Markdown")
    md_button.click()
    expect(md_button).to_have_text("Copied")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    served = page.request.get(page.url.replace("/analyses/", "/api/v1/analyses/") + "/report.md").text()
    assert copied.strip() == served.strip()
    assert "CUDA out of memory" in copied and "PYTORCH_CUDA_ALLOC_CONF" in copied


def test_patch_tabs_switch_with_arrow_keys(web: Web, site: LiveServer) -> None:
    page = open_upload(web, site)
    page.fill("#paste", RAY_TRACEBACK)
    page.click("#upload-submit")
    expect_report(page, failure_class=OOM_CLASS, title="CUDA out of memory")
    tabs = page.locator('[role="tablist"]').first.get_by_role("tab")
    assert tabs.count() >= 2, "the OOM patch has an env tab and a Ray runtime_env tab"
    first, second = tabs.nth(0), tabs.nth(1)
    first.focus()
    page.keyboard.press("ArrowRight")
    expect(second).to_be_focused()
    expect(second).to_have_attribute("aria-selected", "true")
    expect(first).to_have_attribute("aria-selected", "false")
    expect(page.locator("#" + str(second.get_attribute("aria-controls")))).to_be_visible()
    expect(page.locator("#" + str(first.get_attribute("aria-controls")))).to_be_hidden()
    page.keyboard.press("ArrowLeft")
    expect(first).to_be_focused()
    page.keyboard.press("End")
    expect(tabs.nth(tabs.count() - 1)).to_be_focused()
    page.keyboard.press("Home")
    expect(first).to_have_attribute("aria-selected", "true")


def test_empty_and_binary_files_are_refused_inline(web: Web, site: LiveServer) -> None:
    page, watch = web.page(site.url)
    watch.allow(r"status of 415")  # the service's answer to the binary file, shown on the page
    page.goto("/")
    error = page.locator("#upload-error")
    drop_files(page, "#dropzone", [("empty.log", "")])
    page.click("#upload-submit")
    expect(error).to_contain_text("Empty file")
    expect(error).to_be_focused()
    page.get_by_role("button", name="Remove empty.log").click()
    # every byte value: an eighth of them control bytes, as in a binary or compressed file
    drop_files(page, "#dropzone", [("trainer.bin", bytes(range(256)) * 64)])
    expect(error).to_be_hidden()
    page.click("#upload-submit")
    # the service's own problem (415), shown in place
    expect(error).to_contain_text(re.compile(r"binary", re.I))
    expect(page.locator("#upload-submit")).to_be_enabled()  # fix it and try again
    expect(page.locator("#upload-progress")).to_be_hidden()
    assert page.url.rstrip("/") == site.url


def test_an_upload_over_the_limit_is_refused_before_it_is_sent(
    web: Web, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = tmp_path_factory.mktemp("web-small")
    settings = make_settings(data, f"sqlite:///{data / 'logtriage.db'}", max_upload_bytes=64 << 10)
    with live_server(settings) as small:
        page, watch = web.page(small.url)
        page.goto("/")
        drop_files(page, "#dropzone", [("rank0.log", "step 1 loss 0.5\n" * 8192)])
        page.click("#upload-submit")
        expect(page.locator("#upload-error")).to_contain_text("over this service's limit of 64.0 KB")
        assert not [u for u in watch.requests if u.endswith("/api/v1/analyses")], "it was sent anyway"
