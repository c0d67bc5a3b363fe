"""The Instrumentation page and the task page's "not checked" notes in Chromium, on LangGraph's
OpenInference recording made with OPENINFERENCE_HIDE_INPUTS / _OUTPUTS on
(tests/fixtures/agents/content_off/), over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from django.contrib.auth import get_user_model

from tests.browser.conftest import screenshot, skip_without_chromium
from tests.browser.test_dashboard import assert_nothing_ran, log_in
from tests.recorded.content_switches import folder_of, payloads

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
FAMILY = "langgraph_openinference"


@pytest.fixture
def member(project):
    user = get_user_model().objects.create_user("ana", password="secret-pw")
    project.members.add(user)
    return user


def test_the_page_names_the_switch_and_the_task_page_says_what_was_not_checked(live_server, browser_page, member,
                                                                               ingest_key):
    for body, media in payloads(FIXTURES, FAMILY, content=False):
        r = requests.post(f"{live_server.url}/v1/traces", data=body, timeout=30, headers={
            "Authorization": f"Bearer {ingest_key}", "Content-Type": media})
        assert r.status_code == 200, r.text
    page = browser_page
    log_in(page, live_server)
    page.click("nav.pages >> text=Instrumentation")
    scope = page.locator('.instr-scope[data-scope="openinference.instrumentation.langchain"]')
    assert scope.locator('td[data-field="tool_args"]').inner_text().startswith("0 %")
    assert scope.locator('td[data-field="model"]').inner_text().startswith("100 %")
    repeated = scope.locator('li[data-check="repeated_tool_call"]')
    assert "blind" in repeated.get_attribute("class")
    assert "arrive redacted" in repeated.inner_text()
    assert repeated.locator("code").first.inner_text() == "OPENINFERENCE_HIDE_INPUTS=false"
    screenshot(page, "instrumentation-openinference-hidden")

    with (folder_of(FIXTURES, FAMILY, content=False) / "runs.jsonl").open() as fh:
        repeat = next(r for r in map(json.loads, fh) if r["scenario"] == "repeat")
    page.goto(f"{live_server.url}/tasks/{repeat['task_id']}")
    notes = page.locator("#coverage-notes")
    assert notes.is_visible()
    text = " ".join(notes.inner_text().split())
    assert "Repeated calls not checked: its tool arguments arrive redacted" in text
    assert "Independent calls not checked" in text and "OPENINFERENCE_HIDE_OUTPUTS=false" in text
    screenshot(page, "task-coverage-notes")
    notes.locator("a").click()
    page.wait_for_url(f"{live_server.url}/instrumentation?*")
    assert_nothing_ran(page)
