"""POST /v1/traces over real HTTP: proto3 JSON per the OTLP spec, partial success, the error
statuses and encodings OTLP clients rely on, and tenant isolation."""

from __future__ import annotations

import gzip
import json

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ingest.models import Step, Task
from tests.ingest.fixtures.otlp import MS, T0, span, trace_request

TRACE = "5b8efff798038103d269b633813fc60c"
PB = "application/x-protobuf"


@pytest.fixture
def send(live_server):
    def _send(key, body: bytes, *, content_type="application/json", path="/v1/traces", headers=None):
        h = {"Content-Type": content_type, **({"Authorization": f"Bearer {key}"} if key else {}),
             **(headers or {})}
        return requests.post(f"{live_server.url}{path}", data=body, headers=h, timeout=30)
    return _send


def json_span(span_id, *, parent="", name="step", start=0, end=100, attributes=(), **extra):
    return {"traceId": TRACE, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": str(T0 + start * MS), "endTimeUnixNano": str(T0 + end * MS),
            "attributes": list(attributes), **extra}


def attr(key, **value):
    return {"key": key, "value": value}


def json_body(spans, resource_attributes=()):
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": list(resource_attributes)},
        "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}]}).encode()


def test_proto3_json_per_spec(send, project, ingest_key):
    spans = [
        json_span("eee19b7ec3c1b174", name="invoke_agent", end=900,
                  attributes=[attr("gen_ai.operation.name", stringValue="invoke_agent")],
                  status={"code": 1}, droppedAttributesCount=0, aFieldFromTheFuture={"x": 1}),
        # 64-bit integers as numbers instead of strings, upper-case hex ids, int enums.
        {**json_span("EEE19B7EC3C1B175", parent="eee19b7ec3c1b174", name="chat", start=10, end=500,
                     attributes=[attr("gen_ai.operation.name", stringValue="chat"),
                                 attr("gen_ai.request.model", stringValue="gpt-4o"),
                                 attr("gen_ai.usage.input_tokens", intValue="1200"),
                                 attr("gen_ai.usage.output_tokens", intValue=77),
                                 attr("gen_ai.response.time_to_first_chunk", doubleValue=0.25),
                                 attr("gen_ai.response.finish_reasons",
                                      arrayValue={"values": [{"stringValue": "tool_calls"}]})]),
         "startTimeUnixNano": T0 + 10 * MS, "endTimeUnixNano": T0 + 500 * MS, "kind": 3},
        json_span("eee19b7ec3c1b176", parent="eee19b7ec3c1b174", name="execute_tool", start=510, end=800,
                  attributes=[attr("gen_ai.operation.name", stringValue="execute_tool"),
                              attr("gen_ai.tool.name", stringValue="search"),
                              attr("gen_ai.tool.call.arguments", kvlistValue={"values": [
                                  {"key": "q", "value": {"stringValue": "refund policy"}},
                                  {"key": "k", "value": {"intValue": "3"}}]}),
                              attr("payload", bytesValue="AAEC")],
                  status={"code": 2, "message": "search backend 502"}),
    ]
    r = send(ingest_key, json_body(spans, [attr("service.version", stringValue="v7"),
                                           attr("deployment.environment", stringValue="staging")]))
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == {}
    task = Task.objects.get(project=project, task_id=TRACE)
    assert (task.name, task.release, task.environment, task.step_count) == ("invoke_agent", "v7", "staging", 3)
    steps = {s.step_id: s for s in Step.objects.filter(project=project)}
    chat, tool = steps["eee19b7ec3c1b175"], steps["eee19b7ec3c1b176"]
    assert (chat.kind, chat.model, chat.input_tokens, chat.output_tokens, chat.ttft_ms) == (
        "llm", "gpt-4o", 1200, 77, 250.0)
    assert chat.parent_step_id == "eee19b7ec3c1b174"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert (tool.kind, tool.tool_name, tool.tool_args) == ("tool", "search", {"q": "refund policy", "k": 3})
    assert (tool.status, tool.error) == ("error", "search backend 502")
    assert tool.attributes["payload"] == "AAEC"


def test_exception_event_becomes_the_error(send, project, ingest_key):
    failing = json_span("eee19b7ec3c1b174", status={"code": 2}, events=[{
        "timeUnixNano": str(T0 + 50 * MS), "name": "exception", "attributes": [
            attr("exception.type", stringValue="TimeoutError"),
            attr("exception.message", stringValue="tool took > 30 s")]}])
    assert send(ingest_key, json_body([failing])).status_code == 200
    step = Step.objects.get(project=project)
    assert (step.status, step.error) == ("error", "TimeoutError: tool took > 30 s")
    assert step.events[0]["name"] == "exception"
    assert Task.objects.get(project=project).status == "error"


def test_invalid_spans_are_reported_in_partial_success_and_the_rest_stored(send, project, ingest_key):
    spans = [
        json_span("eee19b7ec3c1b174", name="root", end=1000),
        json_span("eee19b7ec3c1b175", parent="eee19b7ec3c1b174", start=500, end=100),  # ends before start
        {**json_span("eee19b7ec3c1b176"), "traceId": "not-hex"},
        {**json_span("eee19b7ec3c1b177"), "startTimeUnixNano": "0"},
        {**json_span("eee19b7ec3c1b178"), "startTimeUnixNano": str(30 * 365 * 86400 * 10**9)},  # 1999
        {**json_span("eee19b7ec3c1b179"), "spanId": "00000000000000000"[:16]},
        {**json_span("eee19b7ec3c1b17a"), "startTimeUnixNano": "yesterday"},
        json_span("eee19b7ec3c1b17b", parent="eee19b7ec3c1b174", name="ok child", start=10, end=20),
    ]
    r = send(ingest_key, json_body(spans))
    assert r.status_code == 200
    partial = r.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "6"
    message = partial["errorMessage"]
    for index, problem in [(1, "before started_at"), (2, "traceId"), (3, "startTimeUnixNano"),
                           (4, "outside 2000"), (5, "all zeros"), (6, "startTimeUnixNano")]:
        assert f"spans[{index}]: " in message and problem in message
    assert set(Step.objects.filter(project=project).values_list("name", flat=True)) == {"root", "ok child"}


def test_partial_success_in_protobuf(send, project, ingest_key):
    request = trace_request([span(1, 1, name="root", end_ms=50), span(1, 2, parent=1, start_ms=60, end_ms=10),
                             span(1, 3, parent=1, start_ms=1, end_ms=2)])
    r = send(ingest_key, request.SerializeToString(), content_type=PB)
    assert r.status_code == 200 and r.headers["Content-Type"] == PB
    response = ExportTraceServiceResponse.FromString(r.content)
    assert response.partial_success.rejected_spans == 1
    assert "spans[1]: span: ended_at is before started_at" in response.partial_success.error_message
    assert Step.objects.filter(project=project).count() == 2


def test_full_success_in_protobuf_has_no_partial_success(send, ingest_key):
    r = send(ingest_key, trace_request([span(1, 1)]).SerializeToString(), content_type=PB)
    assert r.status_code == 200
    assert not ExportTraceServiceResponse.FromString(r.content).HasField("partial_success")


@pytest.mark.parametrize("body,content_type", [(b"", PB), (b"", "application/json"), (b"{}", "application/json"),
                                               (b'{"resourceSpans": []}', "application/json; charset=utf-8")])
def test_empty_request_is_success(send, project, ingest_key, body, content_type):
    r = send(ingest_key, body, content_type=content_type)
    assert r.status_code == 200, r.text
    assert not Step.objects.exists()


def test_gzip_json_body(send, project, ingest_key):
    body = gzip.compress(json_body([json_span("eee19b7ec3c1b174")]))
    r = send(ingest_key, body, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200
    assert Step.objects.filter(project=project).count() == 1


def test_resent_batch_creates_no_duplicates(send, project, ingest_key):
    body = trace_request([span(1, 1), span(1, 2, parent=1)]).SerializeToString()
    for _ in range(3):
        assert send(ingest_key, body, content_type=PB).status_code == 200
    assert Step.objects.filter(project=project).count() == 2
    assert Task.objects.get(project=project).step_count == 2


def test_undecodable_bodies_are_400_saying_what(send, ingest_key):
    r = send(ingest_key, b"\xff\xff\xff garbage", content_type=PB)
    assert r.status_code == 400 and r.headers["Content-Type"] == PB
    assert b"not a valid ExportTraceServiceRequest" in r.content
    r = send(ingest_key, json_body([]), content_type=PB)
    assert r.status_code == 400 and b"looks like JSON" in r.content
    r = send(ingest_key, b'{"resourceSpans": [ {,} ]}')
    assert r.status_code == 400
    assert r.json()["code"] == 3 and "line 1 column" in r.json()["message"]
    r = send(ingest_key, b'{"resourceSpans": {"not": "a list"}}')
    assert r.status_code == 400 and "resourceSpans: must be an array" in r.json()["message"]


def test_wrong_content_type_is_415(send, ingest_key):
    r = send(ingest_key, b"<xml/>", content_type="text/xml")
    assert r.status_code == 415
    assert "application/x-protobuf" in r.json()["message"]


def test_unknown_content_encoding_is_415(send, ingest_key):
    r = send(ingest_key, b"{}", headers={"Content-Encoding": "br"})
    assert r.status_code == 415


def test_missing_and_unknown_keys_are_401_in_the_request_encoding(send, project):
    r = send(None, b"{}")
    assert r.status_code == 401 and r.json()["code"] == 16
    r = send("ao_nothere_secret", b"", content_type=PB)
    assert r.status_code == 401 and r.headers["Content-Type"] == PB


def test_a_read_key_cannot_write(send, project, read_key):
    r = send(read_key, trace_request([span(1, 1)]).SerializeToString(), content_type=PB)
    assert r.status_code == 403
    assert not Step.objects.exists()


def test_body_over_the_limit_after_decompression_is_413(send, ingest_key):
    from ingest import limits
    bomb = gzip.compress(b"\x00" * (limits.MAX_BODY_BYTES + 1024))
    r = send(ingest_key, bomb, content_type=PB, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413
    assert str(limits.MAX_BODY_BYTES).encode() in r.content


def test_database_down_is_503_with_retry_after(send, ingest_key, monkeypatch):
    from django.db import OperationalError

    from ingest import otlp_api

    def down(**kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(otlp_api, "batch_store", down)
    r = send(ingest_key, trace_request([span(1, 1)]).SerializeToString(), content_type=PB)
    assert r.status_code == 503
    assert r.headers["Retry-After"]


def test_key_of_one_project_never_writes_another(send, live_server, project, other_project, ingest_key,
                                                  other_keys, read_key):
    send(other_keys["ingest"], trace_request([span(7, 1, name="theirs")]).SerializeToString(), content_type=PB)
    send(ingest_key, trace_request([span(8, 1, name="mine")]).SerializeToString(), content_type=PB)
    theirs, mine = (7).to_bytes(16, "big").hex(), (8).to_bytes(16, "big").hex()
    assert list(Task.objects.filter(project=project).values_list("task_id", flat=True)) == [mine]
    assert list(Task.objects.filter(project=other_project).values_list("task_id", flat=True)) == [theirs]
    get = requests.get(f"{live_server.url}/api/v1/tasks/{theirs}",
                       headers={"Authorization": f"Bearer {read_key}"}, timeout=30)
    assert get.status_code == 404
    # The same trace id from two projects stays two tasks.
    send(other_keys["ingest"], trace_request([span(8, 1, name="same id")]).SerializeToString(),
         content_type=PB)
    assert Task.objects.get(project=project, task_id=mine).name == "mine"
    assert Task.objects.get(project=other_project, task_id=mine).name == "same id"


def test_endpoints_are_in_the_openapi_schema(live_server, read_key):
    r = requests.get(f"{live_server.url}/api/schema/?format=json",
                     headers={"Authorization": f"Bearer {read_key}"}, timeout=30)
    assert r.status_code == 200
    paths = r.json()["paths"]
    assert "application/x-protobuf" in paths["/v1/traces"]["post"]["requestBody"]["content"]
    assert "/v1/metrics" in paths
