"""Traces recorded from real agent frameworks and their instrumentations (tests/fixtures/agents),
sent as their exporters sent them, over HTTP to /v1/traces: every field a user of that framework
expects arrives where the product shows it (kinds, model, tokens, TTFT, tool name, arguments,
result, call ids, tree), and tasks are named after the agent that ran."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests

from analysis.simulator.recorded import MEDIA, bodies, families
from ingest import limits
from ingest.models import Step, Task

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
FAMILIES = [f.name for f in families(FIXTURES)] if FIXTURES.is_dir() else []
# What an instrumentation does not record (seen in its payloads; docs/otlp.md has the tables).
# Asserted absent, so the table is corrected when a new version starts sending it.
NOT_RECORDED = {
    # No first-token event, no stream flag; the call id only inside a successful result.
    "langgraph_openinference": {"ttft", "failed_tool_call_id"},
    "langgraph_openllmetry": {"ttft"},
    "openai_v2": {"ttft"},
    "openai_agents": {"ttft", "tool_call_id"},  # tool spans carry no call id
    # TOOL spans name no call id (the LLM span's output messages do); no first-token event.
    "smolagents_openinference": {"ttft", "tool_call_id"},
    # TOOL spans name no call id; FunctionAgent streams without asking for usage: no tokens.
    "llamaindex_openinference": {"tool_call_id", "tokens"},
    # No TTFT on ADK's generate_content span, streamed or not.
    "google_adk": {"ttft"},
    # TOOL spans name no call id (the LLM spans' output messages do).
    "crewai_openinference": {"tool_call_id"},
    "agno_openinference": {"tool_call_id", "ttft"},  # and no first-token event on ainvoke_stream
}
# Model calls whose token counts runs.jsonl does not have, and why; a count missing anywhere else
# fails the test naming the fixture, and an entry no longer needed fails too.
TOKENS_NOT_IN_RUNS = {
    ("pydantic_ai", "streamed"): "the recorder's scripted stream_fn reports no usage (runs.jsonl keeps what "
                                 "the model reported); pydantic-ai puts its own estimate on the chat span",
}


def runs(family: str) -> list[dict]:
    with (FIXTURES / family / "runs.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def as_json(value):
    """A stored tool result or argument as data, when it is JSON text."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@pytest.fixture
def replayed(live_server, project, ingest_key):
    def _replay(family: str) -> dict[str, Task]:
        for body in bodies(FIXTURES / family):
            r = requests.post(f"{live_server.url}/v1/traces", data=body.read_bytes(), timeout=30, headers={
                "Authorization": f"Bearer {ingest_key}", "Content-Type": MEDIA[body.suffix]})
            assert r.status_code == 200, (body.name, r.text)
        return {t.task_id: t for t in Task.objects.filter(project=project)}
    return _replay


@pytest.mark.parametrize("family", FAMILIES)
def test_a_recorded_family_arrives_as_its_instrumentation_sent_it(replayed, family):
    # One replay per family (each is a few hundred spans over HTTP), every aspect checked on it.
    tasks = replayed(family)
    check_tasks_are_named_after_their_agent(family, tasks)
    check_tool_steps(family)
    check_llm_steps(family)
    check_trees(tasks)


def check_tasks_are_named_after_their_agent(family, tasks):
    recorded = runs(family)
    assert len(recorded) >= 20 and set(tasks) == {r["task_id"] for r in recorded}
    for run in recorded:
        task = tasks[run["task_id"]]
        # `task_name`: what the task is called where no span names the agent (LlamaIndex: its service).
        assert task.name == run.get("task_name", run["agent_name"]), (run["scenario"], task.name)
        assert (task.release, task.environment) == ("1.0.0", "fixtures")
        assert task.status == ("error" if run["status"] == "error" else "ok")


def check_tool_steps(family):
    """Tool steps carry name, arguments, result, call id and status."""
    checked = 0
    for run in runs(family):
        for call in run["tool_calls"]:
            step = Step.objects.get(task__task_id=run["task_id"], step_id=call["span_id"])
            assert (step.kind, step.tool_name) == ("tool", call["name"])
            args = as_json(step.tool_args)
            if isinstance(args, str) and len(call["arguments"]) == 1:
                # OpenInference records a one-argument tool's input as the bare value.
                assert args == next(iter(call["arguments"].values()))
            else:
                assert args == call["arguments"]
            if call["status"] == "ok" and (step.tool_result or "").endswith(limits.TRUNCATION_MARKER):
                # A result over the limit keeps its head (a long_history log page, ~5 KB): the
                # text the instrumentation sent, cut, whatever its quoting and spacing.
                assert len(step.tool_result) == limits.MAX_TOOL_RESULT_CHARS + len(limits.TRUNCATION_MARKER)
                head = re.sub(r"\W", "", step.tool_result[:-len(limits.TRUNCATION_MARKER)])
                assert re.sub(r"\W", "", json.dumps(call["result"])).startswith(head), step.tool_result
            elif call["status"] == "ok":
                assert as_json(step.tool_result) == call["result"], (step.tool_result, call["result"])
            else:
                assert step.status == "error" and step.error
            gaps = NOT_RECORDED.get(family, set())
            if "tool_call_id" in gaps or (call["status"] != "ok" and "failed_tool_call_id" in gaps):
                assert step.tool_call_id == ""
            elif call.get("call_id"):
                assert step.tool_call_id == call["call_id"]
            checked += 1
    assert checked >= 40


def check_llm_steps(family):
    """LLM steps carry model, tokens, the calls their response requested, and TTFT."""
    untokened = set()
    for run in runs(family):
        llm = list(Step.objects.filter(task__task_id=run["task_id"], kind="llm").order_by("started_at"))
        assert len(llm) == len(run["llm_turns"]), run["scenario"]
        for n, (step, turn) in enumerate(zip(llm, run["llm_turns"], strict=True)):
            where = f"{family}/runs.jsonl, {run['scenario']} run {run['task_id']}, model call {n}"
            assert step.model == run["model"], where
            assert "tool_call_ids" in turn, f"{where}: the fixture does not say which calls it requested"
            assert step.tool_call_ids == turn["tool_call_ids"], where
            if "tokens" in NOT_RECORDED.get(family, ()):
                assert (step.input_tokens, step.output_tokens) == (None, None), where
                continue
            missing = [field for field in ("input_tokens", "output_tokens") if turn.get(field) is None]
            if missing:
                assert (family, run["scenario"]) in TOKENS_NOT_IN_RUNS, f"{where}: no {' or '.join(missing)} recorded"
                untokened.add((family, run["scenario"]))
                # What the instrumentation sent still arrives: the call shows its tokens.
                assert all((getattr(step, field) or 0) > 0 for field in missing), (where, step.input_tokens,
                                                                                   step.output_tokens)
            for field in {"input_tokens", "output_tokens"} - set(missing):
                assert getattr(step, field) == turn[field], (where, field)
        streamed = run.get("ttft_ms") or (run.get("streamed") and run["llm_turns"][-1].get("first_chunk_ms_server"))
        if streamed and "ttft" in NOT_RECORDED.get(family, ()):
            assert llm[-1].ttft_ms is None
        elif run.get("ttft_ms"):
            final = llm[-1]
            assert final.streamed is True
            # abs 10 ms: an instrumentation's TTFT starts with its span, a few ms before the client's
            # own timer (pydantic-ai's request preparation comes before its stream function; 6 ms on the
            # loaded machine of the 4 December recording).
            assert final.ttft_ms == pytest.approx(run["ttft_ms"], rel=0.05, abs=10)
        elif streamed:
            # The client's first chunk was not timed by the recorder: it came after the mock sent
            # it and before the call ended.
            final = llm[-1]
            server_ms = run["llm_turns"][-1]["first_chunk_ms_server"]
            assert final.streamed is True and final.ttft_ms is not None, where
            assert server_ms - 1 <= final.ttft_ms <= final.duration_ms + 1, (where, final.ttft_ms, server_ms)
    stale = {key for key in TOKENS_NOT_IN_RUNS if key[0] == family} - untokened
    assert not stale, f"runs.jsonl now has the token counts of {stale}: drop them from TOKENS_NOT_IN_RUNS"


def check_trees(tasks):
    """Each trace is one tree under its root."""
    for task in tasks.values():
        steps = {s.step_id: s.parent_step_id for s in Step.objects.filter(task=task)}
        roots = [sid for sid, parent in steps.items() if not parent]
        assert len(roots) == 1
        assert all(parent in steps for parent in steps.values() if parent)
