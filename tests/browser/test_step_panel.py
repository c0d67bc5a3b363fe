"""The step panel in Chromium (issue #27 item 9): a side panel, not a JSON dump; attributes as a
table, tool arguments and result indented; the model, tool, device, server, agent and session
lead to their pages; copy buttons for the trace, step and session ids; j/k/Enter/Esc on the
waterfall. Trace content is hostile: every value shows as text and nothing runs."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest

from tests.analysis.factories import analyse, make_step, make_task
from tests.browser.conftest import screenshot, skip_without_chromium
from tests.browser.test_dashboard import XSS_ARG, XSS_NAME, assert_nothing_ran, log_in, member  # noqa: F401

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000
RESULT = json.dumps({"items": [{"sku": XSS_ARG, "qty": 2}], "total": 3})


@pytest.fixture
def task(project):
    task = make_task(project, "run-7", duration_ms=2000.0, name="checkout-agent", session_id=XSS_NAME)
    make_step(task, "root", kind="agent", duration_ms=2000.0, name="checkout-agent")
    make_step(task, "plan", parent="root", kind="llm", duration_ms=700.0, name="chat", model="llama-3.1-70b",
              device="gpu-h100-01", ttft_ms=210.0, input_tokens=1200, output_tokens=90,
              attributes={"server.address": "vllm-1", "server.port": 8000, "prompt": XSS_NAME,
                          "gen_ai.request": {"temperature": 0.2}})
    make_step(task, "lookup", parent="root", kind="tool", offset_ms=700.0, duration_ms=900.0, name="search_inventory",
              tool_name="search_inventory", tool_args={"q": XSS_ARG, "limit": 5}, tool_result=RESULT,
              tool_call_id="call_1", attributes={XSS_NAME: XSS_ARG})
    make_step(task, "answer", parent="root", kind="llm", offset_ms=1600.0, duration_ms=400.0, name="chat",
              model="llama-3.1-70b", error=XSS_ARG, status="error")
    analyse(task, critical_path=["root", "plan", "lookup", "answer"])
    return task


def open_task(page, live_server):
    log_in(page, live_server, "/tasks/run-7")
    page.wait_for_selector("body[data-waterfall-ready='1']", timeout=WAIT_MS)


def field(page, label: str) -> str:
    return page.evaluate("""label => { const th = [...document.querySelectorAll('#step-fields th')]
        .find(th => th.textContent === label); return th ? th.nextElementSibling.textContent : null; }""", label)


def href(page, entity: str) -> dict:
    link = page.locator(f"#step-fields a.entity-link:text-is('{entity}')")
    url = urlparse(link.get_attribute("href"))
    return {"path": url.path, **{k: v[0] for k, v in parse_qs(url.query).items()}}


def test_the_keyboard_walks_the_waterfall_and_the_panel_reads_as_a_table(live_server, browser_page, member, task):  # noqa: F811
    page = browser_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    open_task(page, live_server)
    page.focus("#chart-waterfall")
    page.keyboard.press("j")  # the first row: root
    page.keyboard.press("j")  # plan
    assert page.evaluate("document.body.dataset.cursor") == "plan"
    assert page.locator("#step-panel").is_hidden()
    page.keyboard.press("Enter")
    page.wait_for_function("document.getElementById('step-title').textContent.startsWith('chat')", timeout=WAIT_MS)
    # a side panel: fixed on the right, over the page, not under the waterfall
    box = page.locator("#step-panel").bounding_box()
    assert page.evaluate("getComputedStyle(document.getElementById('step-panel')).position") == "fixed"
    assert box["x"] > 700 and box["x"] + box["width"] >= 1399
    assert field(page, "model") == "llama-3.1-70b" and field(page, "TTFT") == "210 ms"
    assert field(page, "duration") == "700 ms" and field(page, "tokens") == "1200 in / 90 out"
    assert href(page, "llama-3.1-70b") == {"path": "/tasks", "model": "llama-3.1-70b", "project": "acme"}
    device = href(page, "gpu-h100-01")
    assert device["path"] == "/devices" and device["device"] == "gpu-h100-01" and "mark_from" in device
    assert href(page, "vllm-1:8000")["device"] == "vllm-1:8000"
    assert href(page, "checkout-agent")["path"] == "/agents/checkout-agent"
    # attributes: a row per key, nested values indented
    attrs = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#step-attributes tr')]
        .map(tr => [tr.cells[0].textContent, tr.cells[1].textContent]))""")
    assert attrs["prompt"] == XSS_NAME and attrs["server.port"] == "8000"
    assert attrs["gen_ai.request"] == '{\n  "temperature": 0.2\n}'
    screenshot(page, "step-panel-llm")
    # j with the panel open shows the next step: the tool call, its arguments and result indented
    page.keyboard.press("j")
    page.wait_for_function("document.getElementById('step-title').textContent.startsWith('search_inventory')",
                           timeout=WAIT_MS)
    assert page.inner_text("#step-args") == json.dumps({"q": XSS_ARG, "limit": 5}, indent=2)
    assert page.inner_text("#step-result") == json.dumps(json.loads(RESULT), indent=2)
    assert href(page, "search_inventory") == {"path": "/tasks", "tool": "search_inventory", "project": "acme"}
    attrs = page.evaluate("() => [...document.querySelectorAll('#step-attributes tr')].map(tr => tr.textContent)")
    assert attrs == [XSS_NAME + XSS_ARG]
    # copy the ids
    page.click(".copy-id[data-copy='step_id']")
    page.wait_for_function("document.getElementById('copy-status').textContent === 'copied step id'", timeout=WAIT_MS)
    assert page.evaluate("navigator.clipboard.readText()") == "lookup"
    page.click(".copy-id[data-copy='task_id']")
    page.wait_for_function("document.getElementById('copy-status').textContent === 'copied task id'", timeout=WAIT_MS)
    assert page.evaluate("navigator.clipboard.readText()") == "run-7"
    page.click(".copy-id[data-copy='session_id']")
    page.wait_for_function("document.getElementById('copy-status').textContent === 'copied session id'", timeout=WAIT_MS)
    assert page.evaluate("navigator.clipboard.readText()") == XSS_NAME
    screenshot(page, "step-panel-tool")
    # k goes back, Esc closes; keys typed in the find box are text, not navigation
    page.keyboard.press("k")
    page.wait_for_function("document.getElementById('step-title').textContent.startsWith('chat')", timeout=WAIT_MS)
    page.keyboard.press("Escape")
    assert page.locator("#step-panel").is_hidden()
    page.fill("#find-steps", "")
    page.focus("#find-steps")
    page.keyboard.type("jk")
    assert page.input_value("#find-steps") == "jk" and page.evaluate("document.body.dataset.cursor") == "plan"
    # the error of a failed step, as text
    page.focus("#chart-waterfall")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_function("document.getElementById('step-error').textContent.length > 0", timeout=WAIT_MS)
    assert page.inner_text("#step-error") == XSS_ARG
    assert page.locator("#step-panel img, #step-panel script").count() == 0
    assert_nothing_ran(page)


def test_a_model_link_in_the_panel_lists_its_tasks(live_server, browser_page, member, task):  # noqa: F811
    page = browser_page
    open_task(page, live_server)
    page.focus("#chart-waterfall")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_selector("#step-fields a.entity-link", timeout=WAIT_MS)
    page.click("#step-fields a.entity-link:text-is('llama-3.1-70b')")
    page.wait_for_url("**/tasks?*model=llama-3.1-70b*", timeout=WAIT_MS)
    assert page.locator("#task-table a[href^='/tasks/run-7']").count() == 1
    # the task list names the agent, which leads to its call graph
    agent = page.locator("#task-table a.entity-link[data-entity='agent']").first
    assert agent.inner_text() == "checkout-agent" and agent.get_attribute("href").startswith("/agents/checkout-agent")
    # the latency page's model and tool groups lead to their tasks
    page.goto(f"{live_server.url}/latency?group_by=tool")
    tasks_link = page.locator("#group-percentiles a:text-is('tasks')").first
    assert "tool=search_inventory" in tasks_link.get_attribute("href")
    assert_nothing_ran(page)
