"""The MCP tools as functions (the transports are test_http.py and test_stdio.py): each answers from
the selectors the pages use, within OUTPUT_CHARS, with links that open the page that shows it, a
`more` cursor that continues exactly, and nothing of another project."""

from __future__ import annotations

import json
from urllib.parse import unquote, urlsplit

import pytest
from django.urls import resolve

from analysis.dashboard import views
from analysis.filters import SORTS
from analysis.mcp import tools
from tests.analysis.mcp import world as w

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(project, other_project, settings):
    settings.AGENTOPS_BASE_URL = "https://agentops.example/"
    return w.build(project, other_project)


@pytest.fixture
def big(world, project):
    return w.build_big(project)


def call(fn, project, **args) -> dict:
    text = fn(project=project, **args)
    assert len(text) <= tools.OUTPUT_CHARS, (fn.__name__, len(text))
    assert w.SECRET not in text, f"{fn.__name__} leaked another project's data"
    return json.loads(text)


EVERY_CALL = [
    (tools.search_tasks, {}), (tools.search_tasks, {"q": "search", "sort": "-duration_ms", "limit": 100}),
    (tools.explain_task, {"task_id": "slow-1"}), (tools.explain_task, {"task_id": w.BIG}),
    (tools.compare_tasks, {"task_id": w.BIG, "other_task_id": "run-0"}),
    (tools.compare_tasks, {"task_id": "slow-1", "other_task_id": "run-0"}),
    (tools.critical_path, {"task_id": w.BIG, "limit": 100}), (tools.critical_path, {"task_id": w.ODD_ID}),
    *[(tools.latency_percentiles, {"group_by": g}) for g in ("task", "kind", "name", "tool", "model", "device",
                                                              "session")],
    (tools.list_findings, {"limit": 100}), (tools.list_findings, {"task_id": w.ODD_ID}),
    (tools.compare_releases, {"a": "v1", "b": "v2"}), (tools.get_session, {"session_id": "sess-1"}),
    (tools.device_status, {}),
]


def test_every_tool_answers_within_the_cap_with_a_link_and_nothing_of_b(big, project):
    for fn, args in EVERY_CALL:
        data = call(fn, project, **args)
        assert data["project"] == "acme"
        assert data["url"].startswith("https://agentops.example/") and "project=acme" in data["url"]


def test_the_answers_say_what_the_pages_say(world, project):
    found = call(tools.search_tasks, project, sort="-duration_ms", limit=2)
    assert [t["task_id"] for t in found["tasks"]] == ["slow-1", "v2-7"]
    explained = call(tools.explain_task, project, task_id="slow-1")
    assert explained["typical_run"]["available"], explained["typical_run"]
    assert explained["typical_run"]["difference_ms"] > 2000 and "search" in json.dumps(explained["typical_run"])
    assert explained["findings"][0]["kind"] == "slow_step" and explained["findings"][0]["wasted_ms"] == 2380.0
    versus = call(tools.compare_tasks, project, task_id="slow-1", other_task_id="run-0")
    assert versus["diff"]["available"] and versus["other"]["task_id"] == "run-0"
    assert "against=run-0" in versus["url"]
    latency = call(tools.latency_percentiles, project, group_by="tool")
    assert latency["groups"][0]["group"] == "search" and latency["tasks"]["count"] > 30
    releases = call(tools.compare_releases, project, a="v1", b="v2")
    assert releases["overall"]["n_a"] > 20 and releases["overall"]["n_b"] == 8
    assert "/releases/compare?" in releases["url"] and "a=v1" in releases["url"]
    session = call(tools.get_session, project, session_id="sess-1")
    assert [t["task_id"] for t in session["turns"]] == ["run-0", "run-1", "run-2"]
    devices = call(tools.device_status, project)
    assert [d["device"] for d in devices["devices"]] == ["gpu-1"]
    assert devices["hardware_findings"][0]["hardware_verdict"] == "queueing"


def test_a_50000_step_task_pages_its_critical_path_and_findings_within_the_cap(big, project):
    seen, cursor, pages = [], "", 0
    while pages < 3:
        page = call(tools.critical_path, project, task_id=w.BIG, limit=100, cursor=cursor)
        assert page["path_steps"] == 50_000 and len(page["steps"]) == 100
        seen += [s["step_id"] for s in page["steps"]]
        cursor, pages = page["more"], pages + 1
    assert seen == [f"s{k}.{j}" for k in range(3) for j in range(100)]  # in order, none twice, none skipped
    assert page["steps"][0]["duration_ms"] == 10.0 and page["steps"][0]["kind"] == "llm"
    explained = call(tools.explain_task, project, task_id=w.BIG)
    assert explained["findings_total"] == 300 and len(explained["findings"]) <= tools.MAX_LIMIT
    seen, cursor = [], ""  # 300 findings, pages of at most 100, cut further by the cap
    for _ in range(20):
        page = call(tools.list_findings, project, task_id=w.BIG, limit=100, cursor=cursor)
        seen += [f["summary"] for f in page["findings"]]
        cursor = page["more"]
        if not cursor:
            break
    assert sorted(seen) == sorted(f"gap {k}" for k in range(300))


def test_the_task_list_continues_exactly_where_a_page_ended(world, project):
    tasks, cursor = [], ""
    for _ in range(20):
        page = call(tools.search_tasks, project, limit=7, cursor=cursor)
        tasks += [t["task_id"] for t in page["tasks"]]
        cursor = page["more"]
        if not cursor:
            break
    assert len(tasks) == len(set(tasks)) == w.RUNS + 8 + 2


def test_the_cap_cuts_rows_and_says_more():
    rows = [{"text": "x" * 1000, "n": i} for i in range(100)]
    text = tools.fit({"rows": rows, "more": None}, "rows", lambda n: f"after-{n}")
    data = json.loads(text)
    assert len(text) <= tools.OUTPUT_CHARS and 0 < len(data["rows"]) < 100
    assert data["more"] == f"after-{len(data['rows'])}"


def test_links_open_the_page_of_the_same_object(world, project):
    data = call(tools.explain_task, project, task_id=w.ODD_ID)
    for url in (data["url"], data["task"]["url"]):
        parts = urlsplit(url)
        assert "/" not in parts.path.removeprefix("/tasks/") and parts.fragment == ""
        match = resolve(unquote(parts.path))  # as a WSGI server decodes it
        assert match.url_name == "task-detail" and match.kwargs["task_id"] == w.ODD_ID, url
    compare = urlsplit(data["compare_url"])
    assert resolve(unquote(compare.path)).url_name == "task-compare" and "against=typical" in compare.query


def test_trace_text_is_cut_and_never_becomes_markup(world, project):
    data = call(tools.explain_task, project, task_id=w.ODD_ID)
    finding = data["findings"][0]
    assert len(finding["summary"]) <= tools.TEXT_CHARS and finding["summary"].endswith("…")
    assert finding["steps"] == 5000 and len(finding["step_ids"]) == tools.IDS_SHOWN
    assert data["task"]["name"].startswith("<script>")  # as the data has it: JSON text, rendered by nobody


NOT_FOUND = [
    (tools.explain_task, {"task_id": "globex-only"}), (tools.critical_path, {"task_id": "globex-only"}),
    (tools.compare_tasks, {"task_id": "run-0", "other_task_id": "globex-only"}),
    (tools.get_session, {"session_id": "no-such-session"}),
]


def test_another_projects_ids_are_not_found(world, project):
    for fn, args in NOT_FOUND:
        with pytest.raises(tools.ToolInputError, match="no such") as raised:
            fn(project=project, **args)
        assert w.SECRET not in str(raised.value)


def test_an_id_both_projects_have_answers_with_the_callers_own(world, project):
    data = call(tools.explain_task, project, task_id="run-0")
    assert data["task"]["name"] == "checkout"
    session = call(tools.get_session, project, session_id="sess-1")
    assert session["turns_total"] == 3


BAD_ARGUMENTS = [
    (tools.search_tasks, {"status": "broken"}, "status: must be one of"),
    (tools.search_tasks, {"since": "yesterday"}, "since: 'yesterday' is not an RFC 3339"),
    (tools.search_tasks, {"range": "3w"}, "range: must be one of"),
    (tools.search_tasks, {"cursor": "garbage"}, "cursor: not a cursor"),
    (tools.critical_path, {"task_id": "run-0", "cursor": "garbage"}, "cursor: not a cursor critical_path"),
    (tools.critical_path, {"task_id": "run-0", "cursor": tools._offset_cursor("get_session", 5)}, "cursor"),
    (tools.list_findings, {"kind": "slowness"}, "kind: must be one of"),
    (tools.list_findings, {"confidence": "sure"}, "confidence: must be one of"),
    (tools.compare_releases, {"a": "v1", "b": "v9"}, "b: no release 'v9' in this project; the project's releases"),
    (tools.compare_releases, {"a": "v1", "b": "v1"}, "b: must be a different release"),
    (tools.compare_releases, {"a": "v1", "b": ""}, "b: required"),
    (tools.explain_task, {"task_id": "a\x00b"}, "task_id: no such task"),
]


def test_bad_arguments_are_refused_naming_the_argument(world, project):
    for fn, args, message in BAD_ARGUMENTS:
        with pytest.raises(tools.ToolInputError, match="^" + message.replace("?", r"\?")):
            fn(project=project, **args)


def test_the_choices_are_the_pages_choices():
    from typing import get_args

    assert set(get_args(tools.LatencyGroup)) == set(views.LATENCY_GROUPS)
    assert set(get_args(tools.TaskSort)) == SORTS
