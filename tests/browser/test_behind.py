"""Backpressure a user can see: when analysis falls behind, the overview and the task page say
how far behind findings are; once the backlog is analysed the notice goes away."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from analysis.engine import batch
from ingest.models import Task
from tests.analysis.factories import make_step, make_task
from tests.browser.conftest import screenshot, skip_without_chromium
from tests.browser.test_dashboard import log_in

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def member(project):
    user = get_user_model().objects.create_user("ana", password="secret-pw")
    project.members.add(user)
    return user


def test_the_overview_and_the_task_page_say_how_far_findings_are_behind(live_server, browser_page, member,
                                                                       project, settings):
    settings.ANALYSIS_QUIET_SECONDS = 5
    for i in range(4):
        task = make_task(project, f"waiting-{i}", start=timezone.now() - timedelta(minutes=12))
        make_step(task, "s1", kind="tool", duration_ms=300.0, tool_name="search")
        Task.objects.filter(pk=task.pk).update(last_event_at=timezone.now() - timedelta(minutes=12))
    page = browser_page
    log_in(page, live_server)
    page.goto(f"{live_server.url}/")
    notice = page.locator("#analysis-behind")
    assert re.search(r"findings are 1[12] minutes behind", notice.inner_text())  # the minute may turn
    screenshot(page, "overview-behind")
    page.goto(f"{live_server.url}/tasks/waiting-0")
    assert re.search(r"findings are 1[123] minutes behind", page.locator("#analysis-behind").inner_text())
    while batch.run_due()["analysed"]:
        pass
    page.goto(f"{live_server.url}/")
    assert page.locator("#analysis-behind").count() == 0
    page.goto(f"{live_server.url}/tasks/waiting-0")
    assert page.locator("#analysis-behind").count() == 0
    assert page.errors == []
