"""GET /api/v1/tasks/<id> over real HTTP: the steps Postgres writes as JSON must read exactly
like StepSerializer's output (the contract the API schema documents), hostile content included."""

from __future__ import annotations

import json

import pytest
import requests
from rest_framework.renderers import JSONRenderer

from analysis.dashboard.serializers import StepSerializer
from ingest.models import Step

from .factories import make_step, make_task

HOSTILE = 'quote " backslash \\ </script><img src=x onerror=alert(1)> \u2028 tab\t newline\n é 漢字 🙂'


@pytest.fixture
def task_with_odd_steps(project):
    task = make_task(project, "odd", duration_ms=5000.0)
    make_step(task, "root", kind="agent", duration_ms=5000.0, name=HOSTILE, attributes={"k": [1, 2.5, None, HOSTILE]})
    make_step(task, "llm-1", parent="root", kind="llm", offset_ms=1.25, duration_ms=812.0625, model="llama-3.1-70b",
              provider="vllm", device="gpu-0", input_tokens=1200, output_tokens=85, cached_tokens=0, ttft_ms=140.5,
              streamed=True, events=[{"name": "first_token", "ts": "2026-11-01T10:00:00.14Z"}])
    make_step(task, "tool-1", parent="root", kind="tool", offset_ms=900.0, duration_ms=3.0, tool_name="search",
              tool_args={"q": HOSTILE, "n": 3, "nested": {"deep": [True, False]}}, depends_on=["llm-1"],
              status="error", error=HOSTILE)
    make_step(task, "child", parent="tool-1", kind="retrieval", offset_ms=901.0, duration_ms=1e-3)
    make_step(task, "orphan", parent="missing", kind="other", offset_ms=4000.0, duration_ms=0.0)
    return task


def test_task_detail_steps_read_exactly_like_the_step_serializer(live_server, read_key, task_with_odd_steps):
    response = requests.get(f"{live_server.url}/api/v1/tasks/odd", headers={"Authorization": f"Bearer {read_key}"},
                            timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["task_id"] == "odd" and body["findings"] == []
    depths = {"root": 0, "llm-1": 1, "tool-1": 1, "child": 2, "orphan": 0}
    assert [(s["step_id"], s["depth"]) for s in body["steps"]] == list(depths.items())
    for got in body["steps"]:
        step = Step.objects.get(task=task_with_odd_steps, step_id=got["step_id"])
        step.depth = depths[step.step_id]
        expected = json.loads(JSONRenderer().render(StepSerializer(step).data))
        assert got == expected, step.step_id
    assert body["steps"][0]["name"] == HOSTILE


def test_task_detail_of_a_task_without_steps_has_an_empty_list(live_server, read_key, project):
    make_task(project, "empty")
    response = requests.get(f"{live_server.url}/api/v1/tasks/empty", headers={"Authorization": f"Bearer {read_key}"},
                            timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["steps"] == []
