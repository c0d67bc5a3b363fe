"""Hostile bodies: random, truncated and mutated protobuf and JSON never raise anything but
OtlpDecodeError from the decoder, and never answer anything but 200/400 over HTTP."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import otlp
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


def decodes_cleanly(decode, body: bytes, media: str) -> None:
    try:
        decoded = decode(body, media=media)
    except otlp.OtlpDecodeError as exc:
        assert str(exc)
        return
    assert isinstance(decoded.batch, Batch)
    assert decoded.rejected >= 0


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


@pytest.fixture
def client():
    return Client()


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
