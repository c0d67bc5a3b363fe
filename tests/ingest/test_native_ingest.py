"""The native ingest contract, over real HTTP against a live server."""

from __future__ import annotations

import gzip
import json

import pytest
import requests

from ingest.models import IngestKey, Step, Task
from ingest.services import key_revoke

T0 = "2026-11-01T10:00:00Z"


def step(step_id, task_id="t1", **extra):
    return {"type": "step", "step_id": step_id, "task_id": task_id, "kind": "tool", "name": "search",
            "started_at": "2026-11-01T10:00:01Z", "ended_at": "2026-11-01T10:00:02.5Z", **extra}


def task(task_id="t1", **extra):
    return {"type": "task", "task_id": task_id, "name": "checkout", "release": "v1",
            "started_at": T0, "ended_at": "2026-11-01T10:00:05Z", "status": "ok", **extra}


@pytest.fixture
def post(live_server):
    def _post(key, body, *, raw=None, headers=None):
        data = raw if raw is not None else json.dumps(body).encode()
        h = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {}),
             **(headers or {})}
        return requests.post(f"{live_server.url}/api/v1/ingest", data=data, headers=h, timeout=30)
    return _post


@pytest.fixture
def get(live_server):
    def _get(key, path, **params):
        return requests.get(f"{live_server.url}{path}", params=params,
                            headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return _get


def test_a_batch_reads_back_through_the_task_api(post, get, project, ingest_key, make_key):
    r = post(ingest_key, {"events": [task(), step("s1"), step("s2", parent_step_id="s1", kind="llm",
                                                               model="llama-3-70b", input_tokens=900,
                                                               output_tokens=120, ttft_ms=210.0)]})
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 3, "rejected": []}
    detail = get(make_key(project, "read"), "/api/v1/tasks/t1").json()
    assert detail["name"] == "checkout"
    assert detail["duration_ms"] == 5000.0
    assert [s["step_id"] for s in detail["steps"]] == ["s1", "s2"]
    assert detail["steps"][1]["depth"] == 1
    assert detail["steps"][1]["ttft_ms"] == 210.0
    assert detail["input_tokens"] == 900


def test_one_bad_event_never_loses_the_good_ones(post, project, ingest_key):
    r = post(ingest_key, {"events": [
        step("s1"),
        step("s2", started_at="yesterday"),
        {"type": "step", "task_id": "t1"},
        step("s3", kind="banana"),
        {"type": "gossip"},
        step("s4"),
    ]})
    assert r.status_code == 200
    body = r.json()
    assert body["accepted"] == 2
    errors = {e["index"]: e["error"] for e in body["rejected"]}
    assert set(errors) == {1, 2, 3, 4}
    assert errors[1].startswith("started_at:")
    assert "step_id" in errors[2] or "started_at" in errors[2]
    assert errors[3].startswith("kind:")
    assert errors[4].startswith("type:")
    assert set(Step.objects.filter(project=project).values_list("step_id", flat=True)) == {"s1", "s4"}


def test_resent_batch_creates_no_duplicates(post, project, ingest_key):
    batch = {"events": [task(), step("s1"), step("s2"), {"type": "resource", "device": "groq-lpu-01",
             "vendor": "groq", "hardware": "LPU", "ts": T0, "metrics": {"queue_depth": 3}}]}
    for _ in range(3):
        assert post(ingest_key, batch).status_code == 200
    assert Task.objects.filter(project=project).count() == 1
    assert Step.objects.filter(project=project).count() == 2
    assert Task.objects.get(project=project).step_count == 2


def test_resending_updates_the_step(post, project, ingest_key):
    post(ingest_key, {"events": [step("s1")]})
    post(ingest_key, {"events": [step("s1", name="search_v2")]})
    assert Step.objects.get(project=project, step_id="s1").name == "search_v2"


def test_steps_may_arrive_before_their_task_and_in_any_order(post, project, ingest_key):
    post(ingest_key, {"events": [step("s2", parent_step_id="s1", started_at="2026-11-01T10:00:03Z",
                                      ended_at="2026-11-01T10:00:04Z")]})
    placeholder = Task.objects.get(project=project, task_id="t1")
    assert placeholder.started_at is not None and placeholder.name == "search"
    post(ingest_key, {"events": [step("s1")]})
    post(ingest_key, {"events": [task()]})
    t = Task.objects.get(project=project, task_id="t1")
    assert (t.name, t.release, t.step_count, t.duration_ms) == ("checkout", "v1", 2, 5000.0)


def test_duplicate_ids_inside_one_batch_keep_the_last(post, project, ingest_key):
    r = post(ingest_key, {"events": [step("s1", name="first"), step("s1", name="second")]})
    assert r.status_code == 200
    assert Step.objects.get(project=project).name == "second"


def test_key_of_one_project_never_writes_or_reads_another(post, get, project, other_project,
                                                           ingest_key, other_keys, make_key):
    post(other_keys["ingest"], {"events": [task("secret"), step("s1", task_id="secret")]})
    post(ingest_key, {"events": [task("mine")]})
    assert not Task.objects.filter(project=project, task_id="secret").exists()
    read = make_key(project, "read")
    assert get(read, "/api/v1/tasks/secret").status_code == 404
    listed = get(read, "/api/v1/tasks").json()["results"]
    assert [t["task_id"] for t in listed] == ["mine"]
    # A project named in the payload or the query is ignored / refused, never followed.
    post(ingest_key, {"project": "globex", "events": [task("smuggled")]})
    assert Task.objects.get(task_id="smuggled").project == project
    assert get(read, "/api/v1/tasks", project="globex").status_code == 404


def test_missing_unknown_and_revoked_keys_are_401(post, project, ingest_key):
    assert post(None, {"events": []}).status_code == 401
    assert post("ao_nothere_secret", {"events": []}).status_code == 401
    key = IngestKey.objects.get(project=project)
    key_revoke(key=key)
    r = post(ingest_key, {"events": [task()]})
    assert r.status_code == 401
    assert not Task.objects.exists()


def test_an_ingest_key_cannot_read(get, ingest_key):
    assert get(ingest_key, "/api/v1/tasks").status_code == 403


def test_oversized_body_is_413_naming_the_limit(post, ingest_key, settings):
    from ingest import limits
    r = post(ingest_key, None, raw=b"{" + b" " * (limits.MAX_BODY_BYTES + 10) + b"}")
    assert r.status_code == 413
    assert str(limits.MAX_BODY_BYTES) in r.json()["error"]


def test_too_many_events_is_413_naming_the_limit(post, ingest_key):
    from ingest import limits
    r = post(ingest_key, {"events": [{"type": "x"}] * (limits.MAX_EVENTS_PER_BATCH + 1)})
    assert r.status_code == 413
    assert str(limits.MAX_EVENTS_PER_BATCH) in r.json()["error"]


def test_gzip_bomb_is_413(post, ingest_key):
    from ingest import limits
    bomb = gzip.compress(b" " * (limits.MAX_BODY_BYTES + 1024))
    r = post(ingest_key, None, raw=bomb, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413


def test_gzip_body_is_accepted(post, project, ingest_key):
    r = post(ingest_key, None, raw=gzip.compress(json.dumps({"events": [task()]}).encode()),
             headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200 and r.json()["accepted"] == 1


def test_malformed_json_is_400_with_position(post, ingest_key):
    r = post(ingest_key, None, raw=b'{"events": [ {"type": "task",, } ]}')
    assert r.status_code == 400
    assert "line 1 column" in r.json()["error"]


@pytest.mark.parametrize("payload", [
    b'{"events": [{"type": "task", "task_id": "t\\u0000x", "name": "n\\u0000ame"}]}',
    b'{"events": [{"type": "task", "task_id": "t2", "name": "\\ud800lone"}]}',
    b'{"events": [{"type": "task", "task_id": "t3", "attributes": {"k\\u0000": "v\\u0000"}}]}',
])
def test_postgres_hostile_strings_never_500(post, project, ingest_key, payload):
    r = post(ingest_key, None, raw=payload)
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 1
    t = Task.objects.get(project=project)
    assert "\x00" not in t.task_id + t.name + json.dumps(t.attributes)


def test_deep_nesting_is_a_clean_error(post, ingest_key):
    deep = "[" * 100_000 + "]" * 100_000
    r = post(ingest_key, None, raw=f'{{"events": {deep}}}'.encode())
    assert r.status_code == 400
    r = post(ingest_key, {"events": [task(attributes={"a": json.loads("[" * 50 + "]" * 50)}), task("ok")]})
    assert r.status_code == 200
    assert r.json()["accepted"] == 1
    assert "nested deeper" in r.json()["rejected"][0]["error"]


@pytest.mark.parametrize("override,field", [
    ({"ended_at": "2026-11-01T09:00:00Z"}, "before started_at"),
    ({"started_at": "1970-01-01T00:00:00Z"}, "started_at"),
    ({"ended_at": "2300-01-01T00:00:00Z"}, "ended_at"),
])
def test_impossible_times_are_rejected_by_name(post, ingest_key, override, field):
    r = post(ingest_key, {"events": [step("s1", **override), step("s2")]})
    body = r.json()
    assert body["accepted"] == 1
    assert field in body["rejected"][0]["error"]


def test_unix_nanosecond_timestamps(post, project, ingest_key):
    start = 1_793_000_000_000_000_000
    post(ingest_key, {"events": [step("s1", started_at=start, ended_at=start + 1_500_000_000)]})
    assert Step.objects.get(project=project).duration_ms == pytest.approx(1500.0)


def test_long_attribute_values_are_truncated_with_a_marker(post, project, ingest_key):
    from ingest import limits
    r = post(ingest_key, {"events": [task(attributes={"prompt": "x" * 1_000_000})]})
    assert r.status_code == 200
    prompt = Task.objects.get(project=project).attributes["prompt"]
    assert prompt.endswith(limits.TRUNCATION_MARKER)
    assert len(prompt) < 20_000


def test_a_key_over_its_rate_limit_gets_429_with_retry_after(post, ingest_key, settings):
    from django.core.cache import cache
    cache.clear()
    settings.AGENTOPS_KEY_RATE_LIMIT = "3/minute"
    codes = [post(ingest_key, {"events": []}) for _ in range(5)]
    assert [r.status_code for r in codes[:3]] == [200, 200, 200]
    assert codes[3].status_code == 429
    assert int(codes[3].headers["Retry-After"]) > 0
    cache.clear()


def test_tool_results_and_call_ids_read_back_through_the_task_api(post, get, project, ingest_key, make_key):
    r = post(ingest_key, {"events": [
        task(),
        step("s1", kind="llm", model="m", tool_call_ids=["call_a", "call_b"]),
        step("s2", tool_name="search_orders", tool_call_id="call_a", tool_args={"customer": "Ada"},
             tool_result={"order_id": "ord_8f3k2q", "total": 12}),
        step("s3", tool_name="lookup", tool_call_id="call_b", tool_result="x" * 10_000),
    ]})
    assert r.json() == {"accepted": 4, "rejected": []}
    steps = {s["step_id"]: s for s in get(make_key(project, "read"), "/api/v1/tasks/t1").json()["steps"]}
    assert steps["s1"]["tool_call_ids"] == ["call_a", "call_b"]
    assert (steps["s2"]["tool_call_id"], json.loads(steps["s2"]["tool_result"])) == (
        "call_a", {"order_id": "ord_8f3k2q", "total": 12})
    assert len(steps["s3"]["tool_result"]) < 5_000 and steps["s3"]["tool_result"].endswith("…[truncated]")


@pytest.mark.parametrize("override,message", [
    ({"tool_call_ids": "call_a"}, "tool_call_ids: must be a list"),
    ({"tool_call_ids": ["call_a", 7]}, "tool_call_ids: must be a list"),
    ({"tool_call_id": {"id": "call_a"}}, "tool_call_id: must be a string"),
])
def test_bad_call_ids_are_refused_by_name_and_spare_the_rest(post, project, ingest_key, override, message):
    r = post(ingest_key, {"events": [step("good"), step("bad", **override)]})
    body = r.json()
    assert r.status_code == 200 and body["accepted"] == 1
    [rejected] = body["rejected"]
    assert rejected["index"] == 1 and message in rejected["error"]


def test_an_agent_spans_total_usage_is_not_added_to_its_model_calls(project):
    """Strands' invoke_agent, smolagents' AGENT span and the AI SDK carry the run's total usage
    on the root as well as on each model call: the task's tokens are the calls', once."""
    from ingest.records import Batch, StepRecord, TaskRecord
    from ingest.services import batch_store
    from tests.analysis.workload import at

    def steps(task_id, *, calls):
        root = StepRecord(f"{task_id}-agent", task_id, at(0), at(3), kind="agent", name="invoke_agent",
                          input_tokens=300, output_tokens=30)
        chats = [StepRecord(f"{task_id}-c{i}", task_id, at(i), at(i + 1), kind="llm", name="chat", model="m",
                            parent_step_id=root.step_id, input_tokens=100 * (i + 1), output_tokens=10 * (i + 1))
                 for i in range(calls)]
        return [root, *chats]

    batch_store(project=project, batch=Batch(
        tasks=[TaskRecord(t, name="a", started_at=at(0), ended_at=at(3), status="ok") for t in ("both", "root-only")],
        steps=steps("both", calls=2) + steps("root-only", calls=0)))
    totals = dict((t.task_id, (t.input_tokens, t.output_tokens)) for t in Task.objects.filter(project=project))
    assert totals == {"both": (300, 30), "root-only": (300, 30)}
