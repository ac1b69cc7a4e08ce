"""A big upload in Chromium: the progress bar moves, the page says it is scanning, and an analysis
the service answers with 202 is polled until done, then shown in place."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servicekit import ECC, LiveServer, live_server, make_settings
from tests.web.browserkit import ECC_CLASS, ECC_TITLE, Web, expect, expect_report

# slow: Chromium (Playwright) against a live server
pytestmark = [pytest.mark.browser, pytest.mark.slow]

BIG_MB = 48
# Chromium's network emulation throttles the upload, so that progress events come at a pace any
# machine shows (48 MB at 24 MB/s: about two seconds of progress)
UPLOAD_BYTES_PER_S = 24 << 20


@pytest.fixture(scope="module")
def slow_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A service that never waits for a result (sync_wait 0): every upload is answered 202."""
    data = tmp_path_factory.mktemp("web-big")
    settings = make_settings(data, f"sqlite:///{data / 'logtriage.db'}", sync_wait=0.0)
    with live_server(settings) as srv:
        yield srv


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 48 MB training log whose ECC fault comes near the end."""
    path = tmp_path_factory.mktemp("big-log") / "rank0.log"
    line = b"(WorkerDict pid=90412, ip=10.12.0.33) step 12345 loss 0.4821 lr 1e-5 throughput 4096 tokens/s\n"
    block = line * 10_000
    with path.open("wb") as fh:
        while fh.tell() < BIG_MB << 20:
            fh.write(block)
        fh.write(ECC.format(ip="10.12.0.33").encode())
        fh.write(line * 100)
    return path


RECORD = """() => {
  window.__bar = [];
  window.__status = [];
  const bar = document.getElementById("upload-bar");
  const status = document.getElementById("upload-status");
  new MutationObserver(() => window.__bar.push(Number(bar.value)))
    .observe(bar, { attributes: true, attributeFilter: ["value"] });
  new MutationObserver(() => window.__status.push(status.textContent))
    .observe(status, { childList: true, characterData: true, subtree: true });
  window.__sameDocument = "yes";
}"""


def test_progress_moves_then_scanning_then_the_202_is_polled_to_the_report(
    web: Web, slow_site: LiveServer, big_log: Path
) -> None:
    ctx, _ = web.context(slow_site.url)
    page = ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": UPLOAD_BYTES_PER_S},
    )
    page.goto("/")
    page.evaluate(RECORD)
    page.set_input_files("#log-files", str(big_log))
    expect(page.locator("#file-list")).to_contain_text("48.")  # "48.0 MB"
    with page.expect_response(
        lambda r: r.url.endswith("/api/v1/analyses") and r.request.method == "POST"
    ) as r:
        page.click("#upload-submit")
        expect(page.locator("#upload-progress")).to_be_visible()
    assert r.value.status == 202, "the service was set to answer every upload with 202"
    expect_report(page, failure_class=ECC_CLASS, title=ECC_TITLE)
    assert page.evaluate("() => window.__sameDocument") == "yes", "the report came with a reload"

    bar: list[float] = page.evaluate("() => window.__bar")
    status: list[str] = page.evaluate("() => window.__status")
    moving = [v for v in bar if 0 < v < 100]
    assert len(set(moving)) >= 3, f"the progress bar hardly moved: {bar}"
    assert moving == sorted(moving), f"the progress bar went backwards: {bar}"
    assert bar[-1] == 100
    assert any(s.startswith("Uploading… ") and "%" in s for s in status), status
    assert any(s.startswith("Scanning") for s in status), f"no scanning state was shown: {status}"
    # the 202 answer was polled: the page said so while the service scanned
    assert any("Scanning a large upload" in s for s in status), status
