"""The Instrumentation page and GET /api/v1/instrumentation beyond the recorded families
(tests/recorded/test_instrumentation_health.py): a read key sees its own project only, hostile
scope and service names are escaped, the window is bounded, a bad filter is a 400, the endpoint is in
the OpenAPI document, and a month of counters answers fast."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from analysis.dashboard.instrumentation import MAX_WINDOW, task_coverage
from ingest.instrumentation import FIELDS
from ingest.models import InstrumentationCount
from tests.analysis.factories import T0, insert_big_task, make_step, make_task

pytestmark = pytest.mark.django_db
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
XSS_SERVICE = "<script>window.pwned=1</script>"
XSS_SCOPE = '"><img src=x onerror=alert(1)>'


def otlp_json(*, service=XSS_SERVICE, scope=XSS_SCOPE, tool_args=None) -> bytes:
    attributes = [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                  {"key": "gen_ai.tool.name", "value": {"stringValue": "lookup"}}]
    if tool_args is not None:
        attributes.append({"key": "gen_ai.tool.call.arguments", "value": {"stringValue": tool_args}})
    spans = [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": f"eee19b7ec3c1b17{i}", "name": "lookup",
              "parentSpanId": "aaa19b7ec3c1b170", "attributes": attributes,
              "startTimeUnixNano": str(1_790_000_000_000_000_000 + i * 10**9),
              "endTimeUnixNano": str(1_790_000_000_100_000_000 + i * 10**9)} for i in range(3)]
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"scope": {"name": scope, "version": "1<b>"}, "spans": spans}]}]}).encode()


@pytest.fixture
def member(client, project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client.force_login(user)
    return client


def post(client, key, body):
    r = client.post("/v1/traces", data=body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 200, r.content[:300]


def api(client, key, **params):
    return client.get("/api/v1/instrumentation", params, HTTP_AUTHORIZATION=f"Bearer {key}")


def test_hostile_names_are_escaped_on_the_page_and_raw_in_the_api(member, project, ingest_key, read_key):
    post(member, ingest_key, otlp_json())
    page = member.get("/instrumentation", {"project": project.name}).content.decode()
    assert XSS_SERVICE not in page and XSS_SCOPE not in page and "<b>" not in page
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page
    [service] = api(member, read_key).json()["services"]
    assert (service["service"], service["scopes"][0]["scope"]) == (XSS_SERVICE, {"name": XSS_SCOPE, "version": "1<b>"})
    # An unknown tracer is the agent's own: the fix is to set the attributes on its spans.
    assert service["scopes"][0]["library"]["key"] == "own"
    repeated = next(c for c in service["scopes"][0]["checks"] if c["check"] == "repeated_tool_call")
    assert repeated["status"] == "blind" and repeated["fixes"][0]["switch"].startswith("gen_ai.tool.call.arguments")


def test_a_key_reads_its_own_project_only(client, project, other_project, ingest_key, read_key, other_keys):
    post(client, ingest_key, otlp_json(service="acme-agent"))
    post(client, other_keys["ingest"], otlp_json(service="globex-agent", tool_args='{"q": 1}'))
    assert [s["service"] for s in api(client, read_key).json()["services"]] == ["acme-agent"]
    assert [s["service"] for s in api(client, other_keys["read"]).json()["services"]] == ["globex-agent"]
    assert api(client, read_key, project=other_project.name).status_code == 404
    assert api(client, ingest_key).status_code == 403
    assert client.get("/api/v1/instrumentation").status_code in (401, 403)


def test_a_bad_filter_is_a_400_naming_it(member, project, ingest_key, read_key):
    post(member, ingest_key, otlp_json(service="svc"))
    assert api(member, read_key, since="yesterday").status_code == 400
    assert "since" in api(member, read_key, since="yesterday").json()["error"]
    page = member.get("/instrumentation", {"project": project.name, "range": "2y"})
    assert page.status_code == 400 and b"range: must be one of" in page.content


def test_the_window_is_the_data_s_last_week_and_never_more_than_a_month(client, project, ingest_key, read_key):
    post(client, ingest_key, otlp_json(service="svc"))
    body = api(client, read_key).json()
    hour = InstrumentationCount.objects.get(project=project).hour
    assert body["until"].startswith((hour + timedelta(hours=1)).strftime("%Y-%m-%dT%H"))
    assert [s["spans"] for s in body["services"]] == [3]
    since = (hour - timedelta(days=90)).isoformat()
    clipped = api(client, read_key, since=since, until=(hour + timedelta(hours=1)).isoformat()).json()
    assert clipped["clipped"] is True and [s["spans"] for s in clipped["services"]] == [3]
    assert api(client, read_key, until=hour.isoformat()).json()["services"] == []  # before the data
    assert MAX_WINDOW == timedelta(days=31)


def test_the_endpoint_is_in_the_openapi_document(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/v1/instrumentation"]["get"]
    assert operation["operationId"] == "instrumentation"
    assert {p["name"] for p in operation["parameters"]} >= {"project", "since", "until", "release", "environment"}


def test_a_native_task_without_arguments_says_repeats_were_not_checked(member, project, ingest_key):
    events = [{"type": "task", "task_id": "n1", "name": "native", "started_at": "2026-11-01T10:00:00Z",
               "ended_at": "2026-11-01T10:00:03Z"}] + [
        {"type": "step", "step_id": f"s{i}", "task_id": "n1", "kind": "tool", "tool_name": "lookup",
         "started_at": f"2026-11-01T10:00:0{i}Z", "ended_at": f"2026-11-01T10:00:0{i}.5Z"} for i in range(2)]
    r = member.post("/api/v1/ingest", data={"events": events}, content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert r.json()["accepted"] == 3
    page = member.get("/tasks/n1", {"project": project.name}).content.decode()
    assert "Repeated calls not checked" in page and "<code>tool_args</code>" in page


def test_a_month_of_counters_and_a_50000_step_task_answer_fast(member, project, read_key):
    """31 days × 24 hours × 12 services × 2 scopes × 5 kinds = 178,560 counter rows: what a month of
    a busy project holds, whatever the number of steps (each hour of each scope is one row per kind).
    The API reads them in well under a second; the task page's checks of a 50,001-step task too."""
    columns = ", ".join(FIELDS)
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO ingest_instrumentationcount (project_id, hour, service, scope_name, scope_version, sdk_name,"
            f" sdk_language, sdk_version, release, environment, kind, spans, {columns})"
            " SELECT %s, %s::timestamptz + make_interval(hours => h), 'svc-' || s, 'openinference.instrumentation.x' || c,"
            " '1.0', 'opentelemetry', 'python', '1.45.2', 'v1', 'prod', k, 1000, "
            + ", ".join("500" for _ in FIELDS)
            + " FROM generate_series(0, 31 * 24 - 1) h, generate_series(1, 12) s, generate_series(1, 2) c,"
              " unnest(ARRAY['llm', 'tool', 'agent', 'framework', 'other']) k",
            [project.pk, T0])
    task = insert_big_task(project, "big", turns=500, per_turn=100)
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        body = api(member, read_key, since=T0.isoformat(), until=(T0 + timedelta(days=31)).isoformat()).json()
        timings.append(time.perf_counter() - started)
    assert len(body["services"]) == 12 and body["services"][0]["spans"] == 31 * 24 * 2 * 5 * 1000
    started = time.perf_counter()
    page = member.get("/instrumentation", {"project": project.name, "since": T0.isoformat(),
                                           "until": (T0 + timedelta(days=31)).isoformat()})
    page_s = time.perf_counter() - started
    assert page.status_code == 200 and page.content.count(b'class="instr-scope"') == 24
    started = time.perf_counter()
    notes = task_coverage(task=task)
    coverage_s = time.perf_counter() - started
    assert {n.check for n in notes} >= {"repeated_tool_call", "parallelizable_calls", "hardware"}
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "instrumentation-timing.json").write_text(json.dumps(
        {"counter_rows": 178_560, "api_seconds": timings, "page_seconds": page_s, "task_steps": 50_001,
         "task_coverage_seconds": coverage_s}))
    assert min(timings) < 1.5 and page_s < 2.0 and coverage_s < 1.5, (timings, page_s, coverage_s)


def test_a_task_whose_calls_carry_everything_has_no_notes(project):
    task = make_task(project, "full", start=T0)
    make_step(task, "plan", kind="llm", model="m", ttft_ms=50.0, device="vllm-1:8000", tool_call_ids=["c1", "c2"])
    for i, cid in enumerate(("c1", "c2")):
        make_step(task, cid, kind="tool", offset_ms=100.0 * (i + 1), tool_name="lookup", tool_args={"i": i},
                  tool_result="ok", tool_call_id=cid)
    assert task_coverage(task=task) == []


@pytest.mark.parametrize(("scope", "language", "shaped", "key"), [
    ("ai", "nodejs", 0.0, "vercel-ai"),              # AI SDK up to 6: its own scope
    ("support-agent", "", 1.0, "vercel-ai"),         # AI SDK 7: the application's tracer, its spans' shape
    ("support-agent", "nodejs", 0.6, "vercel-ai"),
    ("support-agent", "python", 1.0, "own"),         # the shape, but not a language the SDK runs in
    ("support-agent", "nodejs", 0.2, "own"),         # a Node app's own spans, a few carrying a duration
    ("openinference.instrumentation.agno", "", 1.0, "openinference"),  # a named library stays itself
])
def test_the_vercel_ai_sdk_is_told_by_its_scope_or_by_what_its_spans_carry(scope, language, shaped, key):
    from analysis.dashboard.libraries import library_of

    assert library_of(scope, "1.0.0", sdk_language=language, ai_sdk_share=shaped).key == key
