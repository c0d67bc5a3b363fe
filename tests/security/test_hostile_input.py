"""Hostile native ingest: the event parser and `POST /api/v1/ingest` under generated and
hand-picked nasty input. The promise: every bad event is a per-event error naming the field, or
a documented normalisation (docs/reliability.md), never a 500 and never at the cost of the good
events in the same batch. Cases already in tests/ingest/test_native_ingest.py (NUL bytes in
ids, 1970/2300 RFC 3339 times, deep nesting, long attribute values) are not repeated here.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import limits
from ingest.events import parse_event
from ingest.models import Step, Task
from ingest.records import RecordError, StepRecord, TaskRecord

START, END = "2026-11-01T10:00:01Z", "2026-11-01T10:00:02Z"


def step(step_id="good", **extra):
    return {"type": "step", "task_id": "t1", "step_id": step_id, "kind": "tool", "name": "search",
            "started_at": START, "ended_at": END, **extra}


# --- the parser, generated input ---------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-2**80, 2**80) | st.floats() | st.text(max_size=50)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)
FIELDS = ["type", "task_id", "step_id", "parent_step_id", "kind", "name", "started_at", "ended_at",
          "status", "error", "depends_on", "attributes", "model", "device", "input_tokens",
          "output_tokens", "cached_tokens", "ttft_ms", "streamed", "tool_name", "tool_args",
          "release", "environment", "session_id", "metrics", "vendor", "hardware", "ts"]
hostile_strings = st.text(alphabet=st.characters(codec=None, blacklist_categories=()), max_size=300)
times = st.one_of(st.integers(-2**70, 2**70), st.datetimes().map(lambda d: d.isoformat() + "Z"), hostile_strings)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({"type": st.sampled_from(["task", "step", "resource"])},
                             optional={f: json_values | hostile_strings for f in FIELDS[1:]}
                             | {"started_at": times, "ended_at": times, "ts": times}))
def test_the_parser_answers_a_record_or_a_record_error_and_nothing_else(event):
    try:
        record = parse_event(event)
    except RecordError as exc:
        assert str(exc) and ":" in str(exc)  # "field: what is wrong"
        return
    texts = [v for v in vars(record).values() if isinstance(v, str)] if hasattr(record, "__dict__") else \
        [getattr(record, s) for s in record.__slots__ if isinstance(getattr(record, s), str)]
    for text in texts:
        assert "\x00" not in text
        text.encode("utf-8")  # no lone surrogate survives: Postgres would refuse it
    json.dumps(getattr(record, "attributes", {}), allow_nan=False)  # jsonb-safe


# --- the endpoint, generated batches -----------------------------------------------------------


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.fixed_dictionaries({"type": st.sampled_from(["task", "step", "resource", "x"])},
                                      optional={f: json_values | hostile_strings for f in FIELDS[1:]}),
                max_size=8))
def test_the_endpoint_keeps_the_good_event_whatever_comes_with_it(client, ingest_key, project, batch):
    body = json.dumps({"events": [*batch, step()]})
    r = client.post("/api/v1/ingest", body, content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert r.status_code == 200, r.content[:500]
    result = r.json()
    assert result["accepted"] + len(result["rejected"]) == len(batch) + 1
    assert all(rej["index"] < len(batch) for rej in result["rejected"])  # the good one never rejected
    assert Step.objects.filter(project=project, step_id="good").exists()


# --- the table of nasty cases -------------------------------------------------------------------

MB = "x" * 1_000_000
# (case, hostile event, expected: ("rejected", words in the error) or ("stored", check on the row))
CASES = [
    ("lone surrogate in tool args", step("h", tool_args={"q": "\ud800"}),
     ("stored", lambda s: s.tool_args["q"] == "\ufffd")),
    ("NUL in a tool name", step("h", tool_name="se\x00arch"), ("stored", lambda s: s.tool_name == "search")),
    ("1 MB step id", step(MB), ("rejected", "step_id: longer than 128")),
    ("1 MB step name", step("h", name=MB), ("rejected", "name: longer than 200")),
    ("1 MB error text", step("h", status="error", error=MB),
     ("stored", lambda s: len(s.error) <= limits.MAX_ERROR_CHARS + len(limits.TRUNCATION_MARKER))),
    ("1 MB tool args", step("h", tool_args={"q": MB}),
     ("stored", lambda s: s.tool_args["q"].endswith(limits.TRUNCATION_MARKER))),
    ("deeply nested tool args", step("h", tool_args=json.loads("[" * 60 + "]" * 60)),
     ("rejected", "tool_args: nested deeper")),
    ("end before start", step("h", started_at=END, ended_at=START), ("rejected", "negative duration")),
    ("negative ttft", step("h", ttft_ms=-5), ("rejected", "ttft_ms: must be between")),
    ("NaN ttft", step("h", ttft_ms=math.nan), ("rejected", "ttft_ms: must be a number")),
    ("infinite tokens", step("h", output_tokens=math.inf), ("rejected", "output_tokens: must be")),
    ("2**70 tokens", step("h", input_tokens=2**70), ("rejected", "input_tokens: must be between")),
    ("negative tokens", step("h", input_tokens=-1), ("rejected", "input_tokens: must be between")),
    ("1970 as nanoseconds", step("h", started_at=0, ended_at=1), ("rejected", "started_at")),
    ("2300 as nanoseconds", step("h", started_at=10**19, ended_at=10**19 + 1), ("rejected", "started_at")),
    ("nanoseconds past any calendar", step("h", started_at=2**70, ended_at=2**70), ("rejected", "started_at")),
    ("timestamp without zone", step("h", started_at="2026-11-01T10:00:00"), ("rejected", "time zone")),
    ("unknown event type", {"type": "span", "task_id": "t1"}, ("rejected", "type: must be one of")),
    ("unknown step kind", step("h", kind="<script>"), ("rejected", "kind:")),
    ("attributes not an object", step("h", attributes=["a"]), ("rejected", "attributes: must be an object")),
    ("10,000 attributes", step("h", attributes={f"k{i}": i for i in range(10_000)}),
     ("stored", lambda s: len(s.attributes) == limits.MAX_ATTRIBUTES + 1
      and s.attributes["agentops.dropped_attributes"] == 10_000 - limits.MAX_ATTRIBUTES)),
    ("infinite attribute", step("h", attributes={"x": math.inf}), ("stored", lambda s: s.attributes["x"] is None)),
    ("resource with infinite metric", {"type": "resource", "device": "gpu0", "ts": START,
                                       "metrics": {"utilization": math.inf}},
     ("rejected", "metrics.utilization")),
    ("event not an object", "step", ("rejected", "event: must be an object")),
]


@pytest.mark.django_db
@pytest.mark.parametrize("case,event,expected", CASES, ids=[c[0] for c in CASES])
def test_a_nasty_event_costs_only_itself(client, ingest_key, project, case, event, expected):
    body = json.dumps({"events": [step("before"), event, step("after")]})  # json allows NaN/Infinity
    r = client.post("/api/v1/ingest", body, content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert r.status_code == 200, r.content[:300]
    result = r.json()
    stored = set(Step.objects.filter(project=project).values_list("step_id", flat=True))
    assert {"before", "after"} <= stored
    outcome, check = expected
    if outcome == "rejected":
        assert result["accepted"] == 2 and len(result["rejected"]) == 1, result
        assert result["rejected"][0]["index"] == 1 and check in result["rejected"][0]["error"], result
    else:
        assert result == {"accepted": 3, "rejected": []}
        assert check(Step.objects.get(project=project, step_id="h"))


@pytest.mark.django_db
def test_duplicate_ids_in_one_batch_store_one_step_and_one_task(client, ingest_key, project):
    task = {"type": "task", "task_id": "t1", "name": "a", "started_at": START, "ended_at": END}
    body = json.dumps({"events": [task, {**task, "name": "b"}, step("d", name="one"), step("d", name="two")]})
    r = client.post("/api/v1/ingest", body, content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert r.status_code == 200
    assert Task.objects.filter(project=project).count() == 1
    assert Step.objects.filter(project=project, step_id="d").count() == 1


def test_records_are_the_types_the_parser_promises():
    assert isinstance(parse_event(step()), StepRecord)
    assert isinstance(parse_event({"type": "task", "task_id": "t"}), TaskRecord)
