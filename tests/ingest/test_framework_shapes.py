"""Span shapes of the frameworks recorded in tests/fixtures/agents (Strands, smolagents,
LlamaIndex, Google ADK, the Vercel AI SDK) and of the newer GenAI and MCP conventions, each
copied from a recorded payload or the convention's text (long message content shortened), decoded
by the pure OTLP decoder or stored: what each must mean in agentops words."""

from __future__ import annotations

import json

import pytest

from ingest import conventions, otlp
from ingest.models import Task
from tests.ingest.fixtures.otlp import span, trace_request

STRANDS_CALL = "call_qeVT6FbNKHRizFU89L0zlmq9"
CLIENT, SERVER = 3, 2  # OTLP span kinds


def decoded(spans, **resource):
    request = trace_request(spans, resource={"service.name": "svc", "service.version": "1.0.0", **resource})
    out = otlp.decode_traces(request.SerializeToString(), media=otlp.PROTOBUF)
    assert out.rejected == 0, out.error_message()
    return out


def steps(spans, **resource):
    return {s.name: s for s in decoded(spans, **resource).batch.steps}


def with_kind(s, kind):
    s.kind = kind
    return s


# --- Strands Agents 1.62: content in span events -------------------------------------------

def strands_default_spans():
    """strands_default/: a chat span and its tool span (default conventions): the tool's arguments
    only in the gen_ai.tool.message event, its result and the model's tool call in gen_ai.choice."""
    chat = span(1, 3, parent=2, name="chat", start_ms=0, end_ms=106.3, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.prompt_tokens": 132, "gen_ai.usage.input_tokens": 132, "gen_ai.usage.completion_tokens": 12,
        "gen_ai.usage.output_tokens": 12, "gen_ai.usage.total_tokens": 144, "gen_ai.server.time_to_first_token": 105},
        events=[("gen_ai.user.message", 0.1, {"content": '[{"text": "Where is my order ord_0001x?"}]'}),
                ("gen_ai.choice", 106, {"finish_reason": "tool_use", "message": json.dumps(
                    [{"toolUse": {"toolUseId": STRANDS_CALL, "name": "lookup_customer",
                                  "input": {"email": "user1@example.com"}}}])})])
    tool = span(1, 4, parent=2, name="execute_tool lookup_customer", start_ms=106.8, end_ms=133.7, attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.system": "strands-agents",
        "gen_ai.tool.name": "lookup_customer", "gen_ai.tool.call.id": STRANDS_CALL, "gen_ai.tool.status": "success"},
        events=[("gen_ai.tool.message", 107, {"role": "tool", "content": '{"email": "user1@example.com"}',
                                              "id": STRANDS_CALL}),
                ("gen_ai.choice", 133.5, {"message": json.dumps(
                    [{"text": json.dumps({"customer_id": "cus_user1", "tier": "gold"})}]), "id": STRANDS_CALL})])
    cycle = span(1, 2, parent=1, name="execute_event_loop_cycle", start_ms=0, end_ms=134.4, attributes={
        "gen_ai.operation.name": "execute_event_loop_cycle", "gen_ai.system": "strands-agents",
        "event_loop.cycle_id": "96590479-27e2-470e-82d2-ae18a7d8c2f2"})
    root = span(1, 1, name="invoke_agent support-agent", end_ms=410, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.system": "strands-agents",
        "gen_ai.agent.name": "support-agent", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 647, "gen_ai.usage.output_tokens": 38, "gen_ai.usage.total_tokens": 685})
    return [root, cycle, chat, tool]


def test_strands_default_tool_arguments_result_and_requested_calls_are_read_from_events():
    found = steps(strands_default_spans())
    chat, tool = found["chat"], found["execute_tool lookup_customer"]
    assert chat.tool_call_ids == [STRANDS_CALL]
    assert (tool.tool_args, tool.tool_call_id) == ({"email": "user1@example.com"}, STRANDS_CALL)
    assert json.loads(tool.tool_result) == {"customer_id": "cus_user1", "tier": "gold"}


def test_strands_latest_output_messages_are_read_from_the_operation_details_event():
    """strands_latest/: gen_ai.output.messages only in the gen_ai.client.inference.operation.details
    event; the tool result attribute is a list of text blocks."""
    call = "call_mPDB7k3oOgl1Rm0wvL5PcUCA"
    chat = span(2, 2, parent=1, name="chat", end_ms=88.7, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "strands-agents",
        "gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.input_tokens": 137, "gen_ai.usage.output_tokens": 12,
        "gen_ai.server.time_to_first_token": 87},
        events=[("gen_ai.client.inference.operation.details", 0.1, {"gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Please refund order ord_0043x."}]}])}),
                ("gen_ai.client.inference.operation.details", 88, {"gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "tool_call", "name": "get_shipping_status", "id": call,
                                                      "arguments": {"order_id": "ord_0043x"}}],
                      "finish_reason": "tool_use"}])})])
    tool = span(2, 3, parent=1, name="execute_tool get_shipping_status", start_ms=89, end_ms=117, attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_shipping_status", "gen_ai.tool.call.id": call,
        "gen_ai.tool.call.arguments": '{"order_id": "ord_0043x"}',
        "gen_ai.tool.call.result": json.dumps([{"text": json.dumps({"order_id": "ord_0043x", "status": "in_transit"})}])})
    root = span(2, 1, name="invoke_agent support-agent", end_ms=240, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-agent"})
    found = steps([root, chat, tool])
    assert found["chat"].tool_call_ids == [call]
    # 87 sent under a seconds name is milliseconds for an 88.7 ms call, and the step says so.
    assert found["chat"].ttft_ms == pytest.approx(87.0)
    assert "read as milliseconds" in found["chat"].attributes["agentops.ttft_note"]
    assert json.loads(found["execute_tool get_shipping_status"].tool_result) == {"order_id": "ord_0043x",
                                                                                  "status": "in_transit"}


def test_an_attribute_wins_over_what_an_event_carries():
    tool = span(3, 1, name="execute_tool t", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": '{"a": 1}'},
        events=[("gen_ai.tool.message", 1, {"content": '{"a": 2}'})])
    [step] = decoded([tool]).batch.steps
    assert step.tool_args == {"a": 1}


@pytest.mark.django_db
def test_agent_spans_total_usage_is_not_added_to_the_model_calls(project):
    """Strands' invoke_agent carries the run's total (here 647/38 over three calls, one shown), the
    AI SDK's too, smolagents' AGENT span as llm.token_count.*: a task's tokens are its calls'."""
    from ingest.services import batch_store

    strands = strands_default_spans()
    ai_sdk = [span(5, 1, name="invoke_agent support-agent", end_ms=214, attributes={
                  "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-agent",
                  "gen_ai.usage.input_tokens": 635, "gen_ai.usage.output_tokens": 38}),
              span(5, 2, parent=1, name="step 1", end_ms=83, attributes={"gen_ai.operation.name": "agent_step"}),
              span(5, 3, parent=2, name="chat gpt-4o-mini", end_ms=53, attributes={
                  "gen_ai.operation.name": "chat", "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                  "gen_ai.usage.input_tokens": 125, "gen_ai.usage.output_tokens": 12})]
    smol = [span(6, 1, name="support_agent.run", end_ms=245, attributes={
                "openinference.span.kind": "AGENT", "llm.token_count.prompt": 2683,
                "llm.token_count.completion": 48, "llm.token_count.total": 2731}),
            span(6, 2, parent=1, name="Step 1", end_ms=186, attributes={"openinference.span.kind": "CHAIN"}),
            span(6, 3, parent=2, name="OpenAIModel.generate", end_ms=61, attributes={
                "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 1246, "llm.token_count.completion": 36})]
    for spans in (strands, ai_sdk, smol):
        batch_store(project=project, batch=decoded(spans).batch)
    by_trace = {t.task_id[-1]: (t.input_tokens, t.output_tokens) for t in Task.objects.filter(project=project)}
    assert by_trace == {"1": (132, 12), "5": (125, 12), "6": (1246, 36)}


@pytest.mark.parametrize("attributes", [
    {"gen_ai.operation.name": "execute_event_loop_cycle", "gen_ai.system": "strands-agents",
     "event_loop.cycle_id": "96590479"},                      # Strands: wraps the chat call and its tools
    {"gen_ai.operation.name": "agent_step"},                  # the AI SDK's "step N"
])
def test_an_orchestration_operation_with_no_model_or_tokens_is_framework_time(attributes):
    assert conventions.span_facts(attributes).kind == "framework"


# --- smolagents 1.26 + OpenInference -------------------------------------------------------

def test_smolagents_tool_arguments_are_unwrapped_and_the_task_is_named_after_the_agent():
    root = span(7, 1, name="support_agent.run", end_ms=245, attributes={
        "openinference.span.kind": "AGENT", "input.value": json.dumps({"task": "Where is my order?"})})
    tool = span(7, 2, parent=1, name="SimpleTool", start_ms=10, end_ms=52, attributes={
        "openinference.span.kind": "TOOL", "tool.name": "get_shipping_status",
        "input.value": json.dumps({"args": [], "sanitize_inputs_outputs": True, "kwargs": {"order_id": "ord_0031x"}}),
        "output.value": json.dumps({"order_id": "ord_0031x", "status": "in_transit"}),
        "output.mime_type": "application/json"})
    out = decoded([root, tool])
    [task] = out.batch.tasks
    assert (task.name, task.name_given) == ("support_agent", True)
    step = {s.name: s for s in out.batch.steps}["SimpleTool"]
    assert step.tool_args == {"order_id": "ord_0031x"}


# --- LlamaIndex 0.14 + OpenInference -------------------------------------------------------

def llamaindex_spans():
    """llamaindex_openinference/: the root names the workflow class only; the request's
    preparation is marked LLM; the streamed call's span ends before its first token."""
    root = span(8, 1, name="FunctionAgent.run", end_ms=1900, attributes={"openinference.span.kind": "CHAIN"})
    prepare = span(8, 2, parent=1, name="OpenAI._prepare_chat_with_tools", start_ms=5, end_ms=6.6, attributes={
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.provider": "openai",
        "input.value": json.dumps({"tools": ["<FunctionTool object>"]}),
        "output.value": json.dumps({"messages": ["ChatMessage(role=...)"], "tools": [{}], "tool_choice": "auto",
                                    "parallel_tool_calls": False})})
    chat = span(8, 3, parent=1, name="OpenAI.astream_chat", start_ms=7, end_ms=7.7, attributes={
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.finish_reason": "tool_calls",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_IBXuDL7DxtpYlSXpfKtHF4vU",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_shipping_status"},
        events=[("First Token Stream Event", 72.3, {})])
    tool = span(8, 4, parent=1, name="FunctionTool.acall", start_ms=80, end_ms=126, attributes={
        "openinference.span.kind": "TOOL", "tool.name": "get_shipping_status",
        "input.value": json.dumps({"kwargs": {"order_id": "ord_0001x"}}),
        "output.value": json.dumps({"blocks": [{"text": "{'order_id': 'ord_0001x', 'status': 'in_transit'}"}],
                                    "tool_name": "get_shipping_status",
                                    "raw_input": {"args": [], "kwargs": {"order_id": "ord_0001x"}},
                                    "raw_output": {"order_id": "ord_0001x", "status": "in_transit"},
                                    "is_error": False})})
    return [root, prepare, chat, tool]


def test_llamaindex_streamed_call_lasts_until_its_first_token_and_the_preparation_is_no_model_call():
    found = steps(llamaindex_spans())
    assert found["OpenAI._prepare_chat_with_tools"].kind == "other"
    chat = found["OpenAI.astream_chat"]
    assert chat.kind == "llm" and chat.tool_call_ids == ["call_IBXuDL7DxtpYlSXpfKtHF4vU"]
    assert (chat.ended_at - chat.started_at).total_seconds() * 1000 == pytest.approx(65.3, abs=0.01)
    assert chat.ttft_ms == pytest.approx(65.3, abs=0.01) and chat.streamed is True
    assert "agentops.end_note" in chat.attributes
    tool = found["FunctionTool.acall"]
    assert tool.tool_args == {"order_id": "ord_0001x"}
    assert json.loads(tool.tool_result) == {"order_id": "ord_0001x", "status": "in_transit"}


@pytest.mark.django_db
def test_a_llamaindex_task_is_named_after_its_service_or_its_workflow_class(project):
    from ingest.services import batch_store

    batch_store(project=project, batch=decoded(llamaindex_spans(), **{"service.name": "llamaindex-support"}).batch)
    own = [span(9, 1, name="SupportWorkflow.run", end_ms=10, attributes={"openinference.span.kind": "CHAIN"})]
    batch_store(project=project, batch=decoded(own, **{"service.name": "llamaindex-support"}).batch)
    names = {t.task_id[-1]: t.name for t in Task.objects.filter(project=project)}
    assert names == {"8": "llamaindex-support", "9": "SupportWorkflow"}


# --- CrewAI 1.15 + OpenInference (crewai, openai) -----------------------------------------

CREW_ID = "a0d3e65a-1619-49ab-8cb2-ea0ee3ba6035"
CREWAI_CALL = "call_hrg3Oh9mmvkT2jEdFNYGr3xN"


def crewai_spans(trace=10, crew_name=f"Crew_{CREW_ID}"):
    """crewai_openinference/: an unnamed crew's root is `Crew_<its uuid>.kickoff` (CHAIN), the task's
    agent step `<role>._execute_core` (AGENT, no agent.name), the model call traced by the OpenAI
    instrumentation, the tool `<tool>.run` (TOOL: JSON input, no call id)."""
    root = span(trace, 1, name=f"{crew_name}.kickoff", end_ms=270.7, attributes={
        "openinference.span.kind": "CHAIN", "crew_id": CREW_ID, "crew_key": "f1eab7e8778717133c88de89e3300c43",
        "crew_agents": json.dumps([{"role": "Support agent", "id": "3e4783d0-2bec-4a42-a20a-85b3fa2a519b"}])})
    agent = span(trace, 2, parent=1, name="Support agent._execute_core", start_ms=26.6, end_ms=261.3, attributes={
        "openinference.span.kind": "AGENT", "graph.node.id": "Support agent", "crew_id": CREW_ID,
        "input.value": json.dumps({"agent": {"role": "Support agent"}}), "input.mime_type": "application/json"})
    chat = span(trace, 3, parent=2, name="ChatCompletion", start_ms=50.6, end_ms=101.1, attributes={
        "openinference.span.kind": "LLM", "llm.system": "openai", "llm.model_name": "gpt-4o-mini-2024-07-18",
        "llm.token_count.prompt": 195, "llm.token_count.completion": 12, "llm.token_count.total": 207,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": CREWAI_CALL,
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup_customer",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"email": "user1@example.com"}'})
    tool = span(trace, 4, parent=2, name="lookup_customer.run", start_ms=103.7, end_ms=130.7, attributes={
        "openinference.span.kind": "TOOL", "tool.name": "lookup_customer",
        "tool.parameters": json.dumps({"properties": {"email": {"type": "string"}}, "required": ["email"]}),
        "input.value": '{"email": "user1@example.com"}', "input.mime_type": "application/json",
        "output.value": '{"customer_id": "cus_user1", "tier": "gold"}', "output.mime_type": "application/json"})
    return [root, agent, chat, tool]


@pytest.mark.django_db
def test_an_unnamed_crew_is_named_after_its_agent_and_a_named_crew_after_itself(project):
    """An unnamed crew's root carries a uuid made for the run (every task would be named apart):
    the task takes the role of the agent that ran, read from its `<role>._execute_core` step."""
    from ingest.services import batch_store

    batch_store(project=project, batch=decoded(crewai_spans(), **{"service.name": "crewai-support"}).batch)
    batch_store(project=project, batch=decoded(crewai_spans(11, crew_name="support_crew"),
                                               **{"service.name": "crewai-support"}).batch)
    tasks = {t.task_id[-1]: t for t in Task.objects.filter(project=project)}
    assert {k: t.name for k, t in tasks.items()} == {"a": "Support agent", "b": "support_crew"}
    unnamed = tasks["a"]
    assert (unnamed.input_tokens, unnamed.output_tokens, unnamed.step_count) == (195, 12, 4)
    kinds = dict(unnamed.steps.values_list("name", "kind"))
    assert kinds == {f"Crew_{CREW_ID}.kickoff": "framework", "Support agent._execute_core": "agent",
                     "ChatCompletion": "llm", "lookup_customer.run": "tool"}


def test_crewai_tool_and_model_steps():
    found = steps(crewai_spans())
    tool = found["lookup_customer.run"]
    assert (tool.tool_name, tool.tool_args, tool.tool_call_id) == ("lookup_customer", {"email": "user1@example.com"}, "")
    assert json.loads(tool.tool_result) == {"customer_id": "cus_user1", "tier": "gold"}
    chat = found["ChatCompletion"]
    assert (chat.model, chat.tool_call_ids) == ("gpt-4o-mini-2024-07-18", [CREWAI_CALL])
    assert found["Support agent._execute_core"].attributes[conventions.AGENT_NAME_KEY] == "Support agent"


@pytest.mark.parametrize(("name", "owner", "generic"), [
    (f"Crew_{CREW_ID}.kickoff", "Crew", True),                   # an unnamed crew: the uuid is no name
    ("support_crew.kickoff", "support_crew", False),
    ("Support agent._execute_core", "Support agent", False),      # CrewAI's agent step
    ("Support agent.Find the order._execute_core", "Support agent", False),  # a named CrewAI task
    ("support_agent.arun", "support_agent", False),              # Agno
    ("support_agent.run", "support_agent", False),               # smolagents
    ("FunctionAgent.run", "FunctionAgent.run", True),            # LlamaIndex's own class
    ("BaseWorkflowAgent.run_agent_step", "BaseWorkflowAgent.run_agent_step", False),  # not a run method
])
def test_the_owner_of_a_run_method_names_the_task(name, owner, generic):
    assert conventions.run_owner(name) == owner
    assert conventions.is_generic_name(owner) is generic


# --- Agno 3.1 + OpenInference --------------------------------------------------------------

def agno_spans():
    """agno_openinference/: the root `support_agent.arun` (AGENT, agent.name), the model call
    `OpenAIChat.ainvoke` (the request model only), the tool span named after the tool, its result
    Python's str() of the dict the tool returned (text/plain), no call id."""
    root = span(12, 1, name="support_agent.arun", end_ms=215.6, attributes={
        "openinference.span.kind": "AGENT", "agent.name": "support-agent", "graph.node.id": "16f63b090141f7c3",
        "graph.node.name": "support-agent", "session.id": "bd2ec9f1-450e-422d-b45f-f45428de9c0a",
        "input.value": "Where is my order ord_0001x?"})
    chat = span(12, 2, parent=1, name="OpenAIChat.ainvoke", start_ms=0.9, end_ms=67.2, attributes={
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.provider": "OpenAI",
        "llm.system": "openai", "llm.token_count.prompt": 125, "llm.token_count.completion": 12,
        "llm.token_count.total": 137, "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_BLHI6RawreK1doWkzCuemf9t",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup_customer"})
    tool = span(12, 3, parent=1, name="lookup_customer", start_ms=67.5, end_ms=95.2, attributes={
        "openinference.span.kind": "TOOL", "tool.name": "lookup_customer",
        "tool.description": "Find a customer by e-mail address.",
        "input.value": '{"email": "user1@example.com"}', "input.mime_type": "application/json",
        "tool.parameters": '{"email": "user1@example.com"}',
        "output.value": "{'customer_id': 'cus_user1', 'tier': 'gold', 'vip': True, 'note': None}",
        "output.mime_type": "text/plain"})
    return [root, chat, tool]


@pytest.mark.django_db
def test_agno_task_steps_and_a_result_written_as_python_writes_it(project):
    """Agno's OpenInference records a tool's result as str() of what it returned: read as the dict
    it is, so results compare and show as data, as every other family's JSON results do."""
    from ingest.services import batch_store

    out = decoded(agno_spans(), **{"service.name": "agno-support"})
    tool = {s.name: s for s in out.batch.steps}["lookup_customer"]
    assert (tool.kind, tool.tool_args) == ("tool", {"email": "user1@example.com"})
    assert json.loads(tool.tool_result) == {"customer_id": "cus_user1", "tier": "gold", "vip": True, "note": None}
    batch_store(project=project, batch=out.batch)
    [task] = Task.objects.filter(project=project)
    assert (task.name, task.session_id, task.input_tokens, task.output_tokens) == (
        "support-agent", "bd2ec9f1-450e-422d-b45f-f45428de9c0a", 125, 12)
    assert sorted(task.steps.values_list("kind", flat=True)) == ["agent", "llm", "tool"]


@pytest.mark.parametrize("text", [
    "{'a': 1",                       # not a literal: kept as the text it came as
    "{'a': __import__('os')}",       # never evaluated
    "[1, 2] and more",
])
def test_a_result_that_is_not_a_python_literal_stays_text(text):
    tool = span(13, 1, name="t", attributes={"openinference.span.kind": "TOOL", "tool.name": "t",
                                             "output.value": text})
    assert steps([tool])["t"].tool_result == text


# --- newer GenAI conventions ----------------------------------------------------------------

def test_streaming_attributes_of_the_newer_conventions():
    facts = conventions.span_facts({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                    "gen_ai.response.time_to_first_chunk": 0.075, "gen_ai.request.stream": True})
    assert (facts.ttft_ms, facts.streamed) == (pytest.approx(75.0), True)
    not_streamed = conventions.span_facts({"gen_ai.operation.name": "chat", "gen_ai.request.stream": False})
    assert not_streamed.streamed is False


@pytest.mark.django_db
def test_a_remote_agent_client_span_and_its_internal_span_are_agent_steps_counted_once(project):
    """invoke_agent CLIENT (a remote agent) with the remote side's invoke_agent INTERNAL under it
    and invoke_workflow at the root; usage on both agent spans, the model call's own under them."""
    from ingest.services import batch_store

    spans = [
        span(10, 1, name="invoke_workflow triage", end_ms=900, attributes={
            "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "triage"}),
        with_kind(span(10, 2, parent=1, name="invoke_agent billing", end_ms=800, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing", "gen_ai.agent.version": "2.1",
            "server.address": "agents.internal", "gen_ai.usage.input_tokens": 300}), CLIENT),
        span(10, 3, parent=2, name="invoke_agent billing", start_ms=5, end_ms=790, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing", "gen_ai.usage.input_tokens": 300}),
        with_kind(span(10, 4, parent=3, name="chat gpt-4o", start_ms=10, end_ms=400, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 300}), CLIENT),
    ]
    out = decoded(spans)
    kinds = {(s.step_id[-1], s.kind) for s in out.batch.steps}
    assert kinds == {("1", "framework"), ("2", "agent"), ("3", "agent"), ("4", "llm")}
    batch_store(project=project, batch=out.batch)
    task = Task.objects.get(project=project)
    assert (task.name, task.input_tokens) == ("triage", 300)


def test_the_agent_version_is_the_release_when_the_service_names_none():
    root = span(11, 1, name="invoke_agent support", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support", "gen_ai.agent.version": "2.3.0"})
    request = trace_request([root], resource={"service.name": "svc"})
    out = otlp.decode_traces(request.SerializeToString(), media=otlp.PROTOBUF)
    assert (out.batch.tasks[0].release, out.batch.steps[0].release) == ("2.3.0", "2.3.0")
    assert decoded([root]).batch.tasks[0].release == "1.0.0"  # service.version still wins


# --- MCP (semantic-conventions-genai docs/gen-ai/mcp.md) ----------------------------------

def test_an_mcp_tool_call_is_a_tool_step_naming_its_server_and_the_servers_span_is_not_a_second_call():
    client = with_kind(span(12, 2, parent=1, name="tools/call get-weather", start_ms=10, end_ms=250, attributes={
        "mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get-weather",
        "gen_ai.tool.call.arguments": '{"location": "Paris"}', "mcp.session.id": "191c4850af6c49e08843a3f6c80e5046",
        "server.address": "weather.mcp.local", "server.port": 8443, "network.transport": "tcp",
        "jsonrpc.request.id": "7"}), CLIENT)
    server = with_kind(span(12, 3, parent=2, name="tools/call get-weather", start_ms=20, end_ms=240, attributes={
        "mcp.method.name": "tools/call", "gen_ai.tool.name": "get-weather",
        "mcp.session.id": "191c4850af6c49e08843a3f6c80e5046"}), SERVER)
    listing = with_kind(span(12, 4, parent=1, name="tools/list", end_ms=8, attributes={
        "mcp.method.name": "tools/list"}), CLIENT)
    # The older draft that opentelemetry-instrumentation-mcp writes: mcp.tool.name, one attribute
    # per argument.
    draft = with_kind(span(12, 5, parent=1, name="tools/call echo", start_ms=260, end_ms=300, attributes={
        "mcp.method.name": "tools/call", "mcp.tool.name": "echo", "mcp.request.argument.text": '"hi"',
        "mcp.request.argument.times": "2"}), CLIENT)
    root = span(12, 1, name="invoke_agent weather", end_ms=400, attributes={"gen_ai.operation.name": "invoke_agent"})
    found = {s.step_id[-1]: s for s in decoded([root, client, server, listing, draft]).batch.steps}
    call = found["2"]
    assert (call.kind, call.tool_name, call.tool_args) == ("tool", "get-weather", {"location": "Paris"})
    assert call.attributes["agentops.tool.server"] == "weather.mcp.local:8443"
    assert call.attributes["mcp.session.id"] == "191c4850af6c49e08843a3f6c80e5046"
    assert found["3"].kind == "other" and found["4"].kind == "other"
    assert (found["5"].kind, found["5"].tool_name, found["5"].tool_args) == ("tool", "echo", {"text": "hi", "times": 2})
