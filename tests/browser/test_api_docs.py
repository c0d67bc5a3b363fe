"""/api/docs (issue #27 item 8): a browsable explorer of /api/schema/ from vendored static files,
under the real Content-Security-Policy, for a signed-in user; a 404 before."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import skip_without_chromium
from tests.browser.test_csp import RECORD_VIOLATIONS
from tests.browser.test_csp import strict_page as strict_page  # the fixture
from tests.browser.test_dashboard import log_in
from tests.browser.test_dashboard import member as member  # the fixture

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_explorer_lists_the_operations_offline_under_the_policy(live_server, strict_page, member):
    page = strict_page
    outside = []
    page.on("request", lambda r: r.url.startswith(live_server.url) or outside.append(r.url))
    page.add_init_script(RECORD_VIOLATIONS)
    log_in(page, live_server, "/api/docs")
    page.wait_for_selector("body[data-docs-ready='1']", timeout=30_000)
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    paths = page.eval_on_selector_all(".opblock-summary-path", "els => els.map(e => e.textContent)")
    assert "/api/v1/tasks" in paths and "/api/v1/search/values" in paths, paths
    assert page.evaluate("window.__csp") == [] and page.errors == [], (page.evaluate("window.__csp"), page.errors)
    assert outside == []  # nothing from a CDN


def test_the_api_explorer_needs_a_login(live_server, strict_page):
    strict_page.goto(f"{live_server.url}/api/docs")
    assert re.search(r"/login/\?next=/api/docs", strict_page.url)
