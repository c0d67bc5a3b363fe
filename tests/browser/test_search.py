"""Task search in a real browser (issue #27 item 7): the Tool box suggests the project's tools and
takes a pattern, the list says how many tasks match, "a step ≥" is a work step and not the agent
span around them, and a percentile's drill-down writes whole milliseconds into the Duration box."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.analysis.factories import T0, make_step, make_task
from tests.browser.conftest import screenshot, skip_without_chromium
from tests.browser.test_dashboard import assert_nothing_ran, log_in
from tests.browser.test_dashboard import member as member  # the fixture

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WAIT_MS = 30_000


@pytest.fixture
def support_tasks(project):
    for i in range(12):
        task = make_task(project, f"t{i}", duration_ms=40_000.0 + i * 7.77, name="support",
                         start=T0 + timedelta(minutes=i))
        make_step(task, "root", kind="agent", duration_ms=task.duration_ms, name="support")
        tool = "refund_policy" if i % 3 == 0 else "lookup_order"
        make_step(task, "call", parent="root", kind="tool", tool_name=tool, name=tool, duration_ms=1200.0)
        make_step(task, "chat", parent="root", kind="llm", model="gpt-4o-mini", duration_ms=2500.0)


def test_the_tool_box_suggests_known_tools_and_takes_a_pattern(live_server, browser_page, member, support_tasks):
    page = browser_page
    log_in(page, live_server, "/tasks")
    assert page.inner_text("#result-count") == "12 tasks"
    page.fill("form.list-filters input[name=tool]", "refund")
    page.wait_for_function("document.querySelectorAll('#known-tool option').length === 1", timeout=WAIT_MS)
    assert page.eval_on_selector_all("#known-tool option", "os => os.map(o => o.value)") == ["refund_policy"]
    page.fill("form.list-filters input[name=tool]", "refund*")
    page.click("form.list-filters button[type=submit]")
    page.wait_for_url(re.compile(r"tool=refund"), timeout=WAIT_MS)
    assert page.inner_text("#result-count") == "4 tasks"
    assert len(page.locator("#task-table tbody tr").all()) == 4
    screenshot(page, "task-search-tool-pattern")
    assert_nothing_ran(page)


def test_a_step_at_least_30_s_is_a_work_step_not_the_agent_span(live_server, browser_page, member, support_tasks):
    page = browser_page
    log_in(page, live_server, "/tasks?min_step_ms=30000")
    assert page.inner_text("#result-count") == "0 tasks"  # every task is 40 s long, no call is
    page.goto(f"{live_server.url}/tasks?min_step_ms=2000")
    assert page.inner_text("#result-count") == "12 tasks"  # the chat calls
    page.select_option("form.list-filters select[name=step_kind]", "agent")
    page.fill("form.list-filters input[name=min_step_ms]", "30000")
    page.click("form.list-filters button[type=submit]")
    page.wait_for_url(re.compile(r"step_kind=agent"), timeout=WAIT_MS)
    assert page.inner_text("#result-count") == "12 tasks"
    assert_nothing_ran(page)


def test_a_percentile_drill_down_writes_whole_milliseconds(live_server, browser_page, member, support_tasks):
    page = browser_page
    log_in(page, live_server, "/?since=2026-11-01T00:00:00Z&until=2026-11-02T00:00:00Z")
    page.click("a.kpi[title*='p99']")
    page.wait_for_url(re.compile(r"/tasks\?"), timeout=WAIT_MS)
    value = page.input_value("form.list-filters input[name=min_duration_ms]")
    assert re.fullmatch(r"\d+", value), value
    assert page.inner_text("#result-count") == "1 task"  # the slowest of 12 is still at or above it
    assert_nothing_ran(page)
