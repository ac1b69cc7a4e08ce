"""Fixtures of the real-browser tests: one Chromium per test process, watched browser contexts,
and an open-mode live server on SQLite per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import lanes
from tests.servicekit import LiveServer, in_ci, live_server, make_settings
from tests.web.browserkit import CHROMIUM, TIMEOUT_MS, Web, browser_unavailable


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's Chromium (headless) under Playwright. Skipped only when it is missing outside CI;
    with CI=true a missing browser fails the tests."""
    lanes.require_slow("Chromium")
    why = browser_unavailable()
    if why is not None:
        if in_ci():
            pytest.fail(f"the browser tests are required in CI: {why}")
        pytest.skip(f"browser tests: {why}")
    from playwright.sync_api import expect, sync_playwright

    # assertions wait as long as actions may: a loaded 2-core CI machine is slow, never stuck
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def web(browser: Any) -> Iterator[Web]:
    """Browser contexts for this test. Every page any of them opened must have logged no console
    error (CSP violations included), thrown nothing, opened no dialog and requested nothing from
    another origin: checked when the test ends."""
    lanes.require_slow("Chromium")  # the browser is shared: the test that launched it may be another
    w = Web(browser)
    try:
        yield w
    finally:
        w.close()
    problems = w.problems()
    if problems:
        pytest.fail("the pages misbehaved:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The service in open mode (no tokens) on SQLite, for one test module."""
    data: Path = tmp_path_factory.mktemp("web-site")
    with live_server(make_settings(data, f"sqlite:///{data / 'logtriage.db'}")) as srv:
        yield srv
