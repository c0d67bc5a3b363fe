"""The attribute caps of native ingest hold for OTLP too: attributes per span, attribute value
length, tool arguments, span events and names, so one hostile span cannot make a row (and every
page that reads it) arbitrarily large."""

from __future__ import annotations

import json

import pytest

from ingest import limits
from ingest.models import Step, Task
from ingest.otlp import MAX_SPAN_EVENTS
from tests.ingest.fixtures.otlp import MS, T0

pytestmark = pytest.mark.django_db
TRACE = "5b8efff798038103d269b633813fc60c"
MB = "x" * 1_000_000


def attr(key, **value):
    return {"key": key, "value": value}


def send(client, key, spans):
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]})
    return client.post("/v1/traces", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")


def span(span_id, *, parent="", name="step", attributes=(), **extra):
    return {"traceId": TRACE, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 100 * MS),
            "attributes": list(attributes), **extra}


def test_a_hostile_span_is_stored_within_the_caps(client, ingest_key, project):
    many = [attr(f"k{i}", intValue=str(i)) for i in range(5_000)]
    tool = [attr("gen_ai.operation.name", stringValue="execute_tool"), attr("gen_ai.tool.name", stringValue="t"),
            attr("gen_ai.tool.call.arguments", stringValue=json.dumps({"q": MB})), attr("prompt", stringValue=MB)]
    events = [{"timeUnixNano": str(T0 + i), "name": "e", "attributes": [attr("m", stringValue=MB[:20_000])]}
              for i in range(MAX_SPAN_EVENTS + 50)]
    r = send(client, ingest_key, [
        span("eee19b7ec3c1b174", name=MB, attributes=many),
        span("eee19b7ec3c1b175", parent="eee19b7ec3c1b174", attributes=tool, events=events),
    ])
    assert r.status_code == 200, r.content[:300]
    root = Step.objects.get(project=project, step_id="eee19b7ec3c1b174")
    assert len(root.attributes) <= limits.MAX_ATTRIBUTES + 1
    assert root.attributes["agentops.dropped_attributes"] >= 5_000 - limits.MAX_ATTRIBUTES
    assert len(root.name) <= limits.MAX_NAME_LENGTH
    assert len(Task.objects.get(project=project).name) <= limits.MAX_NAME_LENGTH
    child = Step.objects.get(project=project, step_id="eee19b7ec3c1b175")
    cap = limits.MAX_ATTRIBUTE_VALUE_CHARS + len(limits.TRUNCATION_MARKER)
    assert child.attributes["prompt"].endswith(limits.TRUNCATION_MARKER) and len(child.attributes["prompt"]) <= cap
    assert len(json.dumps(child.tool_args)) <= cap + 20
    assert len(child.events) == MAX_SPAN_EVENTS + 1
    assert child.events[-1] == {"name": "agentops.dropped_events", "ts": None, "attributes": {"count": 50}}
    # The whole row stays small: what a page has to read for one step is bounded.
    row = len(json.dumps([child.attributes, child.tool_args, child.events]))
    assert row < (MAX_SPAN_EVENTS + 10) * cap, row
