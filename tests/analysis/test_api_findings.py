"""GET /api/v1/findings and /api/v1/latency over real HTTP."""

from __future__ import annotations

import pytest
import requests

from analysis.engine import pipeline
from ingest.models import Task
from tests.analysis.factories import make_finding, make_task

from .workload import history, problem_task, store


@pytest.fixture
def get(live_server):
    def _get(key, path, **params):
        return requests.get(f"{live_server.url}{path}", params=params,
                            headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return _get


@pytest.fixture
def analysed(project):
    start = history(project)
    for i in range(3):
        task, steps = problem_task(f"p{i}", start + i * 20)
        store(project, task, steps)
        pipeline.run(Task.objects.get(project=project, task_id=f"p{i}").pk, force=True)
    return project


def test_findings_filter_by_kind_and_task_and_page_with_a_cursor(get, analysed, read_key):
    r = get(read_key, "/api/v1/findings", kind="repeated_tool_call")
    assert r.status_code == 200, r.text
    body = r.json()
    assert [f["task_id"] for f in body["results"]] == ["p2", "p1", "p0"]
    assert body["results"][0]["summary"].startswith("search_order called 3×")
    assert body["results"][0]["evidence"]["calls"] == 3
    one = get(read_key, "/api/v1/findings", task_id="p1").json()["results"]
    assert sorted(f["kind"] for f in one) == ["repeated_tool_call", "serial_gap", "slow_step"]
    seen, cursor = [], None
    while True:
        page = get(read_key, "/api/v1/findings", limit=2, **({"cursor": cursor} if cursor else {})).json()
        seen += [f["id"] for f in page["results"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 9


POSSIBLE = "possible: no call ids or data flow show whether these calls were independent"


@pytest.fixture
def guessed(project):
    """One task with a sure, a medium and a low-confidence finding, as the detectors write them."""
    task = make_task(project, "g1", duration_ms=3000.0)
    make_finding(task, "serial_gap", wasted_ms=300.0, confidence_reason="no step ran for 300 ms")
    make_finding(task, "slow_step", wasted_ms=400.0, confidence="medium", confidence_reason="baseline of 24 runs only")
    make_finding(task, "parallelizable_calls", wasted_ms=900.0, confidence="low", confidence_reason=POSSIBLE)
    return task


def test_findings_carry_their_confidence_and_filter_by_it(get, guessed, read_key):
    every = get(read_key, "/api/v1/findings").json()["results"]
    assert sorted((f["kind"], f["confidence"], f["confidence_reason"]) for f in every) == [
        ("parallelizable_calls", "low", POSSIBLE), ("serial_gap", "high", "no step ran for 300 ms"),
        ("slow_step", "medium", "baseline of 24 runs only")]
    low = get(read_key, "/api/v1/findings", confidence="low").json()["results"]
    assert [f["kind"] for f in low] == ["parallelizable_calls"]
    sure = get(read_key, "/api/v1/findings", confidence="high, medium").json()["results"]
    assert sorted(f["kind"] for f in sure) == ["serial_gap", "slow_step"]
    detail = get(read_key, "/api/v1/tasks/g1").json()
    # all listed, the one that counts in no total after those that do
    assert [(f["kind"], f["confidence"]) for f in detail["findings"]] == [
        ("slow_step", "medium"), ("serial_gap", "high"), ("parallelizable_calls", "low")]
    # What to change, where the evidence names it: a possible finding says "would"; a slow step
    # whose cause the evidence does not name gets none.
    remedies = {f["kind"]: f["remedy"] for f in every}
    assert remedies["parallelizable_calls"].startswith("if they are independent, run")
    assert remedies["parallelizable_calls"].endswith("would save 900 ms")
    assert remedies["serial_gap"].startswith("nothing ran") and remedies["slow_step"] is None


def test_findings_reject_bad_parameters_with_a_message(get, analysed, read_key):
    for params, word in (({"kind": "nope"}, "kind"), ({"since": "yesterday"}, "since"),
                         ({"limit": "0"}, "limit"), ({"cursor": "!!"}, "cursor"),
                         ({"confidence": "sure"}, "confidence"), ({"confidence": "high,LOW"}, "confidence")):
        r = get(read_key, "/api/v1/findings", **params)
        assert r.status_code == 400 and word in r.json()["error"], (params, r.text)


def test_another_projects_key_sees_none_of_these_findings(get, analysed, other_keys):
    assert get(other_keys["read"], "/api/v1/findings").json()["results"] == []


def test_latency_percentiles_per_group(get, analysed, read_key):
    r = get(read_key, "/api/v1/latency", group_by="name")
    assert r.status_code == 200, r.text
    rows = {row["group"]: row for row in r.json()["results"]}
    tool = rows["search_order"]
    assert tool["count"] == 30 + 3 * 4
    assert tool["p50"] <= tool["p90"] <= tool["p95"] <= tool["p99"] <= tool["max"]
    assert tool["max"] == pytest.approx(3000, abs=1)
    tasks = get(read_key, "/api/v1/latency").json()["results"]
    assert tasks[0]["count"] == 33
    assert get(read_key, "/api/v1/latency", group_by="colour").status_code == 400
