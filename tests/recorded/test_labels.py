"""The recorded fixtures' labels say what the scripted agent did, never what a detector would
find: for the families that share the support-agent scenarios, every label is what
`capture.scenario_labels` derives from the run as stored (the tool calls as the tools saw them,
their spans, the model-call spans, in the idle scenario the interval the agent code slept,
or — recorded before the recorders kept it — the time between the model response it slept
after and the tool it ran next, and in the long_history scenario the prefill delay the scripted
model logged for each of its calls)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.simulator.recorded import bodies
from tests.fixtures.agents.record.capture import decode, scenario_labels
from tests.fixtures.agents.record.llamaindex_openinference import sleeping_step

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
def _operation(*names):
    return lambda s: s["attributes"].get("gen_ai.operation.name") in names


def _openinference_llm(s):
    # LlamaIndex also marks the request's preparation LLM: the model calls are those that answered.
    return (s["attributes"].get("openinference.span.kind") == "LLM"
            and any(k.startswith("llm.output_messages.") for k in s["attributes"]))


LLM_SPAN = {"pydantic_ai": _operation("chat"),
            "openai_v2": _operation("chat"),
            "openai_agents": lambda s: s["attributes"].get("openinference.span.kind") == "LLM",
            "smolagents_openinference": _openinference_llm,
            "llamaindex_openinference": _openinference_llm,
            "strands_default": _operation("chat"),
            "strands_latest": _operation("chat"),
            "google_adk": _operation("generate_content"),
            "ai_sdk": _operation("chat")}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("family", sorted(LLM_SPAN))
def test_labels_are_what_each_scripted_run_did(family):
    folder = FIXTURES / family
    spans = [s for p in bodies(folder) for s in decode(p.read_bytes(), p.suffix[1:])]
    by_id = {s["span_id"]: s for s in spans}
    derived = []
    for run in rows(folder / "runs.jsonl"):
        if run["scenario"] == "setup":
            continue
        mine = [s for s in spans if s["trace_id"] == run["task_id"]]
        calls = sorted(({**c, "start_ns": by_id[c["span_id"]]["start_ns"], "end_ns": by_id[c["span_id"]]["end_ns"]}
                        for c in run["tool_calls"]), key=lambda c: c["start_ns"])
        found = scenario_labels(run["scenario"], run["task_id"], mine, calls, idle_s=1.4,
                                llm_spans=[s for s in mine if LLM_SPAN[family](s)], idle_ns=run.get("idle_ns"),
                                prefill_ms=[t.get("prefill_ms") for t in run["llm_turns"]])
        if family == "llamaindex_openinference":
            # Its agent code sleeps inside FunctionAgent's call_tool step: that span is labelled too.
            for label in found:
                if label["kind"] == "serial_gap":
                    label["step_ids"].append(sleeping_step(mine, label))
        derived += found
    stored = [label for label in rows(folder / "labels.jsonl") if not label.get("ambiguous")]
    key = lambda label: (label["task_id"], label["kind"])  # noqa: E731
    assert sorted(stored, key=key) == sorted(derived, key=key)


def test_hardware_labels_are_what_the_server_did_to_each_request():
    """openai_v2_vllm: every request the vLLM-style server served (served.jsonl, as the server
    measured it) is labelled on the client's chat span it answered: hardware_queueing when it found
    every slot taken (its wait), hardware_throttling when the GPU's clock was down (the time the
    slower clock added). The chat span is found again from the stored payloads: the server's own
    span hangs under the HTTP client span, which hangs under that chat span, in the same trace."""
    folder = FIXTURES / "openai_v2_vllm"
    spans = {s["span_id"]: s for p in bodies(folder) for s in decode(p.read_bytes(), p.suffix[1:])}
    derived = []
    for request in rows(folder / "served.jsonl"):
        server = spans[request["server_span_id"]]
        http = spans[server["parent_span_id"]]
        chat = spans[http["parent_span_id"]]
        assert (server["name"], http["attributes"].get("http.method"), chat["attributes"]["gen_ai.operation.name"]) \
            == ("llm_request", "POST", "chat")
        assert chat["span_id"] == request["chat_span_id"] and chat["trace_id"] == server["trace_id"] == request["task_id"]
        assert server["attributes"]["gen_ai.latency.time_in_queue"] * 1000 == pytest.approx(request["queue_ms"], abs=0.01)
        base = {"task_id": chat["trace_id"], "step_ids": [chat["span_id"]]}
        if request["waited"]:
            derived.append({**base, "kind": "hardware_queueing", "magnitude_ms": round(request["queue_ms"], 1)})
        if request["pace"] > 1:
            derived.append({**base, "kind": "hardware_throttling", "magnitude_ms": round(request["extra_ms"], 1)})
    stored = [{k: v for k, v in label.items() if k != "scenario"} for label in rows(folder / "labels.jsonl")]
    key = lambda label: (label["task_id"], label["step_ids"], label["kind"])  # noqa: E731
    assert sorted(stored, key=key) == sorted(derived, key=key)
    kinds = {label["kind"] for label in stored}
    assert kinds == {"hardware_queueing", "hardware_throttling"}
    assert min(sum(1 for label in stored if label["kind"] == k) for k in kinds) >= 50
