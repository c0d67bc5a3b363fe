"""The new pages in a real browser: the comparison with the typical run at the top of a task,
the find box, two tasks compared side by side from the task list, the sessions list and a
session's turns, and a running task whose new steps appear without a reload. Hostile trace
content stays text throughout. Screenshots land in test-artifacts/."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model

from ingest.models import Step, Task
from tests.analysis.factories import T0, analyse, make_finding, make_step, make_task
from tests.browser.conftest import ARTIFACTS, screenshot, skip_without_chromium
from tests.browser.test_dashboard import assert_nothing_ran, log_in

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000
XSS = "<img src=x onerror=\"window.pwned=3\">"


@pytest.fixture
def member(project):
    user = get_user_model().objects.create_user("ana", password="secret-pw")
    project.members.add(user)
    return user


def agent_run(project, task_id, *, start, llm2_ms=600.0, gap_ms=0.0, session_id="", name="checkout-agent",
              extra_call=False):
    """llm → search + cart (concurrent) → llm → pay → [gap] llm answer."""
    rnd = random.Random(task_id)

    def j(ms):
        return ms * rnd.uniform(0.97, 1.03)

    t, steps = 5.0, []
    steps.append(("llm0", "llm", "chat", t, j(800.0), {"model": "m", "device": "gpu-h100-02", "ttft_ms": 300.0}))
    t += 805.0
    steps.append(("search0", "tool", "search_inventory", t, j(400.0), {"tool_name": "search_inventory",
                                                                    "tool_args": {"q": XSS}}))
    steps.append(("cart0", "tool", "get_cart", t, j(300.0), {"tool_name": "get_cart", "tool_args": {"id": 1}}))
    t += 405.0
    steps.append(("llm1", "llm", "chat", t, llm2_ms, {"model": "m", "device": "gpu-h100-02", "ttft_ms": llm2_ms - 350}))
    t += llm2_ms + 5
    steps.append(("pay1", "tool", "pay", t, j(500.0), {"tool_name": "pay", "tool_args": {"amount": 3}}))
    t += 505.0
    if extra_call:
        steps.append(("search1", "tool", "search_inventory", t, 900.0, {"tool_name": "search_inventory",
                                                                       "tool_args": {"q": "again"}}))
        t += 905.0
    t += gap_ms
    steps.append(("llm2", "llm", "chat", t, j(900.0), {"model": "m", "device": "gpu-h100-02", "ttft_ms": 350.0}))
    t += 905.0
    task = make_task(project, task_id, duration_ms=t, start=start, name=name, release="v3", session_id=session_id,
                     step_count=len(steps) + 1)
    make_step(task, "root", kind="agent", duration_ms=t, name=name)
    for step_id, kind, step_name, offset, ms, extra in steps:
        make_step(task, step_id, parent="root", kind=kind, name=step_name, offset_ms=offset, duration_ms=ms, **extra)
    return task


@pytest.fixture
def workload(project):
    for i in range(24):
        agent_run(project, f"run-{i:02d}", start=T0 + timedelta(minutes=i), session_id=f"sess-{i % 6}")
    slow = agent_run(project, "slow-one", start=T0 + timedelta(minutes=40), llm2_ms=2800.0, gap_ms=1500.0,
                     session_id=XSS)
    make_finding(slow, "hardware_queueing", wasted_ms=2100.0, step_ids=["llm1"], summary=f"queued {XSS}")
    slow.findings.update(evidence={"verdict": "queueing"})
    agent_run(project, "extra-one", start=T0 + timedelta(minutes=41), extra_call=True, session_id=XSS)
    return slow


def test_a_slow_task_opens_with_its_comparison_to_the_typical_run(live_server, browser_page, member, workload):
    page = browser_page
    log_in(page, live_server, "/tasks/slow-one")
    headline = page.text_content("#typical-headline")
    assert headline.startswith("6.93 s vs typical 3.23 s for checkout-agent (v3, 26 runs):")
    # In the user's words: where the time went (queueing, named so), and "round", never "turn", for
    # an LLM call and the tools it led to ("turn" is the user's, on the Sessions pages).
    assert "chat waiting in the queue of gpu-h100-02 (" in headline and "idle before the last round" in headline
    assert " turn" not in headline
    # The section is the first thing under the task's facts, above the findings.
    assert page.evaluate("document.querySelector('#typical').compareDocumentPosition("
                         "document.querySelector('section.findings')) & Node.DOCUMENT_POSITION_FOLLOWING")
    page.wait_for_selector("body[data-waterfall-ready='1']", timeout=WAIT_MS)
    # An item's step link opens that step in the waterfall.
    page.click("#typical-items a.step-link[data-step='llm1']")
    page.wait_for_function("document.getElementById('step-title').textContent.includes('llm1')", timeout=WAIT_MS)
    screenshot(page, "task-typical")
    assert_nothing_ran(page)


def test_the_header_says_what_wasted_and_vs_typical_each_mean(live_server, browser_page, member, workload):
    # 2.1 s the findings would save, +3.7 s against the typical run: two numbers, two questions.
    analyse(workload, critical_path=["root", "llm1"], kinds=["hardware_queueing"], wasted_ms=2100.0)
    page = browser_page
    log_in(page, live_server, "/tasks/slow-one")
    wasted, typical = page.locator("#fact-wasted"), page.locator("#fact-vs-typical")
    assert wasted.locator("dt").inner_text() == "wasted (findings)"
    assert re.fullmatch(r"2\.10? s", wasted.locator("dd").inner_text())
    assert "the findings that count say this run could save" in wasted.get_attribute("title")
    assert typical.locator("dt").inner_text() == "vs its typical run"
    assert re.fullmatch(r"\+3\.70? s", typical.locator("dd").inner_text())
    assert "A different question from the findings'" in typical.get_attribute("title")
    assert_nothing_ran(page)


def test_the_find_box_reveals_and_scrolls_to_matching_steps(live_server, browser_page, member, workload):
    page = browser_page
    log_in(page, live_server, "/tasks/slow-one")
    page.wait_for_selector("body[data-waterfall-ready='1']", timeout=WAIT_MS)
    page.fill("#find-steps", "search_inventory")
    page.click("#find-form button[type=submit]")
    page.wait_for_function("document.getElementById('find-status').textContent.startsWith('1 of 1')", timeout=WAIT_MS)
    page.wait_for_function("document.getElementById('step-title').textContent.includes('search0')", timeout=WAIT_MS)
    assert page.evaluate("location.hash") == "#step=search0"
    # key:value finds by attribute or argument text; nothing found says so
    page.fill("#find-steps", "no such thing anywhere")
    page.click("#find-form button[type=submit]")
    page.wait_for_function("document.getElementById('find-status').textContent === 'no step matches'", timeout=WAIT_MS)
    page.fill("#find-steps", "chat")
    page.click("#find-form button[type=submit]")
    page.wait_for_function("document.getElementById('find-status').textContent.startsWith('1 of 3')", timeout=WAIT_MS)
    page.click("#find-next")
    page.wait_for_function("document.getElementById('find-status').textContent.startsWith('2 of 3')", timeout=WAIT_MS)
    assert_nothing_ran(page)


def test_two_ticked_tasks_compared_side_by_side(live_server, browser_page, member, workload):
    page = browser_page
    log_in(page, live_server, "/tasks")
    page.check("#task-table input[name=task][value='extra-one']")
    page.check("#task-table input[name=task][value='slow-one']")
    page.click("#compare-ticked")
    page.wait_for_url("**/tasks/extra-one/compare?*against=slow-one*", timeout=WAIT_MS)
    page.wait_for_selector("body[data-compare-ready='1']", timeout=WAIT_MS)
    headline = page.text_content("#compare-headline")
    assert headline.startswith("4.13 s vs 6.93 s for task slow-one")
    # both waterfalls: one bar per step of each task on one axis, the extra call marked
    counts = page.evaluate("""() => document.getElementById('chart-compare').data.map(t => [t.name, t.x.length])""")
    assert dict(counts) == {"this task": 7, "slow-one": 6}  # leaf steps: a parent is made of its children
    labels = page.evaluate("""() => document.getElementById('chart-compare').layout.yaxis.ticktext""")
    assert "+ t2 search_inventory" in labels
    screenshot(page, "task-compare")
    # and from a task's own page: the compare box
    page.goto(f"{live_server.url}/tasks/slow-one")
    page.fill("#compare-against", "run-03")
    page.click("#typical form.compare-with button")
    page.wait_for_selector("body[data-compare-ready='1']", timeout=WAIT_MS)
    assert page.text_content("#compare-headline").startswith("6.93 s vs 3.2")
    assert_nothing_ran(page)


def test_sessions_list_and_a_sessions_turns(live_server, browser_page, member, workload):
    page = browser_page
    log_in(page, live_server, "/sessions?sort=-slowest_ms")
    first = page.text_content("#session-table tbody tr:first-child td:first-child")
    assert first.strip() == XSS[:37] + "…" or first.strip().startswith("<img")  # shown as text
    assert page.locator("#session-table tbody tr").count() == 7
    screenshot(page, "sessions")
    page.click("#session-table a[href^='/sessions/sess-2']")
    page.wait_for_selector("body[data-session-ready='1']", timeout=WAIT_MS)
    assert page.text_content("#session-turns") == "4"
    assert page.locator("#turn-table tr.turn").count() == 4
    bars = page.evaluate("() => document.getElementById('chart-session').data[0].x.length")
    assert bars == 4
    screenshot(page, "session")
    # the overview's time per user turn, fetched after it renders
    page.goto(f"{live_server.url}/")
    page.wait_for_selector("#turn-time:not([hidden])", timeout=WAIT_MS)
    assert page.text_content("#turn-time [data-field=sessions]") == "7"
    page.goto(f"{live_server.url}/sessions")
    page.click("#session-table tbody tr:first-child a")
    page.wait_for_selector("body[data-session-ready='1']", timeout=WAIT_MS)
    assert "queued" in page.text_content("#turn-table")
    assert_nothing_ran(page)


def test_a_running_task_shows_new_steps_without_a_reload(live_server, browser_page, member, project):
    now = datetime.now(tz=UTC)
    task = Task.objects.create(project=project, task_id="live-1", name="live-agent", started_at=now,
                               ended_at=None, duration_ms=None, reported=False, step_count=2, last_event_at=now)
    make_step(task, "root", kind="agent", duration_ms=200.0)
    make_step(task, "l0", parent="root", kind="llm", duration_ms=150.0)
    page = browser_page
    log_in(page, live_server, "/tasks/live-1")
    page.wait_for_selector("body[data-waterfall-ready='1']", timeout=WAIT_MS)
    assert page.text_content("#running-marker") == "running"
    assert page.evaluate("document.body.dataset.taskRunning") == "1"
    assert "2 of 2 steps" in page.text_content("#waterfall-status")
    page.evaluate("window.notReloaded = true")
    for i in range(3):  # steps land while the page is open
        make_step(task, f"t{i}", parent="root", kind="tool", offset_ms=200.0 + 100 * i, duration_ms=90.0)
    Task.objects.filter(pk=task.pk).update(step_count=5, last_event_at=datetime.now(tz=UTC))
    page.wait_for_function("document.getElementById('waterfall-status').textContent.startsWith('5 of 5')",
                           timeout=WAIT_MS)
    assert Step.objects.filter(task=task).count() == 5
    # the task ends: the marker says so and the polling stops
    end = datetime.now(tz=UTC)
    Task.objects.filter(pk=task.pk).update(reported=True, ended_at=end, status="ok", duration_ms=500.0,
                                           last_event_at=end)
    page.wait_for_function("document.body.dataset.taskRunning === '0'", timeout=WAIT_MS)
    assert page.text_content("#running-marker") == "ok"
    assert page.evaluate("window.notReloaded") is True
    # the task list shows running tasks as such
    Task.objects.create(project=project, task_id="live-2", name="live-agent", started_at=end, reported=False,
                        step_count=0, last_event_at=datetime.now(tz=UTC))
    page.goto(f"{live_server.url}/tasks?running=1")
    assert page.locator("#task-table tbody tr").count() == 1
    assert page.text_content("#task-table tbody tr .status-running") == "running"
    assert_nothing_ran(page)


def test_two_10000_step_tasks_compare_in_the_browser(live_server, browser_page, member, project):
    from tests.analysis.factories import insert_big_task

    insert_big_task(project, "big-a", turns=1000, per_turn=10)
    insert_big_task(project, "big-b", turns=1000, per_turn=10)
    Step.objects.filter(task__task_id="big-a", step_id="s500.3").update(name="call 3b")
    page = browser_page
    log_in(page, live_server, "/tasks/big-a/compare?against=big-b")
    started = page.evaluate("performance.now()")
    page.wait_for_selector("body[data-compare-ready='1']", timeout=120_000)
    took_ms = page.evaluate("performance.now()") - started
    status = page.text_content("#compare-status")
    assert status.startswith("10001 aligned steps (WebGL)"), status
    # both sides drawn: every aligned row of this task and of the other (minus one only-there step each)
    counts = dict(page.evaluate("""() => document.getElementById('chart-compare').data.map(t => [t.name, t.x.length])"""))
    assert counts == {"this task": 10_000, "big-b": 10_000}
    timing = page.evaluate("window.agentopsTiming")
    (ARTIFACTS / "compare-10k-timing.json").write_text(json.dumps({**timing, "wait_ms": took_ms}))
    assert_nothing_ran(page)
