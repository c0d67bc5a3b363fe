"""Hostile bodies: random, truncated and mutated protobuf and JSON are refused whole with an
OtlpDecodeError that says where (over HTTP: 400), or decoded: then every span is either stored or
rejected with its place and the reason, and a malformed span never costs the good spans beside it
(over HTTP: stored, and partialSuccess names only the bad ones)."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from django.test import Client
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ingest import otlp
from ingest.models import Step
from ingest.records import Batch
from tests.ingest.fixtures.otlp import gauge_request, load_json, span, trace_request

MEDIA = st.sampled_from([otlp.PROTOBUF, otlp.JSON])

VALID_TRACE = trace_request(
    [span(1, 1, name="invoke_agent", end_ms=900, attributes={"gen_ai.operation.name": "invoke_agent"}),
     span(1, 2, parent=1, name="chat", attributes={"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 9,
                                                   "nested": {"a": [1, 2.5, True, b"\x00"]}},
          events=[("gen_ai.content.completion.chunk", 20, {"i": 1})], status_code=2, message="boom")],
    resource={"service.version": "v1"}).SerializeToString()
VALID_METRICS = gauge_request([("hw.gpu.utilization", {"hw.id": "gpu-0"}, 0.5)]).SerializeToString()
VALID_JSON = json.dumps(load_json("openllmetry_traceloop.json")).encode()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
SPAN_KEYS = ["traceId", "spanId", "parentSpanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano",
             "attributes", "events", "status", "links"]
hostile_spans = st.dictionaries(st.sampled_from(SPAN_KEYS), json_values, max_size=8)


# Where a whole body went wrong, and where one span or data point did: "<place>: <reason>".
WHOLE = re.compile(r"^(body|resource(Spans|Metrics)\[\d+\][\w.\[\]]*): \S")
ONE = re.compile(r"^resource(Spans|Metrics)\[\d+\]\.scope(Spans|Metrics)\[\d+\]"
                 r"\.(spans\[\d+\]|metrics\[\d+\](\.dataPoints\[\d+\])?): \S")


def spans_in(body: bytes, media: str) -> int:
    """The spans a (decodable) body holds, counted by protobuf or json, not by the decoder."""
    if media == otlp.PROTOBUF:
        request = ExportTraceServiceRequest.FromString(body)
        return sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
    payload = json.loads(body) if body.strip() else {}
    return sum(len(scope.get("spans") or []) for rs in payload.get("resourceSpans") or []
               for scope in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []))


def decodes_cleanly(decode, body: bytes, media: str) -> otlp.Decoded | None:
    """Refused whole, saying where; or every span accounted for: a step, or a rejection that
    names its place and the reason (the first MAX_REPORTED_PROBLEMS of them, then a count)."""
    try:
        decoded = decode(body, media=media)
    except otlp.OtlpDecodeError as exc:
        assert WHOLE.match(str(exc)), str(exc)
        return None
    assert isinstance(decoded.batch, Batch)
    assert len(decoded.problems) == min(decoded.rejected, otlp.MAX_REPORTED_PROBLEMS), decoded
    assert all(ONE.match(problem) for problem in decoded.problems), decoded.problems
    assert bool(decoded.error_message()) == bool(decoded.rejected)
    if decode is otlp.decode_traces:
        assert len(decoded.batch.steps) + decoded.rejected == spans_in(body, media), decoded
    return decoded


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300), media=MEDIA)
def test_random_bytes(body, media):
    decodes_cleanly(otlp.decode_traces, body, media)
    decodes_cleanly(otlp.decode_metrics, body, media)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_truncated_and_mutated_protobuf(data):
    for valid, decode in ((VALID_TRACE, otlp.decode_traces), (VALID_METRICS, otlp.decode_metrics)):
        cut = data.draw(st.integers(min_value=0, max_value=len(valid)))
        decodes_cleanly(decode, valid[:cut], otlp.PROTOBUF)
        position = data.draw(st.integers(min_value=0, max_value=len(valid) - 1))
        byte = data.draw(st.integers(min_value=0, max_value=255))
        decodes_cleanly(decode, valid[:position] + bytes([byte]) + valid[position + 1:], otlp.PROTOBUF)


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(VALID_JSON)))
def test_truncated_json(cut):
    decodes_cleanly(otlp.decode_traces, VALID_JSON[:cut], otlp.JSON)


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(hostile_spans, max_size=4), resource=json_values)
def test_hostile_json_structure(spans, resource):
    body = json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}).encode()
    decodes_cleanly(otlp.decode_traces, body, otlp.JSON)
    metrics = json.dumps({"resourceMetrics": [{"resource": resource, "scopeMetrics": [
        {"metrics": [{"name": "hw.power", "gauge": {"dataPoints": spans}}]}]}]}).encode()
    decodes_cleanly(otlp.decode_metrics, metrics, otlp.JSON)


_trace_ids = itertools.count(1)


def good_spans() -> tuple[str, list[dict]]:
    """A root and a chat span of a fresh trace, as OTLP/JSON (hex ids): (trace id, spans)."""
    trace = next(_trace_ids) + 0xA9E0 << 64
    request = trace_request([span(trace, 1, name="invoke_agent", end_ms=900,
                                  attributes={"gen_ai.operation.name": "invoke_agent"}),
                             span(trace, 2, parent=1, name="chat", start_ms=10, end_ms=800,
                                  attributes={"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 9})])
    spans = []
    for message in request.resource_spans[0].scope_spans[0].spans:
        one = json_format.MessageToDict(message)
        one.update(traceId=message.trace_id.hex(), spanId=message.span_id.hex())
        if message.parent_span_id:
            one["parentSpanId"] = message.parent_span_id.hex()
        spans.append(one)
    return f"{trace:032x}", spans


def beside(good: list[dict], hostile: list[dict], at: int) -> tuple[list[dict], set[int]]:
    """The hostile spans with the good ones inserted at `at`: (all, the good ones' positions)."""
    at = min(at, len(hostile))
    return hostile[:at] + good + hostile[at:], set(range(at, at + len(good)))


def positions(problems: list[str]) -> set[int]:
    """The span positions rejections name."""
    return {int(n) for p in problems for n in re.findall(r"\.spans\[(\d+)\]:", p)}


@settings(max_examples=300, deadline=None)
@given(hostile=st.lists(hostile_spans, min_size=1, max_size=4), at=st.integers(min_value=0, max_value=4))
def test_malformed_spans_are_rejected_by_name_and_the_good_ones_beside_them_decode(hostile, at):
    trace, good = good_spans()
    spans, good_at = beside(good, hostile, at)
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    decoded = decodes_cleanly(otlp.decode_traces, body, otlp.JSON)
    assert decoded is not None  # one bad span never refuses the whole body
    assert {(s.task_id, s.step_id) for s in decoded.batch.steps} >= {(trace, g["spanId"]) for g in good}
    assert not positions(decoded.problems) & good_at, decoded.problems


@pytest.fixture
def client():
    return Client()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=st.lists(hostile_spans, min_size=1, max_size=3), at=st.integers(min_value=0, max_value=3))
def test_over_http_the_good_spans_are_stored_and_partial_success_names_only_the_bad(client, ingest_key,
                                                                                   hostile, at):
    trace, good = good_spans()
    spans, good_at = beside(good, hostile, at)
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    response = client.post("/v1/traces", data=body, content_type=otlp.JSON, HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert response.status_code == 200, response.content
    stored = set(Step.objects.filter(task__task_id=trace).values_list("step_id", flat=True))
    assert stored == {g["spanId"] for g in good}
    partial = response.json().get("partialSuccess", {})
    rejected = int(partial.get("rejectedSpans", 0))
    assert rejected <= len(hostile)
    if rejected:
        named = positions([partial["errorMessage"]])
        assert named and not named & good_at, partial


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_http_answers_only_200_or_400(client, ingest_key, data):
    media = data.draw(MEDIA)
    if media == otlp.PROTOBUF:
        cut = data.draw(st.integers(min_value=0, max_value=len(VALID_TRACE)))
        body = VALID_TRACE[:cut] + data.draw(st.binary(max_size=20))
    else:
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": data.draw(st.lists(hostile_spans, max_size=3))}]}]}).encode()
    response = client.post("/v1/traces", data=body, content_type=media, CONTENT_TYPE=media,
                           HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert response.status_code in (200, 400), response.content
    assert response["Content-Type"] == media
