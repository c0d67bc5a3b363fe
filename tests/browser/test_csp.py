"""Every page under the Content-Security-Policy in a real browser: charts still draw, the
browser reports no CSP violation, and hostile trace content (task names, tool arguments,
prompts, release names, alert names) runs nothing — pages not covered by
tests/browser/test_dashboard.py (releases, compare, alerts) included."""

from __future__ import annotations

from datetime import timedelta

import pytest

from analysis.alerts.models import AlertRule
from tests.analysis.factories import T0, analyse, make_finding, make_step, make_task
from tests.browser.conftest import screenshot, skip_without_chromium
from tests.browser.test_dashboard import XSS_ARG, XSS_NAME, log_in, member  # noqa: F401

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS_RELEASE = "<img src=x onerror=window.pwned=3>"
WAIT_MS = 30_000

# Record CSP violations in the page itself: Chromium also logs them to the console, but the
# event carries the directive that was broken, which makes a failure readable.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener('securitypolicyviolation',
    e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile + ':' + e.lineNumber));
"""


@pytest.fixture
def strict_page(chromium):
    """A page under the real policy (browser_page bypasses it so Playwright can eval)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
    yield page
    context.close()


@pytest.fixture
def hostile_project(project):
    for i in range(6):
        release = XSS_RELEASE if i % 2 else "v1"
        task = make_task(project, f"t{i}", duration_ms=400.0 * (i + 1), release=release, name=XSS_NAME,
                         start=T0 + timedelta(hours=i))
        make_step(task, "root", kind="agent", duration_ms=400.0 * (i + 1), name=XSS_NAME)
        make_step(task, "gen", parent="root", kind="llm", duration_ms=300.0, ttft_ms=80.0, output_tokens=30,
                  attributes={"prompt": XSS_NAME}, model=XSS_ARG)
        make_step(task, "call", parent="root", kind="tool", offset_ms=300.0, duration_ms=90.0,
                  tool_name=XSS_NAME, tool_args={"q": XSS_ARG})
        make_finding(task, "repeated_tool_call", wasted_ms=50.0, step_ids=["call"], summary=XSS_ARG)
        analyse(task, critical_path=["root", "gen"], kinds=["repeated_tool_call"], wasted_ms=50.0,
                budget={"prefill": 80.0, "decode": 220.0, "tool": 90.0, "framework": 10.0})
    rule = AlertRule.objects.create(project=project, name=XSS_NAME, metric="task_duration_p95",
                                    threshold=100.0, min_samples=1)
    return project, rule


def test_every_page_draws_under_the_policy_and_runs_no_injected_script(live_server, strict_page, member,  # noqa: F811
                                                                       hostile_project):
    from urllib.parse import quote

    _, rule = hostile_project
    page = strict_page
    page.add_init_script(RECORD_VIOLATIONS)
    log_in(page, live_server)
    pages = [
        ("/", "#chart-percentiles .main-svg"),
        ("/tasks", "#task-table"),
        ("/tasks/t1", "#chart-waterfall .main-svg"),
        ("/latency?group_by=kind", "#chart-group_ecdf .main-svg"),
        ("/devices", "main"),
        ("/releases", "main"),
        (f"/releases/compare?a=v1&b={quote(XSS_RELEASE)}", "#chart-ecdf .main-svg"),
        ("/alerts/", "main"),
        (f"/alerts/{rule.pk}/", "#alert-chart .main-svg"),
        ("/alerts/new", "form"),
    ]
    for path, ready in pages:
        response = page.goto(live_server.url + path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_selector(ready, timeout=WAIT_MS)
        page.wait_for_load_state("networkidle")
        if path.startswith("/tasks/"):
            # The waterfall hover shows step names and tool arguments.
            page.hover("#chart-waterfall .bars path >> nth=1", force=True, timeout=WAIT_MS)
            page.wait_for_selector("#chart-waterfall .hoverlayer .hovertext", timeout=WAIT_MS)
            page.wait_for_timeout(300)
        assert page.evaluate("window.__csp") == [], path
        assert page.evaluate("window.pwned") is None, path
        screenshot(page, "csp-" + path.strip("/").split("?")[0].replace("/", "-") or "csp-overview")
    assert page.dialogs == []
    assert page.errors == [], page.errors
