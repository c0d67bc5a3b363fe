"""Hostile query strings on the read side: `attr=k:NaN` (Infinity, -Infinity, 1e999) and cursors
that decode to values PostgreSQL refuses answer what they mean (a match on the text, or 400
naming the parameter), never a 500 or a debug page, on every API, export, page and chart that
takes the task filters."""

from __future__ import annotations

import base64
import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from analysis.filters import FilterError, decode_cursor, parse_task_filters, task_queryset
from tests.analysis.factories import T0, make_step, make_task

pytestmark = pytest.mark.django_db

# Each parses (json.loads) to a float that jsonb cannot hold: nan, inf, -inf, inf.
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999"]

JSON_APIS = ["/api/v1/tasks", "/api/v1/sessions", "/api/v1/latency", "/api/v1/export/tasks",
             "/api/v1/export/steps", "/api/v1/export/findings", "/api/v1/export/samples",
             "/api/v1/releases"]
PAGES = ["/", "/tasks", "/sessions", "/latency", "/devices", "/releases", "/tasks.csv"]
CHARTS = ["/charts/overview.json", "/charts/overview-cost.json", "/charts/latency.json",
          "/charts/devices.json", "/charts/turn-time.json"]


@pytest.fixture
def attr_tasks(project):
    """One task per non-finite word, holding it as a string: on the task ("on-task-…") or on a
    step ("on-step-…"), both under the key "k"."""
    for i, word in enumerate(NON_FINITE):
        make_task(project, f"on-task-{i}", attributes={"k": word}, session_id=f"s-{i}")
        task = make_task(project, f"on-step-{i}", session_id=f"s-{i}")
        make_step(task, f"step-{i}", attributes={"k": word})
    make_task(project, "plain", attributes={"k": "other"}, session_id="s-plain")


@pytest.fixture
def browser_client(project):
    user = get_user_model().objects.create_user("hostile-query", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("word", NON_FINITE)
def test_a_non_finite_number_in_attr_matches_the_text(project, attr_tasks, word):
    i = NON_FINITE.index(word)
    filters = parse_task_filters({"attr": f"k:{word}"})
    assert sorted(t.task_id for t in task_queryset(project=project, filters=filters)) == [
        f"on-step-{i}", f"on-task-{i}"]


@pytest.mark.parametrize("word", NON_FINITE)
@pytest.mark.parametrize("url", JSON_APIS)
def test_json_apis_take_a_non_finite_attr_without_a_5xx(project, attr_tasks, read_key, url, word):
    response = Client().get(url, {"attr": f"k:{word}"}, HTTP_AUTHORIZATION=f"Bearer {read_key}")
    if url == "/api/v1/export/samples":  # samples take no task filter at all: 400 naming it
        assert response.status_code == 400 and response.json()["error"].startswith("attr:")
        return
    assert response.status_code == 200, (url, word, response.content[:300])
    body = b"".join(response.streaming_content) if response.streaming else response.content
    i = NON_FINITE.index(word)
    if url == "/api/v1/tasks":
        assert sorted(t["task_id"] for t in json.loads(body)["results"]) == [f"on-step-{i}", f"on-task-{i}"]
    if url == "/api/v1/sessions":
        assert [s["session_id"] for s in json.loads(body)["results"]] == [f"s-{i}"]
    if url == "/api/v1/export/tasks":
        assert f"on-task-{i}".encode() in body and b"plain" not in body


@pytest.mark.parametrize("word", NON_FINITE)
@pytest.mark.parametrize("url", PAGES + CHARTS)
def test_pages_and_charts_take_a_non_finite_attr_without_a_5xx(project, attr_tasks, browser_client, url, word):
    response = browser_client.get(url, {"attr": f"k:{word}"})
    assert response.status_code == 200, (url, word)
    if url == "/tasks.csv":  # used to stop after the header: the query failed mid-stream
        body = b"".join(response.streaming_content) if response.streaming else response.content
        i = NON_FINITE.index(word)
        assert f"on-task-{i}".encode() in body and f"on-step-{i}".encode() in body


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("offset", ["+20:04", "+23:59", "-23:59"])
def test_a_sessions_cursor_with_an_offset_postgres_refuses_is_read_in_utc(project, attr_tasks, read_key,
                                                                          browser_client, offset):
    # It used to reach PostgreSQL as written (a 500): now, as the tasks cursor, converted to UTC.
    params = {"cursor": _cursor(f"2026-11-01T10:00:00{offset}|s-1")}
    response = Client().get("/api/v1/sessions", params, HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert response.status_code == 200, response.content[:300]
    assert browser_client.get("/sessions", params).status_code == 200


BAD_SESSION_CURSORS = [
    ("-last_started", "0001-01-01T00:00:00+01:00|s-1"),   # before year 1 in UTC
    ("-last_started", "9999-12-31T23:59:59-01:00|s-1"),   # after year 9999 in UTC
    ("-last_started", "2026-11-01T10:00:00|s-\x00"),      # NUL in the session id
    ("-turns", "99999999999999999999999|s-1"),             # past bigint
    ("turns", "-99999999999999999999999|s-1"),
    ("-total_ms", "NaN|s-1"),
    ("-slowest_ms", "inf|s-1"),
    ("total_ms", "1e999|s-1"),
    ("-last_started", "no separator"),
]


@pytest.mark.parametrize(("sort", "text"), BAD_SESSION_CURSORS)
def test_a_malformed_sessions_cursor_is_a_400_naming_it(project, attr_tasks, read_key, browser_client, sort, text):
    params = {"sort": sort, "cursor": _cursor(text)}
    response = Client().get("/api/v1/sessions", params, HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert response.status_code == 400, (text, response.content[:300])
    assert "cursor" in response.json()["error"]
    assert browser_client.get("/sessions", params).status_code == 400


BAD_TASK_CURSORS = [
    ("-started_at", "2026-11-01T10:00:00+20:04|1"),  # accepted: converted to UTC
    ("-started_at", "0001-01-01T00:00:00+01:00|1"),
    ("-started_at", "2026-11-01T10:00:00+00:00|99999999999999999999999"),  # past bigint
    ("-started_at", "2026-11-01T10:00:00+00:00|-99999999999999999999999"),
    ("-duration_ms", "NaN|1"),
    ("duration_ms", "inf|1"),
    ("-duration_ms", "1e999|1"),
]


@pytest.mark.parametrize(("sort", "text"), BAD_TASK_CURSORS)
def test_a_malformed_tasks_cursor_is_a_400_naming_it(project, attr_tasks, read_key, browser_client, sort, text):
    params = {"sort": sort, "cursor": _cursor(text)}
    response = Client().get("/api/v1/tasks", params, HTTP_AUTHORIZATION=f"Bearer {read_key}")
    if "+20:04" in text:  # a real instant: the page after it
        assert response.status_code == 200
        return
    assert response.status_code == 400, (text, response.content[:300])
    assert "cursor" in response.json()["error"]
    assert browser_client.get("/tasks", params).status_code == 400


def test_the_findings_cursor_refuses_a_pk_past_bigint(project, read_key):
    cursor = _cursor("2026-11-01T10:00:00+00:00|99999999999999999999999")
    response = Client().get("/api/v1/findings", {"cursor": cursor}, HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert response.status_code == 400 and "cursor" in response.json()["error"]


def test_cursors_the_lists_return_still_decode():
    value, pk = decode_cursor(_cursor(f"{T0.isoformat()}|42"), sort="-started_at")
    assert (value, pk) == (T0, 42)
    assert decode_cursor(_cursor("1500.5|7"), sort="duration_ms") == (1500.5, 7)
    with pytest.raises(FilterError, match="cursor"):
        decode_cursor(_cursor("nan|7"), sort="duration_ms")
