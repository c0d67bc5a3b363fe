"""The overview names the culprit (issue #27, item 4): the slowest agents with their p95 change
against the period before, the tools, models and devices holding the most critical-path time, and
the biggest regressions, each a link to its filtered task list."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs, quote, urlparse

import pytest
from django.contrib.auth import get_user_model

from analysis import rollups
from tests.analysis.factories import T0, analyse, make_step, make_task
from tests.browser.conftest import screenshot, skip_without_chromium

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000
SINCE, UNTIL = T0 + timedelta(hours=2), T0 + timedelta(hours=4)  # the range; the 2 hours before it compare


@pytest.fixture
def member(project):
    user = get_user_model().objects.create_user("ana", password="secret-pw")
    project.members.add(user)
    return user


@pytest.fixture
def traffic(project):
    """support-agent: slow (3 s) and steady. checkout-agent: 1 s before the range, 1.6 s in it,
    because its search_inventory calls went from 200 to 800 ms. Every step is on the critical path."""
    n = 0
    for period, start in (("before", T0), ("now", SINCE)):
        for i in range(30):
            for agent, tool, tool_ms, llm_ms, device in (
                    ("support-agent", "lookup_order", 900.0, 2100.0 + 10 * i, "gpu-h100-01"),
                    ("checkout-agent", "search_inventory", 800.0 if period == "now" else 200.0, 800.0 + 5 * i,
                     "groq-lpu-03")):
                n += 1
                task = make_task(project, f"{agent}-{period}-{i}", name=agent, duration_ms=tool_ms + llm_ms,
                                 start=start + timedelta(minutes=3 * i, seconds=n))
                make_step(task, "llm", kind="llm", model="llama-3.1-70b", device=device, duration_ms=llm_ms)
                make_step(task, "call", kind="tool", tool_name=tool, offset_ms=llm_ms, duration_ms=tool_ms)
                analyse(task, critical_path=["llm", "call"])
    rollups.rollups_rebuild()


def log_in(page, live_server, next_path: str) -> None:
    page.goto(f"{live_server.url}/login/?next={quote(next_path)}")
    page.fill("#id_username", "ana")
    page.fill("#id_password", "secret-pw")
    page.click("section.login button[type=submit]")
    page.wait_for_url(re.compile(re.escape(live_server.url) + "/"))


def rows(page, table: str) -> list[list[str]]:
    return [[c.strip() for c in row.locator("td").all_text_contents()]
            for row in page.locator(f"#{table} tbody tr").all()]


def test_the_overview_names_the_slow_agent_the_tool_on_the_critical_path_and_the_regression(
        live_server, browser_page, member, traffic):
    page = browser_page
    since, until = (t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in (SINCE, UNTIL))
    query = f"project=acme&since={since}&until={until}"
    log_in(page, live_server, f"/?{query}")
    page.wait_for_selector("#culprits", timeout=WAIT_MS)

    agents = rows(page, "culprit-agents")
    assert [r[0] for r in agents] == ["support-agent", "checkout-agent"], agents
    assert agents[0][1].startswith("≈3.") and agents[0][2] == "30"
    assert agents[1][3].startswith("+") and "from ≈1." in agents[1][3], agents[1]  # 1 s → 1.6 s: +55 %

    tools = rows(page, "culprit-tools")
    assert [r[0] for r in tools] == ["lookup_order", "search_inventory"], tools  # 27 s vs 24 s on the path
    assert rows(page, "culprit-models")[0][0] == "llama-3.1-70b"
    assert [r[0] for r in rows(page, "culprit-devices")] == ["gpu-h100-01", "groq-lpu-03"]
    assert "newest 60 analysed tasks" in page.text_content("#culprits")

    regressions = rows(page, "culprit-regressions")
    named = {r[0] for r in regressions}
    assert {"tool search_inventory", "agent checkout-agent"} <= named, regressions
    assert not any("support-agent" in r[0] or "lookup_order" in r[0] for r in regressions)  # steady: not named
    assert page.errors == [], page.errors
    screenshot(page, "overview-culprits")

    # Each entry opens its filtered task list, keeping the range.
    page.click("#culprit-regressions a:text-is('search_inventory')")
    page.wait_for_url(re.compile(r".*/tasks\?.*"))
    params = parse_qs(urlparse(page.url).query)
    assert params["tool"] == ["search_inventory"] and params["since"] == [since]
    names = {c.strip() for c in page.locator("#task-table tbody tr td:nth-child(2) a").all_text_contents()}
    assert names == {"checkout-agent"} and page.locator("#task-table tbody tr").count() == 30, names
    page.go_back()
    page.click("#culprit-agents a:text-is('support-agent')")
    page.wait_for_url(re.compile(r".*/tasks\?.*name=support-agent.*"))
    assert page.locator("#task-table tbody tr").count() == 30
    page.go_back()
    page.click("#culprit-devices a:text-is('groq-lpu-03')")
    page.wait_for_url(re.compile(r".*/tasks\?.*device=groq-lpu-03.*"))
    assert page.locator("#task-table tbody tr").count() == 30


def test_without_a_range_the_overview_says_what_the_change_needs(live_server, browser_page, member, traffic):
    page = browser_page
    log_in(page, live_server, "/?project=acme")
    page.wait_for_selector("#culprits", timeout=WAIT_MS)
    assert [r[0] for r in rows(page, "culprit-agents")] == ["support-agent", "checkout-agent"]
    assert "Pick a time range" in page.text_content("#culprit-regressions")
    assert page.errors == [], page.errors
