"""Sessions: tasks sharing a session id (OTLP gen_ai.conversation.id / session.id, the native
session_id), listed with the task filters, sorted by turns, total or slowest turn; a session's
turns with the time the user waited; the Latency page and overview grouped by session."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from analysis import rollups
from analysis.dashboard import sessions
from analysis.filters import TaskFilters
from analysis.mcp import tools as mcp_tools
from tests.analysis.factories import T0, make_finding, make_task

pytestmark = pytest.mark.django_db
NS = 1_000_000


def otlp_trace(trace_id: str, *, start_ms: int, duration_ms: int, attributes: list) -> bytes:
    def span(span_id, parent, name, start, end, attrs):
        return {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": 1,
                "startTimeUnixNano": str((1_790_000_000_000 + start) * NS),
                "endTimeUnixNano": str((1_790_000_000_000 + end) * NS), "attributes": attrs}
    attr = [{"key": k, "value": {"stringValue": v}} for k, v in attributes]
    chat = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}}]
    spans = [span(trace_id[:16], "", "invoke_agent support", start_ms, start_ms + duration_ms,
                  attr + [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}]),
             span(trace_id[16:], trace_id[:16], "chat gpt-4o", start_ms + 5, start_ms + duration_ms - 5, chat)]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "support"}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}).encode()


def test_sessions_from_otlp_attributes_and_the_native_field(project, ingest_key, read_key):
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ingest_key}"}
    for trace, start, duration, attrs in (
            ("a" * 32, 0, 1200, [("gen_ai.conversation.id", "conv-1")]),
            ("b" * 32, 60_000, 3400, [("session.id", "conv-1")]),
            ("c" * 32, 120_000, 800, [("gen_ai.conversation.id", "conv-2")])):
        r = client.post("/v1/traces", otlp_trace(trace, start_ms=start, duration_ms=duration, attributes=attrs),
                        content_type="application/json", **auth)
        assert r.status_code == 200, r.content
    events = []
    for i, duration in enumerate((500, 2500, 700)):
        start = T0 + timedelta(minutes=i)
        events.append({"type": "task", "task_id": f"n{i}", "name": "chat-agent", "session_id": "native-9",
                       "started_at": start.isoformat(), "ended_at": (start + timedelta(milliseconds=duration)).isoformat(),
                       "status": "ok"})
    r = client.post("/api/v1/ingest", {"events": events}, content_type="application/json", **auth)
    assert r.status_code == 200 and r.json()["accepted"] == 3

    read = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}
    listed = {s["session_id"]: s for s in client.get("/api/v1/sessions", **read).json()["results"]}
    assert set(listed) == {"conv-1", "conv-2", "native-9"}
    assert (listed["conv-1"]["turns"], listed["conv-1"]["total_ms"], listed["conv-1"]["slowest_ms"]) == (2, 4600.0, 3400.0)
    assert (listed["native-9"]["turns"], listed["native-9"]["slowest_ms"]) == (3, 2500.0)

    detail = client.get("/api/v1/sessions/native-9", **read).json()
    assert [t["turn"] for t in detail["turns"]] == [1, 2, 3]
    assert [t["waited_ms"] for t in detail["turns"]] == [500.0, 2500.0, 700.0]
    assert [t["task"]["task_id"] for t in detail["turns"]] == ["n0", "n1", "n2"]
    assert detail["turns"][1]["since_previous_ms"] == pytest.approx(60_000 - 500)


@pytest.fixture
def sessions_data(project, other_project):
    # s-a: 3 turns (total 6 s, slowest 4 s); s-b: 2 turns (total 9 s, slowest 8 s); s-c: 1 turn, v2.
    for i, (sid, ms, release) in enumerate([("s-a", 1000, "v1"), ("s-a", 4000, "v1"), ("s-a", 1000, "v1"),
                                           ("s-b", 8000, "v1"), ("s-b", 1000, "v1"), ("s-c", 500, "v2")]):
        task = make_task(project, f"t{i}", duration_ms=ms, release=release, session_id=sid,
                         start=T0 + timedelta(minutes=i))
        if i == 1:
            make_finding(task, "serial_gap", wasted_ms=2500.0, step_ids=["x"], summary="idle 2.5 s")
    make_task(project, "no-session", duration_ms=99_000)
    make_task(other_project, "theirs", duration_ms=1000, session_id="s-a")


def listed(project, **kwargs):
    rows, cursor = sessions.session_list(project=project, filters=kwargs.pop("filters", TaskFilters()), **kwargs)
    return [r.session_id for r in rows], cursor


def test_sorted_by_turns_total_and_slowest_turn(project, sessions_data):
    assert listed(project, sort="-turns")[0] == ["s-a", "s-b", "s-c"]
    assert listed(project, sort="-total_ms")[0] == ["s-b", "s-a", "s-c"]
    assert listed(project, sort="-slowest_ms")[0] == ["s-b", "s-a", "s-c"]
    assert listed(project, sort="slowest_ms")[0] == ["s-c", "s-a", "s-b"]
    assert listed(project)[0] == ["s-c", "s-b", "s-a"]  # newest last turn first


def test_keyset_pages(project, sessions_data):
    first, cursor = listed(project, sort="-total_ms", limit=2)
    assert first == ["s-b", "s-a"] and cursor
    second, cursor = listed(project, sort="-total_ms", limit=2, cursor=cursor)
    assert second == ["s-c"] and cursor is None


def test_newest_first_pages_never_repeat_or_skip_a_session(project):
    # Sessions interleaved in time: each session's turns straddle the page boundaries.
    for i in range(30):
        make_task(project, f"x{i}", session_id=f"s{i % 7}", start=T0 + timedelta(minutes=i))
    seen, cursor = [], ""
    while True:
        page, cursor = listed(project, limit=3, cursor=cursor)
        seen += page
        if not cursor:
            break
    assert seen == ["s1", "s0", "s6", "s5", "s4", "s3", "s2"]  # by last turn, newest first
    rows, _ = sessions.session_list(project=project, filters=TaskFilters(), limit=2)
    assert [(r.session_id, r.turns, r.first_started) for r in rows] == [
        ("s1", 5, T0 + timedelta(minutes=1)), ("s0", 5, T0)]


def test_the_newest_first_walk_reads_on_past_a_long_session(project):
    from ingest.models import Task

    for i in range(5):
        make_task(project, f"old{i}", session_id="old", start=T0 + timedelta(seconds=i))
    Task.objects.bulk_create([  # one session of 230 turns, all newer: more than one chunk of the walk
        Task(project=project, task_id=f"big{i}", name="chat", session_id="big", started_at=T0 + timedelta(minutes=1, seconds=i),
             ended_at=T0 + timedelta(minutes=1, seconds=i + 1), duration_ms=1000.0, status="ok", reported=True,
             last_event_at=T0) for i in range(230)])
    first, cursor = listed(project, limit=1)
    second, cursor = listed(project, limit=1, cursor=cursor)
    assert (first, second, cursor) == (["big"], ["old"], None)


def test_filters_as_elsewhere_and_no_other_project(project, sessions_data):
    assert listed(project, filters=TaskFilters(release="v2"))[0] == ["s-c"]
    # a time range keeps the turns inside it
    rows, _ = sessions.session_list(project=project, filters=TaskFilters(until=T0 + timedelta(minutes=2)))
    assert [(r.session_id, r.turns) for r in rows] == [("s-a", 2)]
    rows, _ = sessions.session_list(project=project, filters=TaskFilters(), sort="-turns")
    assert rows[0].turns == 3 and rows[0].findings == 1 and rows[0].wasted_ms == 0.0  # no analysis row


def test_a_session_one_row_per_turn_with_its_findings(project, sessions_data):
    turns = sessions.session_detail(project=project, session_id="s-a")
    assert [(t.number, t.task.task_id, t.waited_ms) for t in turns] == [(1, "t0", 1000.0), (2, "t1", 4000.0),
                                                                          (3, "t2", 1000.0)]
    assert [f.kind for f in turns[1].findings] == ["serial_gap"]
    assert sessions.session_detail(project=project, session_id="nope") == []


def test_api_bad_sort_and_unknown_session(project, sessions_data, read_key, other_keys):
    client = Client()
    read = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}
    r = client.get("/api/v1/sessions", {"sort": "name"}, **read)
    assert r.status_code == 400 and "sort" in r.json()["error"]
    r = client.get("/api/v1/sessions", {"cursor": "garbage!"}, **read)
    assert r.status_code == 400 and "cursor" in r.json()["error"]
    assert client.get("/api/v1/sessions/nope", **read).status_code == 404
    theirs = client.get("/api/v1/sessions/s-a", HTTP_AUTHORIZATION=f"Bearer {other_keys['read']}").json()
    assert [t["task"]["task_id"] for t in theirs["turns"]] == ["theirs"]


@pytest.fixture
def browser_client(project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client


def test_pages_escape_a_hostile_session_id(project, browser_client):
    hostile = "<img src=x onerror=alert(1)>"
    make_task(project, "h1", session_id=hostile)
    body = browser_client.get("/sessions").content.decode()
    assert "<img src=x" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    response = browser_client.get(f"/sessions/{hostile}")
    assert response.status_code == 200
    assert "<img src=x" not in response.content.decode()


def test_session_pages(project, sessions_data, browser_client):
    body = browser_client.get("/sessions", {"sort": "-slowest_ms"}).content.decode()
    assert body.index("s-b") < body.index("s-a")
    body = browser_client.get("/sessions/s-a").content.decode()
    assert body.count('class="turn"') == 3 and "serial_gap" in body
    assert browser_client.get("/sessions/unknown").status_code == 404
    assert browser_client.get("/sessions", {"sort": "bogus"}).status_code == 400


def test_latency_and_overview_group_by_session(project, sessions_data, browser_client):
    rows = sessions.session_percentiles(project=project, filters=TaskFilters())
    assert [(r["group"], r["count"], r["max"]) for r in rows] == [("s-a", 3, 4000.0), ("s-b", 2, 8000.0),
                                                                   ("s-c", 1, 500.0)]
    turn_time = sessions.turn_time(project=project, filters=TaskFilters())
    assert (turn_time["sessions"], turn_time["turns"], turn_time["turns_per_session"]) == (3, 6, 2.0)
    assert turn_time["p50"] == pytest.approx(1000.0, rel=rollups.RELATIVE_ERROR * 1.001)  # the histogram's, as every page's
    page = browser_client.get("/latency", {"group_by": "session"})
    assert page.status_code == 200 and "Time per user turn, by session" in page.content.decode()
    charts = browser_client.get("/charts/latency.json", {"group_by": "session"}).json()
    # Every turn once in the histogram, and the ECDF of all turns beside each busiest session's.
    assert sum(charts["group_histogram"]["data"][0]["y"]) == 6
    assert [t["name"] for t in charts["group_ecdf"]["data"]] == ["all sessions", "s-a", "s-b", "s-c"]
    one = browser_client.get("/charts/latency.json", {"group_by": "session", "group": "s-b"}).json()
    assert sum(one["group_histogram"]["data"][0]["y"]) == 2  # that session's turns only
    assert [t["name"] for t in one["group_ecdf"]["data"]] == ["all sessions", "s-b"]
    highest = max(one["group_histogram"]["data"][0]["customdata"], key=lambda c: c[1])
    assert highest[0] <= 8000.0 < highest[1]  # s-b's slowest turn is in the last bar drawn
    assert "time per user turn" in browser_client.get("/").content.decode()
    found = browser_client.get("/charts/turn-time.json").json()
    assert found["sessions"] == 3 and found["text"] == {"sessions": "3", "turns_per_session": "2",
                                                        "p50": "≈1.02 s", "p95": "≈7.09 s", "p99": "≈7.9 s"}
    assert "±1.9 %" in found["approximate"]
    assert browser_client.get("/charts/turn-time.json", {"since": "yesterday"}).status_code == 400


def test_latency_by_session_of_a_project_without_sessions_is_empty_not_an_error(project, browser_client):
    # A project whose tasks carry no session id (OTLP without session attributes): the page and
    # the MCP tool grouped by session answered 500 (EmptyResultSet from `session_id IN ()`).
    make_task(project, "t1", duration_ms=1000.0)
    assert sessions.session_percentiles(project=project, filters=TaskFilters()) == []
    assert browser_client.get("/latency", {"group_by": "session"}).status_code == 200
    assert browser_client.get("/charts/latency.json", {"group_by": "session"}).status_code == 200
    answer = json.loads(mcp_tools.latency_percentiles(project=project, group_by="session"))
    assert answer["tasks"]["count"] == 1 and answer["groups"] == []
