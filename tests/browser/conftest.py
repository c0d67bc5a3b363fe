"""Browser fixtures: Debian's Chromium driven by Playwright's sync API against pytest-django's
live_server. Browser test modules call `skip_without_chromium()` first: they are skipped, with
the reason, when /usr/bin/chromium (or $AGENTOPS_CHROMIUM) is missing (`make browsers`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("AGENTOPS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def skip_without_chromium() -> None:
    """Called at the top of each browser test module (a conftest cannot skip a module)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: run `make browsers` (apt-get install chromium)",
                    allow_module_level=True)

# Playwright's sync API runs an event loop in this thread; Django's ORM calls from the same
# thread (fixtures creating rows) would otherwise be refused as "async unsafe".
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(chromium):
    """A fresh page that records dialogs, page errors and console errors."""
    # Playwright evaluates string predicates (wait_for_function) with eval, which the CSP forbids;
    # the policy itself is checked without this bypass in tests/browser/test_csp.py.
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
    yield page
    context.close()


def screenshot(page, name: str) -> None:
    """The whole page. (A full-page capture grows the window mid-shot; charts keep their height
    through it: tests/browser/test_resize.py.)"""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def scroll_through(page) -> None:
    """Scroll to the bottom and back, so that every chart drawn only when the reader comes near
    it (agentops.drawWhenNear: the devices page's) is drawn. After the page's scripts ran: a scroll
    before they listen is one no chart hears."""
    page.wait_for_load_state("load")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight); window.dispatchEvent(new Event('scroll'))")
    page.evaluate("window.scrollTo(0, 0)")
