"""Token cost in a real browser: a task of an unpriced model shows "no price"; a price entered in
the admin makes its cost appear on the task page and in the task list."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from tests.analysis.factories import analyse, make_step, make_task
from tests.browser.conftest import screenshot, skip_without_chromium

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000


@pytest.fixture
def tasks(project):
    priced = make_task(project, "priced-run", name="checkout", session_id="sess-9")
    make_step(priced, "plan", kind="llm", model="llama-70b", input_tokens=1000, output_tokens=100, duration_ms=400.0)
    make_step(priced, "call", kind="tool", offset_ms=400.0, tool_name="search")
    analyse(priced)
    other = make_task(project, "other-run", name="checkout")
    make_step(other, "plan", kind="llm", model="<b>secret-model</b>", input_tokens=500, output_tokens=50)
    analyse(other)
    return priced, other


@pytest.fixture
def admin_user(project):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "secret-pw")
    project.members.add(user)
    return user


def log_in(page, live_server) -> None:
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "secret-pw")
    page.click("section.login button[type=submit]")
    page.wait_for_url(re.compile(re.escape(live_server.url) + "/$"))


def test_a_price_entered_in_the_admin_gives_the_task_page_its_cost(live_server, browser_page, admin_user, tasks):
    page = browser_page
    log_in(page, live_server)
    page.goto(f"{live_server.url}/tasks/priced-run")
    assert page.text_content("#task-cost").strip() == "no price (llama-70b)"
    assert "$0" not in page.text_content("#task-cost")

    page.goto(f"{live_server.url}/admin/analysis/modelprice/add/")
    page.fill("#id_model", "llama-70b")
    page.fill("#id_input_per_million", "0.6")
    page.fill("#id_output_per_million", "0.8")
    page.fill("#id_effective_from_0", "2026-01-01")
    page.fill("#id_effective_from_1", "00:00:00")
    page.fill("#id_note", "our contract")
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r".*/admin/analysis/modelprice/$"), timeout=WAIT_MS)
    assert "llama-70b" in page.text_content("#result_list")
    page.errors.clear()  # the admin's pages have no favicon link: Chromium's /favicon.ico is a 404

    page.goto(f"{live_server.url}/tasks/priced-run")
    assert page.text_content("#task-cost").strip() == "$0.000680"  # (1000 × 0.6 + 100 × 0.8) / 1e6
    assert page.text_content("#session-cost").strip() == "sess-9 · 1 task · $0.000680"
    screenshot(page, "task-cost")

    page.goto(f"{live_server.url}/tasks/other-run")
    cost = page.locator("#task-cost")
    assert cost.text_content().startswith("no price")
    assert "<b>secret-model</b>" in cost.get_attribute("title")  # shown as text, never as markup
    assert page.locator("#task-cost b").count() == 0

    page.goto(f"{live_server.url}/tasks")
    cells = [c.strip() for c in page.locator("#task-table tbody td.cost").all_text_contents()]
    assert sorted(cells) == ["$0.000680", "no price"], cells

    page.goto(f"{live_server.url}/")
    page.wait_for_function("document.querySelector('#kpi-cost b').textContent !== '…'", timeout=WAIT_MS)
    assert page.text_content("#kpi-cost b") == "$0.000680 + no price for 1 LLM step"
    assert "<b>secret-model</b>" in page.get_attribute("#kpi-cost", "title")
    assert page.locator("#cost-by-release tbody tr").count() == 1  # release v1
    screenshot(page, "overview-cost")
    assert page.errors == []
