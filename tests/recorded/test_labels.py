"""The recorded fixtures' labels say what the scripted agent did, never what a detector would
find: for the families that share the support-agent scenarios, every label is what
`capture.scenario_labels` derives from the run as stored (the tool calls as the tools saw them,
their spans, the model-call spans, and in the idle scenario the interval the agent code slept,
or — recorded before the recorders kept it — the time between the model response it slept
after and the tool it ran next)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.agents.record.capture import decode, scenario_labels

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
LLM_SPAN = {"pydantic_ai": lambda s: s["attributes"].get("gen_ai.operation.name") == "chat",
            "openai_v2": lambda s: s["attributes"].get("gen_ai.operation.name") == "chat",
            "openai_agents": lambda s: s["attributes"].get("openinference.span.kind") == "LLM"}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("family", sorted(LLM_SPAN))
def test_labels_are_what_each_scripted_run_did(family):
    folder = FIXTURES / family
    spans = [s for p in sorted(folder.glob("*.pb")) for s in decode(p.read_bytes())]
    by_id = {s["span_id"]: s for s in spans}
    derived = []
    for run in rows(folder / "runs.jsonl"):
        if run["scenario"] == "setup":
            continue
        mine = [s for s in spans if s["trace_id"] == run["task_id"]]
        calls = sorted(({**c, "start_ns": by_id[c["span_id"]]["start_ns"], "end_ns": by_id[c["span_id"]]["end_ns"]}
                        for c in run["tool_calls"]), key=lambda c: c["start_ns"])
        derived += scenario_labels(run["scenario"], run["task_id"], mine, calls, idle_s=1.4,
                                   llm_spans=[s for s in mine if LLM_SPAN[family](s)], idle_ns=run.get("idle_ns"))
    stored = [label for label in rows(folder / "labels.jsonl") if not label.get("ambiguous")]
    key = lambda label: (label["task_id"], label["kind"])  # noqa: E731
    assert sorted(stored, key=key) == sorted(derived, key=key)
