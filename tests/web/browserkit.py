"""Helpers for the real-browser tests: Debian's Chromium driven by Playwright (never a browser
download), a watch on every page (console errors, page errors, CSP violations, dialogs,
requests leaving the server's origin), axe-core runs, and screenshots as test artifacts.

The pages' CSP forbids inline script, so axe is evaluated through the DevTools protocol
(`page.evaluate`), which the policy does not govern; the product's CSP stays as strict as served.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.servicekit import ROOT

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test (in CI: fails it) and says why
    expect = None  # type: ignore[assignment]

CHROMIUM = Path(os.environ.get("LOGTRIAGE_CHROMIUM", "/usr/bin/chromium"))
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core-4.14.1" / "axe.min.js"
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
AXE_RESULTS = ARTIFACTS / "axe"
EXAMPLE = ROOT / "examples" / "ecc-cascade"

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
WIDTHS = {"laptop": LAPTOP, "phone": PHONE}
THEMES = ("light", "dark")
# generous for a loaded 2-core CI machine; nothing waits this long when all is well
TIMEOUT_MS = 30_000
ECC_CLASS = "hardware.gpu_ecc_error"
ECC_TITLE = "CUDA error: uncorrectable ECC error encountered"
TRACEBACK = """Traceback (most recent call last):
  File "train.py", line 12, in <module>
    main()
  File "train.py", line 8, in main
    loss.backward()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use. Of the allocated memory 76.12 GiB is allocated by PyTorch, and 1.42 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.
"""
OOM_CLASS = "cuda.out_of_memory"
# the same failure in a Ray worker of a verl job: its env patch also comes as a Ray runtime_env
RAY_TRACEBACK = "".join(f"(WorkerDict pid=81234, ip=10.0.3.17) {line}\n" for line in TRACEBACK.splitlines())


def browser_unavailable() -> str | None:
    """None when Chromium and Playwright are here, else why not."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (Debian package `chromium`; scripts/setup.sh installs it as root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"Playwright for Python is not installed ({exc}); `pip install -e '.[dev]'`"
    return None


@dataclass
class Watch:
    """Everything a browser context did that a page must never do, checked when the test ends."""

    origin: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        """A console error this test causes on purpose (e.g. the 403 of a refused upload)."""
        self.allowed.append(re.compile(pattern))

    def foreign_requests(self) -> list[str]:
        out = []
        for url in self.requests:
            parts = urlsplit(url)
            if parts.scheme in ("data", "blob", "about"):
                continue
            if f"{parts.scheme}://{parts.netloc}" != self.origin:
                out.append(url)
        return out

    def problems(self) -> list[str]:
        errors = [e for e in self.console_errors if not any(p.search(e) for p in self.allowed)]
        return (
            [f"console error: {e}" for e in errors]
            + [f"page error: {e}" for e in self.page_errors]
            + [f"dialog opened: {d}" for d in self.dialogs]
            + [f"request off the server's origin: {u}" for u in self.foreign_requests()]
        )


# Records CSP violations (Chromium also logs them to the console as errors) and proves the
# init script ran: it comes through the DevTools protocol, which the page's CSP does not govern.
WATCH_SCRIPT = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI);
  console.error("CSP violation: " + e.violatedDirective + " blocked " + e.blockedURI);
});
"""


class Web:
    """Browser contexts for one test, each watched; `check()` fails the test on any problem."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.contexts: list[tuple[Any, Watch]] = []

    def context(
        self,
        base_url: str,
        *,
        theme: str = "light",
        viewport: dict[str, int] | None = None,
        permissions: Sequence[str] = (),
        **kwargs: Any,
    ) -> tuple[Any, Watch]:
        ctx = self.browser.new_context(
            base_url=base_url,
            viewport=viewport or LAPTOP,
            color_scheme=theme,
            reduced_motion="reduce",
            **kwargs,
        )
        if permissions:
            ctx.grant_permissions(list(permissions), origin=base_url)
        ctx.set_default_timeout(TIMEOUT_MS)
        ctx.set_default_navigation_timeout(TIMEOUT_MS)
        watch = Watch(origin=base_url.rstrip("/"))
        ctx.add_init_script(WATCH_SCRIPT)
        ctx.on("console", lambda m: m.type == "error" and watch.console_errors.append(_console_text(m)))
        ctx.on("weberror", lambda e: watch.page_errors.append(str(e.error)))
        ctx.on("request", lambda r: watch.requests.append(r.url))
        ctx.on("page", lambda p: p.on("dialog", lambda d: _dismiss(watch, d)))
        self.contexts.append((ctx, watch))
        return ctx, watch

    def page(self, base_url: str, **kwargs: Any) -> tuple[Any, Watch]:
        ctx, watch = self.context(base_url, **kwargs)
        return ctx.new_page(), watch

    def close(self) -> None:
        for ctx, _ in self.contexts:
            # the browser may already be gone; the test's outcome stands
            with contextlib.suppress(Exception):
                ctx.close()

    def problems(self) -> list[str]:
        return [p for _, w in self.contexts for p in w.problems()]


def _console_text(message: Any) -> str:
    loc = message.location or {}
    where = f" ({loc.get('url')}:{loc.get('lineNumber')})" if loc.get("url") else ""
    return f"{message.text}{where}"


def _dismiss(watch: Watch, dialog: Any) -> None:
    watch.dialogs.append(f"{dialog.type}: {dialog.message}")
    dialog.dismiss()


# --- files and uploads -----------------------------------------------------------------------------


def drop_files(page: Any, selector: str, files: Iterable[tuple[str, str | bytes]]) -> None:
    """Drag-and-drop as a user does it: dragenter, dragover and drop on the element, carrying a
    DataTransfer built in the page from the files' names and contents (text, or bytes)."""
    payload = [
        [name, base64.b64encode(body).decode() if isinstance(body, bytes) else body, isinstance(body, bytes)]
        for name, body in files
    ]
    page.evaluate(
        """([selector, files]) => {
          const dt = new DataTransfer();
          for (const [name, body, b64] of files) {
            const data = b64 ? Uint8Array.from(atob(body), (c) => c.charCodeAt(0)) : body;
            dt.items.add(new File([data], name, { type: "text/plain" }));
          }
          const zone = document.querySelector(selector);
          for (const type of ["dragenter", "dragover", "drop"]) {
            zone.dispatchEvent(new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer: dt }));
          }
        }""",
        [selector, payload],
    )


def example_files() -> list[Path]:
    return sorted(EXAMPLE.glob("rank*.log"))


def expect_report(page: Any, *, failure_class: str, title: str) -> str:
    """Wait for the report of an upload to be shown; its analysis id."""
    expect(page).to_have_url(re.compile(r"/analyses/[0-9A-Za-z]+$"), timeout=90_000)
    expect(page.locator("body")).to_have_attribute("data-page", "report")
    expect(page.locator("main h1")).to_have_text(title)
    expect(page.locator(".root-card code").first).to_have_text(failure_class)
    return str(page.url.rsplit("/", 1)[1])


# --- accessibility (axe-core, vendored) -------------------------------------------------------------

_AXE_SOURCE: str | None = None


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations on the page as it is now (WCAG 2.x A/AA and best practices)."""
    global _AXE_SOURCE
    if _AXE_SOURCE is None:
        _AXE_SOURCE = AXE.read_text(encoding="utf-8")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(_AXE_SOURCE + "\n;undefined")
    result: list[dict[str, Any]] = page.evaluate(
        """async () => {
          const r = await axe.run(document, { resultTypes: ["violations"] });
          return r.violations.map((v) => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary })),
          }));
        }"""
    )
    return result


def check_axe(page: Any, name: str) -> list[dict[str, Any]]:
    """Run axe, write its result to test-artifacts/axe/NAME.json; the serious or critical ones."""
    violations = axe_violations(page)
    AXE_RESULTS.mkdir(parents=True, exist_ok=True)
    (AXE_RESULTS / f"{name}.json").write_text(json.dumps(violations, indent=2))
    return [v for v in violations if v["impact"] in ("serious", "critical")]


def describe(violations: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"- [{v['impact']}] {v['id']}: {v['help']} at {', '.join(n['target'] for n in v['nodes'][:5])}"
        for v in violations
    )


# --- screenshots ----------------------------------------------------------------------------------


def settle(page: Any) -> None:
    """Wait for running CSS transitions (a theme switch fades some backgrounds) to end."""
    page.evaluate(
        """() => Promise.all(document.getAnimations()
             .filter((a) => a instanceof CSSTransition).map((a) => a.finished.catch(() => null)))"""
    )


def looks(page: Any, *, themes: Sequence[str] = THEMES) -> Iterator[tuple[str, str]]:
    """Put the page in each theme at each width (laptop, phone), yielding (theme, width); then
    it is left at laptop width in the light theme."""
    try:
        for theme in themes:
            page.emulate_media(color_scheme=theme)
            for label, size in WIDTHS.items():
                page.set_viewport_size(size)
                settle(page)
                yield theme, label
    finally:
        page.emulate_media(color_scheme="light")
        page.set_viewport_size(LAPTOP)


def screenshot(page: Any, name: str) -> Path:
    """test-artifacts/screenshots/NAME.png, the whole page."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True, animations="disabled")
    return path


def axe_and_screenshots(page: Any, name: str, *, themes: Sequence[str] = THEMES) -> list[str]:
    """In each theme and width: a screenshot NAME-WIDTH-THEME.png and an axe run; what axe
    found serious or critical, described."""
    failures = []
    for theme, width in looks(page, themes=themes):
        label = f"{name}-{width}-{theme}"
        bad = check_axe(page, label)
        if bad:
            failures.append(f"{label}:\n{describe(bad)}")
        screenshot(page, label)
    return failures


# --- seeding analyses through the REST API (what a job's hook does) --------------------------------


def submit(
    base_url: str,
    files: Iterable[tuple[str, str | bytes]],
    *,
    headers: dict[str, str] | None = None,
    **params: Any,
) -> dict[str, Any]:
    """POST the logs as one multipart upload; the finished analysis resource."""
    import httpx

    parts = [
        ("log", (name, body if isinstance(body, bytes) else body.encode(), "text/plain"))
        for name, body in files
    ]
    with httpx.Client(base_url=base_url, timeout=120) as c:
        r = c.post("/api/v1/analyses", files=parts, params=params, headers=headers or {})
        assert r.status_code == 201, r.text
        body: dict[str, Any] = r.json()
    return body


def example_upload() -> list[tuple[str, str | bytes]]:
    return [(p.name, p.read_bytes()) for p in example_files()]
