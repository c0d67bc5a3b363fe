"""Task search: by attribute, model, tool, step duration, error words and free text over tool
arguments and errors; hostile text stays text; one project never finds another's tasks."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from analysis.filters import FilterError, parse_task_filters, task_is_running, task_queryset
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
