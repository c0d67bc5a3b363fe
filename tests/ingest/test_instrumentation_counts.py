"""Ingest counts, per hour, service, instrumentation scope and step kind, the spans and the fields
they carried (ingest/instrumentation.py): the counts agree with the steps stored, whatever the
encoding or ingest path, and a redacted OpenInference value is no content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.db.models import Count, Q, Sum

from ingest import conventions
from ingest.models import InstrumentationCount, Step
from ingest.services import data_delete

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"


def post_traces(client, key, body: bytes, content_type="application/x-protobuf"):
    r = client.post("/v1/traces", data=body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 200, r.content[:300]


def replay(client, key, family: str) -> None:
    for body in sorted((FIXTURES / family).glob("*.pb")):
        post_traces(client, key, body.read_bytes())


def totals(project, **where) -> dict[str, int]:
    fields = ["spans", "model", "tokens", "ttft", "call_ids", "device", "tool_name", "tool_args", "tool_result",
              "tool_call_id", "session", "args_redacted", "result_redacted", "responses"]
    return InstrumentationCount.objects.filter(project=project, **where).aggregate(**{f: Sum(f) for f in fields})


def test_counts_agree_with_the_steps_stored(client, project, ingest_key):
    replay(client, ingest_key, "langgraph_openllmetry")
    for kind in ("llm", "tool", "framework", "agent"):
        counted = totals(project, kind=kind)
        stored = Step.objects.filter(project=project, kind=kind).aggregate(
            spans=Count("id"), model=Count("id", filter=~Q(model="")),
            tokens=Count("id", filter=Q(input_tokens__isnull=False) | Q(output_tokens__isnull=False)),
            ttft=Count("id", filter=Q(ttft_ms__isnull=False)), call_ids=Count("id", filter=~Q(tool_call_ids=[])),
            device=Count("id", filter=~Q(device="")), tool_name=Count("id", filter=~Q(tool_name="")),
            tool_args=Count("id", filter=Q(tool_args__isnull=False)), tool_result=Count("id", filter=~Q(tool_result="")),
            tool_call_id=Count("id", filter=~Q(tool_call_id="")))
        assert {k: counted[k] for k in stored} == stored, kind
    row = InstrumentationCount.objects.filter(project=project).first()
    assert (row.service, row.scope_name, row.scope_version) == (
        "langgraph-openllmetry-support", "opentelemetry.instrumentation.langchain", "0.62.4")
    assert (row.sdk_name, row.sdk_language, row.sdk_version) == ("opentelemetry", "python", "1.45.2")
    assert (row.release, row.environment) == ("1.0.0", "fixtures")
    assert row.hour.minute == row.hour.second == 0


def test_each_scope_of_a_service_counts_apart(client, project, ingest_key):
    # openai-v2: the instrumentation's chat spans (one per model response), and the agent's own
    # hand-made spans (its root and one per tool call), as many as the recorded runs made.
    replay(client, ingest_key, "openai_v2")
    runs = [json.loads(line) for line in (FIXTURES / "openai_v2" / "runs.jsonl").read_text().splitlines()]
    responses = sum(len(run["llm_turns"]) for run in runs)
    tool_calls = sum(len(run["tool_calls"]) for run in runs)
    scopes = dict(InstrumentationCount.objects.filter(project=project).values_list("scope_name")
                  .annotate(n=Sum("spans")))
    assert scopes == {"opentelemetry.util.genai.handler": responses, "orders_agent": len(runs) + tool_calls}
    assert totals(project, scope_name="orders_agent", kind="tool")["tool_args"] == tool_calls
    assert totals(project, scope_name="opentelemetry.util.genai.handler")["responses"] == responses


def test_a_resent_batch_adds_to_the_counts_and_leaves_the_shares(client, project, ingest_key):
    body = sorted((FIXTURES / "pydantic_ai").glob("*.pb"))[0].read_bytes()
    post_traces(client, ingest_key, body)
    once = totals(project, kind="tool")
    post_traces(client, ingest_key, body)
    twice = totals(project, kind="tool")
    assert twice["spans"] == 2 * once["spans"] and twice["tool_args"] == 2 * once["tool_args"]


def test_otlp_json_names_its_scope_and_the_native_api_has_none(client, project, ingest_key):
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "lookup",
            "startTimeUnixNano": "1790000000000000000", "endTimeUnixNano": "1790000000100000000",
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                           {"key": "gen_ai.tool.name", "value": {"stringValue": "lookup"}}]}
    body = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "<svc>"}}]},
        "scopeSpans": [{"scope": {"name": "my.tracer", "version": "2.0"}, "spans": [span]}]}]}
    post_traces(client, ingest_key, json.dumps(body).encode(), content_type="application/json")
    native = {"events": [{"type": "step", "step_id": "s1", "task_id": "t1", "kind": "tool", "tool_name": "x",
                          "tool_args": {"a": 1}, "started_at": "2026-11-01T10:00:00Z",
                          "ended_at": "2026-11-01T10:00:01Z"}]}
    r = client.post("/api/v1/ingest", data=native, content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert r.status_code == 200 and r.json()["accepted"] == 1
    rows = {(r.service, r.scope_name, r.scope_version, r.tool_name, r.tool_args)
            for r in InstrumentationCount.objects.filter(project=project)}
    assert rows == {("<svc>", "my.tracer", "2.0", 1, 0), ("", "", "", 1, 1)}


def test_a_redacted_openinference_value_is_no_argument_and_no_result():
    # OPENINFERENCE_HIDE_INPUTS / _OUTPUTS put "__REDACTED__" in input.value / output.value; the
    # TOOL span still has tool.parameters (the tool's schema), which must not stand in for them.
    attributes = {"openinference.span.kind": "TOOL", "tool.name": "get_shipping_status",
                  "input.value": "__REDACTED__", "output.value": "__REDACTED__",
                  "tool.parameters": '{"properties": {"order_id": {"type": "string"}}}'}
    facts = conventions.span_facts(attributes)
    assert (facts.tool_name, facts.tool_args, facts.tool_result) == ("get_shipping_status", None, None)
    assert {"input.value", "output.value"}.isdisjoint(facts.used)  # kept on the step, as sent


def test_deleting_a_projects_data_deletes_its_counts(client, project, other_project, ingest_key, other_keys):
    replay(client, ingest_key, "openai_v2")
    post_traces(client, other_keys["ingest"], sorted((FIXTURES / "openai_v2").glob("*.pb"))[0].read_bytes())
    data_delete(project=project)
    assert not InstrumentationCount.objects.filter(project=project).exists()
    assert InstrumentationCount.objects.filter(project=other_project).exists()
