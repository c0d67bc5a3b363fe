"""One task's figures read the same on every page, API and MCP tool (issue 41, item 2): how many
findings it has (those that count: high or medium confidence), and its wasted time (the union of
its findings' steps, never the sum of findings that overlap). A task page that grouped eleven
queueing findings into one row read "2 findings" where the Sessions page said 13."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from analysis.mcp import tools
from analysis.models import Finding
from analysis.units import fmt_ms
from tests.analysis.factories import analyse, make_finding, make_step, make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(project):
    task = make_task(project, "slow-one", duration_ms=60_000.0, session_id="sess-1")
    for i in range(11):
        make_step(task, f"chat-{i}", kind="llm", offset_ms=i * 5000.0, duration_ms=4000.0, device="gpu-h100-01")
        f = make_finding(task, "hardware_queueing", wasted_ms=3000.0, step_ids=[f"chat-{i}"],
                         summary=f"call {i} waited 3 s in gpu-h100-01's queue")
        f.evidence = {"device": "gpu-h100-01"}
        f.save(update_fields=["evidence"])
    # A slow step over the same call as one of the queueing findings: its time is not counted twice.
    make_finding(task, "slow_step", wasted_ms=3500.0, step_ids=["chat-3"], summary="chat-3 was slow")
    make_finding(task, "repeated_tool_call", wasted_ms=900.0, step_ids=["chat-5"], summary="possibly a repeat",
                 confidence=Finding.CONFIDENCE_LOW)
    analyse(task, kinds=["hardware_queueing", "slow_step"], wasted_ms=33_500.0)  # 11 × 3 s, and 0.5 s more on chat-3
    return task


@pytest.fixture
def browser(project):
    user = get_user_model().objects.create_user("reader", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client


def test_the_findings_and_wasted_time_of_one_task_agree_on_every_surface(project, task, browser, read_key):
    counted, wasted = 12, fmt_ms(33_500.0)

    page = browser.get("/tasks/slow-one").content.decode()
    assert re.search(r'id="findings-count"[^>]*>\s*12 that count, and possible ones', page)
    assert "×11" in page  # the eleven queueing findings, shown as one row, still count as eleven
    assert re.search(rf'id="fact-wasted".*?<dd>{re.escape(wasted)}</dd>', page, re.S)

    sessions = browser.get("/sessions").content.decode()
    row = re.search(r'<tr[^>]*>(?:(?!</tr>).)*sess-1(?:(?!</tr>).)*</tr>', sessions, re.S).group(0)
    assert re.search(rf'<td class="num">{counted}</td>', row), row
    assert wasted in row

    tasks_page = browser.get("/tasks").content.decode()
    assert wasted in re.search(r'<tr[^>]*>(?:(?!</tr>).)*slow-one(?:(?!</tr>).)*</tr>', tasks_page, re.S).group(0)

    auth = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}
    listed = Client().get("/api/v1/tasks", **auth).json()["results"]
    assert [t["wasted_ms"] for t in listed if t["task_id"] == "slow-one"] == [33_500.0]
    detail = Client().get("/api/v1/tasks/slow-one", **auth).json()
    assert detail["wasted_ms"] == 33_500.0
    assert sum(f["confidence"] != Finding.CONFIDENCE_LOW for f in detail["findings"]) == counted

    explained = json.loads(tools.explain_task(project=project, task_id="slow-one"))
    assert explained["findings_counted"] == counted and explained["findings_total"] == counted + 1
    assert explained["wasted_ms"] == 33_500.0
