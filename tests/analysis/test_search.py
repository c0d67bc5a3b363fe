"""Task search: by attribute, model, tool, step duration, error words and free text over tool
arguments and errors; hostile text stays text; one project never finds another's tasks."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from analysis import filters
from analysis.filters import (
    MAX_PATTERN_LENGTH,
    MAX_PATTERN_WILDCARDS,
    FilterError,
    parse_task_filters,
    pattern_matches,
    pattern_parts,
    task_is_running,
    task_queryset,
)
from ingest.models import STEP_SEARCH_TSVECTOR
from tests.analysis.factories import T0, make_step, make_task

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>' OR 1=1 -- & | ! ( ) : * \\"


def found(project, **params) -> list[str]:
    filters = parse_task_filters({k: str(v) for k, v in params.items()})
    return sorted(t.task_id for t in task_queryset(project=project, filters=filters))


@pytest.fixture
def tasks(project, other_project):
    a = make_task(project, "a", attributes={"user_tier": "pro", "region": "eu"})
    make_step(a, "a1", kind="llm", name="chat gpt-4o", model="gpt-4o", duration_ms=900.0,
              attributes={"gen_ai.system": "openai", "turn": 1})
    make_step(a, "a2", kind="tool", name="search_inventory", tool_name="search_inventory", duration_ms=2500.0,
              tool_args={"sku": "ord_8f3k2q", "query": "waterproof boots"})
    b = make_task(project, "b", attributes={"user_tier": "free"})
    make_step(b, "b1", kind="llm", name="chat llama", model="llama-3-70b", duration_ms=300.0,
              attributes={"gen_ai.system": "groq", "turn": 2})
    make_step(b, "b2", kind="tool", name="get_order", tool_name="get_order", duration_ms=2600.0,
              status="error", error="HTTP 503 from upstream: service unavailable", tool_args={"order_id": 42})
    make_step(b, "b3", kind="tool", name="search_inventory", tool_name="search_inventory", duration_ms=100.0,
              tool_args={"query": HOSTILE})
    c = make_task(project, "zz-9", name=f"{HOSTILE} agent")
    make_step(c, "c1", kind="tool", name="lookup", tool_name="lookup", duration_ms=50.0, error=HOSTILE)
    # The same words in another project: never found from this one.
    x = make_task(other_project, "x", attributes={"user_tier": "pro"})
    make_step(x, "x1", kind="tool", name="search_inventory", tool_name="search_inventory", duration_ms=9000.0,
              tool_args={"sku": "ord_8f3k2q"}, error="HTTP 503 from upstream", model="gpt-4o",
              attributes={"gen_ai.system": "openai"})
    return a, b, c


def test_attribute_of_a_step_or_of_the_task(project, tasks):
    assert found(project, attr="gen_ai.system:openai") == ["a"]
    assert found(project, attr="user_tier:pro") == ["a"]          # a task (resource) attribute
    assert found(project, attr="turn:2") == ["b"]                 # a number, written as text
    assert found(project, attr="gen_ai.system:nobody") == []


def test_model_tool_and_any_step_over_a_duration(project, tasks):
    assert found(project, model="gpt-4o") == ["a"]
    assert found(project, tool="search_inventory") == ["a", "b"]
    assert found(project, min_step_ms=2000) == ["a", "b"]
    assert found(project, min_step_ms=2550) == ["b"]


def test_step_filters_describe_one_step(project, tasks):
    # b has a slow call (get_order) and a search_inventory call, but no slow search_inventory call.
    assert found(project, tool="search_inventory", min_step_ms=2000) == ["a"]
    assert found(project, attr="gen_ai.system:groq", model="llama-3-70b") == ["b"]
    assert found(project, attr="gen_ai.system:groq", model="gpt-4o") == []
    # A task attribute with a step condition: the task has it, and some step matches.
    assert found(project, attr="user_tier:pro", min_step_ms=2000) == ["a"]
    assert found(project, attr="user_tier:free", tool="search_inventory") == ["b"]


def test_error_words(project, tasks):
    assert found(project, error="503") == ["b"]
    assert found(project, error="service unavailable") == ["b"]
    assert found(project, error="waterproof") == []  # in tool arguments, not in an error


def test_free_text_over_tool_arguments_errors_names_and_ids(project, tasks):
    assert found(project, q="ord_8f3k2q") == ["a"]
    assert found(project, q="waterproof boots") == ["a"]
    assert found(project, q="upstream") == ["b"]
    assert found(project, q="order_id") == ["b"]      # argument keys are words too
    assert found(project, q="checkout") == ["a", "b"]  # the task name contains it
    assert found(project, q="zz-9") == ["zz-9"]         # an exact task id
    assert found(project, q="nothing-like-this") == []


def test_hostile_text_is_only_text(project, tasks):
    # tsquery syntax, SQL and markup in the search box: no error, and it finds what holds them.
    assert "zz-9" in found(project, q=HOSTILE)
    assert found(project, error=HOSTILE) == ["zz-9"]
    assert "b" in found(project, q="alert")


def test_results_escape_hostile_text(project, tasks):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    response = client.get("/tasks", {"q": HOSTILE})
    body = response.content.decode()
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_search_stays_in_the_url(project, tasks):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    body = client.get("/tasks", {"attr": "user_tier:pro", "min_step_ms": "2000", "tool": "search_inventory",
                                 "model": "gpt-4o", "error": "timeout"}).content.decode()
    for name, value in (("attr", "user_tier:pro"), ("min_step_ms", "2000"), ("tool", "search_inventory"),
                        ("model", "gpt-4o"), ("error", "timeout")):
        assert f'name="{name}" value="{value}"' in body
    assert "min_step_ms=2000" in body  # sort and export links keep it


def test_bad_search_parameters_answer_400_naming_them(project, read_key):
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}
    for params, name in (({"attr": "no-colon"}, "attr"), ({"min_step_ms": "-5"}, "min_step_ms"),
                         ({"min_step_ms": "fast"}, "min_step_ms"), ({"running": "maybe"}, "running")):
        response = client.get("/api/v1/tasks", params, **auth)
        assert response.status_code == 400, params
        assert name in response.json()["error"]


def test_api_search_never_reaches_another_project(project, other_project, tasks, read_key):
    response = Client().get("/api/v1/tasks", {"q": "ord_8f3k2q"}, HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert [t["task_id"] for t in response.json()["results"]] == ["a"]


def test_parse_rejects_an_attribute_without_a_key():
    with pytest.raises(FilterError, match="attr"):
        parse_task_filters({"attr": ":value"})


def test_the_search_indexes_can_be_used(project, tasks):
    """The text index must be on exactly the expression the query uses (else: a scan of every
    step); attributes and step durations have theirs."""
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute(f"EXPLAIN SELECT task_id FROM ingest_step WHERE ({STEP_SEARCH_TSVECTOR})"
                    " @@ websearch_to_tsquery('simple', %s)", ["ord_8f3k2q"])
        plan = "\n".join(row[0] for row in cur.fetchall())
        cur.execute("EXPLAIN SELECT task_id FROM ingest_step WHERE attributes @> %s::jsonb",
                    ['{"gen_ai.system": "openai"}'])
        attr_plan = "\n".join(row[0] for row in cur.fetchall())
        cur.execute("EXPLAIN SELECT task_id FROM ingest_step WHERE project_id = %s AND duration_ms >= 2000",
                    [project.pk])
        duration_plan = "\n".join(row[0] for row in cur.fetchall())
    assert "Bitmap Index Scan" in plan and "to_tsvector" in plan.split("Bitmap Index Scan")[1], plan
    assert "attributes" in attr_plan and "Bitmap Index Scan" in attr_plan, attr_plan
    assert "Index Cond" in duration_plan and "duration_ms >=" in duration_plan.split("Index Cond")[1], duration_plan


def test_a_running_task_is_listed_as_running(project):
    from datetime import UTC, datetime, timedelta

    done = make_task(project, "done")
    live = make_task(project, "live")
    live.reported = False
    live.ended_at = None
    live.last_event_at = datetime.now(tz=UTC) - timedelta(seconds=5)
    live.save()
    assert done.started_at == T0
    assert found(project, running="1") == ["live"]
    assert task_is_running(live) and not task_is_running(done)


def _otlp_trace(trace: str, spans: list[tuple[str, str, str, dict]]) -> bytes:
    """One trace: (span id, parent id, name, attributes) each 100 ms long."""
    import json

    def value(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"stringValue": v}

    out = [{"traceId": trace, "spanId": sid, "parentSpanId": parent, "name": name,
            "startTimeUnixNano": str(1_790_000_000_000_000_000 + i * 10**8),
            "endTimeUnixNano": str(1_790_000_000_100_000_000 + i * 10**8),
            "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()]}
           for i, (sid, parent, name, attrs) in enumerate(spans)]
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "support"}}]},
        "scopeSpans": [{"scope": {"name": "agent"}, "spans": out}]}]}).encode()


def test_attributes_the_otlp_mapper_read_are_still_found_as_sent(project, other_project, ingest_key, other_keys):
    """Issue #27.7: `attr=gen_ai.tool.name:refund_policy` found none of the tasks whose spans carry
    it, because the mapper moved the value to the step's tool column and out of its attributes."""
    client = Client()
    body = _otlp_trace("5b8efff798038103d269b633813fc60c", [
        ("aaa19b7ec3c1b170", "", "invoke_agent support", {"gen_ai.operation.name": "invoke_agent",
                                                          "gen_ai.agent.name": "support"}),
        ("aaa19b7ec3c1b171", "aaa19b7ec3c1b170", "chat", {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 40,
            "gen_ai.request.stream": True, "gen_ai.response.time_to_first_chunk": 0.04,
            "gen_ai.usage.cache_read.input_tokens": 300}),
        ("aaa19b7ec3c1b172", "aaa19b7ec3c1b170", "execute_tool refund_policy", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund_policy",
            "gen_ai.tool.call.id": "call_7Qx"}),
    ])
    for key in (ingest_key, other_keys["ingest"]):
        r = client.post("/v1/traces", data=body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
        assert r.status_code == 200, r.content[:300]
    trace = ["5b8efff798038103d269b633813fc60c"]
    for attr in ("gen_ai.tool.name:refund_policy", "gen_ai.request.model:gpt-4o-mini", "gen_ai.operation.name:chat",
                 "gen_ai.agent.name:support", "gen_ai.provider.name:openai", "gen_ai.usage.input_tokens:812",
                 "gen_ai.tool.call.id:call_7Qx", "gen_ai.request.stream:true",
                 "gen_ai.response.time_to_first_chunk:0.04", "gen_ai.usage.cache_read.input_tokens:300"):
        assert found(project, attr=attr) == trace, attr
    # No step says false (the tool call carries no flag at all), and no other TTFT or count is this one.
    for attr in ("gen_ai.request.stream:false", "gen_ai.response.time_to_first_chunk:0.041",
                 "gen_ai.usage.cache_read.input_tokens:301"):
        assert found(project, attr=attr) == [], attr
    assert found(project, attr="gen_ai.tool.name:refund") == []           # exact, as before
    assert found(project, attr="gen_ai.usage.input_tokens:813") == []
    assert found(project, attr="gen_ai.tool.name:refund_policy", step_kind="llm") == []
    # One step: the tool call is not the chat call.
    assert found(project, attr="gen_ai.tool.name:refund_policy", model="gpt-4o-mini") == []


def test_model_and_tool_match_a_prefix_or_a_substring(project, tasks):
    assert found(project, model="gpt-4o") == ["a"]       # exact, as before
    assert found(project, model="gpt") == []
    assert found(project, model="gpt*") == ["a"]          # prefix
    assert found(project, model="*70b") == ["b"]          # suffix
    assert found(project, tool="*inventory*") == ["a", "b"]  # substring
    assert found(project, tool="GET_*") == ["b"]          # case-insensitive
    assert found(project, tool="search_inventory*", min_step_ms=2000) == ["a"]  # still one step
    assert found(project, tool="100%*") == []             # LIKE's own wildcards are text
    assert found(project, tool="*_*") == ["a", "b"]          # zz-9's only call is "lookup"


def test_a_step_at_least_this_long_is_a_work_step_not_the_agent_span(project):
    """Issue #27.7: min_step_ms matched the root agent span, so "a step ≥ 30 s" was every task
    longer than 30 s."""
    slow_call = make_task(project, "slow-call", duration_ms=40_000.0)
    make_step(slow_call, "root", kind="agent", duration_ms=40_000.0)
    make_step(slow_call, "s1", kind="tool", parent="root", duration_ms=31_000.0)
    long_task = make_task(project, "long-task", duration_ms=40_000.0)
    make_step(long_task, "root", kind="agent", duration_ms=40_000.0)
    make_step(long_task, "loop", kind="framework", parent="root", duration_ms=39_000.0)
    for i in range(8):
        make_step(long_task, f"s{i}", kind="llm", parent="loop", offset_ms=i * 5000.0, duration_ms=4000.0)
    assert found(project, min_step_ms=30_000) == ["slow-call"]
    assert found(project, min_step_ms=30_000, step_kind="agent") == ["long-task", "slow-call"]
    assert found(project, min_step_ms=30_000, step_kind="framework") == ["long-task"]
    assert found(project, min_step_ms=3000, step_kind="llm") == ["long-task"]


def test_a_step_kind_must_be_one_of_the_kinds():
    with pytest.raises(FilterError, match="step_kind"):
        parse_task_filters({"step_kind": "span"})


def test_known_models_and_tools_are_listed_for_suggestions(project, other_project, tasks, read_key):
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}

    def values(**params):
        response = client.get("/api/v1/search/values", params, **auth)
        assert response.status_code == 200, response.content
        return response.json()["values"]

    assert values(field="tool") == ["get_order", "lookup", "search_inventory"]  # not the other project's
    assert values(field="tool", q="INV") == ["search_inventory"]                 # contains, any case
    assert values(field="model", q="gpt") == ["gpt-4o"]
    assert values(field="model", q="*70b") == ["llama-3-70b"]
    assert client.get("/api/v1/search/values", {"field": "name"}, **auth).status_code == 400
    assert "search_values" in client.get("/api/schema/", **auth).content.decode()


def test_the_tool_search_reads_an_index(project, tasks):
    with connection.cursor() as cur:
        # The statistics a table with these rows has: left with those of an emptied partition
        # (earlier tests' rows, rolled back, then autovacuumed: 0 tuples), the planner finds every
        # index that holds project_id as cheap as the tool's, the keys too, where project_id is
        # the last column since ingest 0018.
        cur.execute("ANALYZE ingest_step")
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("EXPLAIN SELECT task_id FROM ingest_step WHERE project_id = %s AND tool_name = %s",
                    [project.pk, "get_order"])
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "step_tool_time" in plan or "tool_name_started_at" in plan, plan


def test_the_list_shows_how_many_tasks_match(project, tasks):
    from analysis.dashboard.selectors import task_count

    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    body = client.get("/tasks", {"tool": "search_inventory"}).content.decode()
    assert '<p class="result-count" id="result-count">2 tasks</p>' in body
    assert '<p class="result-count" id="result-count">1 task</p>' in client.get("/tasks", {"q": "zz-9"}).content.decode()
    assert task_count(project=project, filters=parse_task_filters({}), cap=2) == (2, True)
    assert task_count(project=project, filters=parse_task_filters({}), cap=3) == (3, False)


# Patterns are matched without backtracking (issue 39, item 1): `*a*a*…*b` against a tool named
# `a`×100 froze both web workers for 63 s when it became a regex, the other project's requests
# timing out with them. Each of these hangs on a regex matcher.
BACKTRACKING = "*a" * MAX_PATTERN_WILDCARDS + "b"   # as many `*` as a pattern may hold


@pytest.fixture
def long_name(project):
    task = make_task(project, "long-name")
    make_step(task, "long", kind="tool", name="a" * 100, tool_name="a" * 100)
    make_step(task, "long-model", kind="llm", name="chat", model="a" * 100)
    return task


def test_a_pattern_that_would_backtrack_answers_at_once_on_every_surface(project, long_name, read_key):
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}
    for field in ("tool", "model"):
        response = client.get("/api/v1/search/values", {"field": field, "q": BACKTRACKING}, **auth)
        assert response.status_code == 200 and response.json()["values"] == []
        response = client.get("/api/v1/tasks", {field: BACKTRACKING}, **auth)
        assert response.status_code == 200 and response.json()["results"] == []
        # the same pattern ending in `a` matches the name
        matching = BACKTRACKING[:-2]
        response = client.get("/api/v1/search/values", {"field": field, "q": matching}, **auth)
        assert response.json()["values"] == ["a" * 100]
        assert found(project, **{field: matching}) == ["long-name"]


def test_a_pattern_over_more_values_than_can_be_listed_is_an_ilike(project, long_name, tasks, monkeypatch):
    """Past MAX_NAMES known values the pattern runs in PostgreSQL (LIKE, no backtracking either),
    with the same answers as the listed values give."""
    searches = [("tool", "*inventory*"), ("tool", "GET_*"), ("tool", "100%*"), ("tool", "*_*"),
                ("model", "*70B"), ("tool", BACKTRACKING), ("tool", BACKTRACKING[:-2])]
    listed = [found(project, **{field: p}) for field, p in searches]
    assert listed == [["a", "b"], ["b"], [], ["a", "b"], ["b"], [], ["long-name"]]
    monkeypatch.setattr(filters, "step_values", lambda **_: None)
    assert [found(project, **{field: p}) for field, p in searches] == listed


@pytest.mark.parametrize("value, error", [
    ("*a" * (MAX_PATTERN_WILDCARDS + 1), f"at most {MAX_PATTERN_WILDCARDS} `*`"),
    ("x" * MAX_PATTERN_LENGTH + "*", f"at most {MAX_PATTERN_LENGTH} characters"),
])
def test_a_pattern_past_its_bounds_answers_400_naming_the_parameter(project, read_key, value, error):
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}
    for url, field in [("/api/v1/tasks", "tool"), ("/api/v1/tasks", "model"), ("/api/v1/export/tasks", "tool")]:
        response = client.get(url, {field: value}, **auth)
        assert response.status_code == 400 and response.json()["error"].startswith(f"{field}: ")
        assert error in response.json()["error"]
    response = client.get("/api/v1/search/values", {"field": "tool", "q": value}, **auth)
    assert response.status_code == 400 and response.json()["error"].startswith("q: ")


@given(pattern=st.text(alphabet="ab%_*\\", max_size=8), text=st.text(alphabet="abAB%_\\", max_size=12))
def test_the_linear_matcher_agrees_with_a_regex_on_small_cases(pattern, text):
    regex = "".join(".*" if c == "*" else re.escape(c) for c in pattern)
    expected = re.fullmatch(regex, text, re.IGNORECASE | re.DOTALL) is not None
    assert pattern_matches(pattern_parts(pattern), text) == expected
