"""Saved OpenInference and OpenLLMetry payloads, and the attribute conventions, decoded by the
pure decoder (no database): kinds, models, tokens, TTFT, tools, task facts."""

from __future__ import annotations

import json

import pytest
import requests

from ingest import conventions, otlp
from ingest.models import Task
from tests.ingest.fixtures.otlp import load_json


def decode(payload: dict) -> otlp.Decoded:
    decoded = otlp.decode_traces(json.dumps(payload).encode(), media=otlp.JSON)
    assert decoded.rejected == 0, decoded.error_message()
    return decoded


def steps_by_name(decoded):
    out = {}
    for step in decoded.batch.steps:
        out.setdefault(step.name, []).append(step)
    return out


def test_openinference_langchain_trace():
    decoded = decode(load_json("openinference_langchain.json"))
    [task] = decoded.batch.tasks
    assert (task.task_id, task.name, task.release, task.environment, task.session_id) == (
        "4bf92f3577b34da6a3ce929d0e0e4736", "AgentExecutor", "1.4.2", "prod", "sess-9")
    assert task.attributes["service.name"] == "weather-bot"
    steps = steps_by_name(decoded)
    assert steps["AgentExecutor"][0].kind == "framework"
    first, second = steps["ChatOpenAI"]
    assert (first.kind, first.model, first.provider) == ("llm", "gpt-4o-mini-2024-07-18", "openai")
    assert (first.input_tokens, first.output_tokens) == (152, 21)
    assert first.ttft_ms == pytest.approx(211.0)  # First Token Stream Event at +226 ms, span start +15 ms
    assert first.streamed is True
    assert first.parent_step_id == "53995c3f42cd8ad8"
    # The prompt stays in the attributes; it is not taken for tool arguments.
    assert first.tool_args is None
    assert "llm.input_messages.1.message.content" in first.attributes
    assert second.cached_tokens == 128 and second.ttft_ms == pytest.approx(91.0)
    [tool] = steps["get_weather"]
    assert (tool.kind, tool.tool_name, tool.tool_args) == ("tool", "get_weather", {"city": "Paris"})
    assert "tool.parameters" in tool.attributes  # the schema, not the arguments
    assert steps["VectorStoreRetriever"][0].kind == "retrieval"
    assert steps["content_filter"][0].kind == "other"
    assert all(s.release == "1.4.2" and s.session_id == "sess-9" for s in decoded.batch.steps)


def test_openllmetry_traceloop_trace():
    decoded = decode(load_json("openllmetry_traceloop.json"))
    [task] = decoded.batch.tasks
    assert (task.name, task.release, task.environment, task.session_id) == (
        "support_agent", "3.1.0", "staging", "chat-77")
    steps = steps_by_name(decoded)
    assert steps["support_agent.workflow"][0].kind == "framework"
    assert steps["plan.task"][0].kind == "framework"
    streamed, failed = steps["openai.chat"]
    assert (streamed.kind, streamed.model, streamed.provider) == ("llm", "gpt-4o-2024-08-06", "openai")
    assert (streamed.input_tokens, streamed.output_tokens, streamed.streamed) == (230, 41, True)
    assert streamed.ttft_ms == pytest.approx(330.0)  # first completion chunk, not the second
    assert streamed.parent_step_id == "1000000000000002"
    assert (failed.model, failed.cached_tokens) == ("gpt-4o", 256)
    assert (failed.status, failed.error) == ("error", "Error code: 429 - rate limit exceeded")
    [tool] = steps["lookup_order.tool"]
    assert (tool.kind, tool.tool_name, tool.tool_args) == ("tool", "lookup_order", {"order_id": "A-1001"})
    assert steps["chroma.query"][0].kind == "retrieval"
    assert all(s.environment == "staging" for s in decoded.batch.steps)


def test_openinference_trace_split_across_requests_root_last(live_server, project, ingest_key, read_key):
    payload = load_json("openinference_langchain.json")
    spans = payload["resourceSpans"][0]["scopeSpans"][0]["spans"]
    children, root = spans[:-1], spans[-1:]
    url = f"{live_server.url}/v1/traces"
    headers = {"Authorization": f"Bearer {ingest_key}", "Content-Type": "application/json"}
    for number, part in enumerate((children[:2], children[2:], root)):
        payload["resourceSpans"][0]["scopeSpans"][0]["spans"] = part
        assert requests.post(url, data=json.dumps(payload), headers=headers, timeout=30).status_code == 200
        if number == 1:  # every child is in, the root is not
            waiting = Task.objects.get(project=project)
            assert (waiting.release, waiting.session_id, waiting.reported) == ("1.4.2", "sess-9", False)
            assert (waiting.step_count, waiting.name) == (5, "ChatOpenAI")
    detail = requests.get(f"{live_server.url}/api/v1/tasks/4bf92f3577b34da6a3ce929d0e0e4736",
                          headers={"Authorization": f"Bearer {read_key}"}, timeout=30).json()
    # AgentExecutor is LangChain's generic root, and no agent span names the agent: the task
    # is named after its service.
    assert (detail["name"], detail["step_count"], detail["duration_ms"]) == ("weather-bot", 6, 2000.0)
    assert [s["kind"] for s in detail["steps"]] == ["framework", "llm", "retrieval", "tool", "llm", "other"]


@pytest.mark.parametrize("attributes,kind", [
    ({"gen_ai.operation.name": "chat"}, "llm"),
    ({"gen_ai.operation.name": "embeddings"}, "llm"),
    ({"gen_ai.operation.name": "generate_content"}, "llm"),
    ({"gen_ai.operation.name": "execute_tool"}, "tool"),
    ({"gen_ai.operation.name": "retrieval"}, "retrieval"),
    ({"gen_ai.operation.name": "create_agent"}, "agent"),
    ({"gen_ai.operation.name": "invoke_workflow"}, "framework"),
    ({"gen_ai.operation.name": "some_future_operation", "gen_ai.request.model": "m"}, "llm"),
    ({"gen_ai.operation.name": "some_future_operation"}, "framework"),
    ({"openinference.span.kind": "EMBEDDING"}, "llm"),
    ({"openinference.span.kind": "RERANKER"}, "retrieval"),
    ({"openinference.span.kind": "AGENT"}, "agent"),
    ({"openinference.span.kind": "EVALUATOR"}, "other"),
    ({"traceloop.span.kind": "agent"}, "agent"),
    ({"traceloop.span.kind": "tool"}, "tool"),
    ({"llm.request.type": "completion"}, "llm"),
    ({"db.system": "qdrant"}, "retrieval"),
    ({"db.system": "postgresql"}, "other"),
    ({"agentops.step.kind": "queue"}, "queue"),
    ({"http.method": "GET"}, "other"),
    # GenAI semconv wins over the older conventions when both are present.
    ({"gen_ai.operation.name": "execute_tool", "traceloop.span.kind": "task"}, "tool"),
])
def test_step_kind_comes_from_attributes(attributes, kind):
    assert conventions.step_kind(attributes) == kind


def test_old_and_new_token_names():
    old = conventions.span_facts({"gen_ai.usage.prompt_tokens": 10, "gen_ai.usage.completion_tokens": 3})
    new = conventions.span_facts({"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 3})
    assert (old.input_tokens, old.output_tokens) == (new.input_tokens, new.output_tokens) == (10, 3)
    assert conventions.span_facts({"gen_ai.usage.input_tokens": "12"}).input_tokens == 12
    bad = conventions.span_facts({"gen_ai.usage.input_tokens": -4})
    assert bad.input_tokens is None and "gen_ai.usage.input_tokens" not in bad.used


def test_old_provider_and_environment_names():
    assert conventions.span_facts({"gen_ai.system": "anthropic"}).provider == "anthropic"
    assert conventions.span_facts({"gen_ai.provider.name": "aws.bedrock", "gen_ai.system": "x"}).provider == "aws.bedrock"
    assert conventions.resource_environment({"deployment.environment": "qa"}) == "qa"
    assert conventions.resource_environment({"deployment.environment.name": "prod",
                                             "deployment.environment": "qa"}) == "prod"


def test_tool_arguments_that_do_not_parse_stay_text():
    facts = conventions.span_facts({"gen_ai.operation.name": "execute_tool",
                                     "gen_ai.tool.call.arguments": "{not json"})
    assert facts.tool_args == "{not json"


def test_openllmetry_positional_tool_arguments_are_kept():
    facts = conventions.span_facts({"traceloop.span.kind": "tool",
                                     "traceloop.entity.input": '{"args": ["A-1"], "kwargs": {"x": 1}}'})
    assert facts.tool_args == {"args": ["A-1"], "kwargs": {"x": 1}}


def test_device_comes_from_the_span_or_its_resource():
    assert conventions.span_facts({"hw.id": "gpu-7"}, resource={"hw.id": "node"}).device == "gpu-7"
    assert conventions.span_facts({}, resource={"hw.id": "corsair-2"}).device == "corsair-2"


def test_an_openllmetry_model_it_could_not_serialise_is_named_by_langchain_metadata():
    facts = conventions.span_facts({"gen_ai.operation.name": "chat", "gen_ai.request.model": "unknown",
                                    "traceloop.association.properties.ls_model_name": "scripted-chat-8b"})
    assert facts.model == "scripted-chat-8b"
    named = conventions.span_facts({"gen_ai.operation.name": "chat", "gen_ai.response.model": "gpt-4o",
                                    "traceloop.association.properties.ls_model_name": "gpt-4o-mini"})
    assert named.model == "gpt-4o"


def test_requested_call_ids_from_flattened_attributes_in_index_order():
    attributes = {"gen_ai.operation.name": "chat",
                  **{f"gen_ai.completion.0.tool_calls.{j}.id": f"call_{j}" for j in (10, 2, 0)},
                  "gen_ai.completion.0.tool_calls.2.name": "search"}
    assert conventions.span_facts(attributes).tool_call_ids == ["call_0", "call_2", "call_10"]


def test_a_langchain_callback_payload_gives_its_inputs_and_call_id():
    payload = {"input_str": "{'order_id': 'ord_1'}", "tags": ["seq:step:1"],
               "metadata": {"langgraph_step": 7, "checkpoint_ns": "tools:ab12"},
               "inputs": {"order_id": "ord_1"}, "kwargs": {"tool_call_id": "call_9", "color": "green"}}
    result = {"output": {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "ToolMessage"],
                         "kwargs": {"content": '{"status": "shipped"}', "tool_call_id": "call_9"}}}
    facts = conventions.span_facts({"traceloop.span.kind": "tool", "gen_ai.tool.name": "get_order",
                                    "gen_ai.tool.call.arguments": json.dumps(payload),
                                    "gen_ai.tool.call.result": json.dumps(result)})
    assert (facts.tool_args, facts.tool_call_id, facts.tool_result) == (
        {"order_id": "ord_1"}, "call_9", '{"status": "shipped"}')


@pytest.mark.parametrize("value, duration_ms, expected, note", [
    (0.132, 133, 132.0, None),                   # seconds, as the conventions say
    (132, 133, 132.0, "read as milliseconds"),   # Strands: milliseconds under a seconds name
    (5000, 133, None, "dropped"),                # fits neither reading
    (0.25, 100, None, "dropped"),                # 250 ms for a 100 ms call; 0.25 ms is no TTFT
])
def test_a_ttft_longer_than_its_call_is_read_in_milliseconds_or_dropped(value, duration_ms, expected, note):
    from tests.ingest.fixtures.otlp import span, trace_request

    request = trace_request([span(1, 2, name="chat", end_ms=duration_ms, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.server.time_to_first_token": value})])
    [step] = otlp.decode_traces(request.SerializeToString(), media=otlp.PROTOBUF).batch.steps
    assert step.ttft_ms == (pytest.approx(expected) if expected is not None else None)
    if note:
        assert note in step.attributes["agentops.ttft_note"]
    else:
        assert "agentops.ttft_note" not in step.attributes


@pytest.mark.parametrize("attributes, kind", [
    ({"gen_ai.operation.name": "execute_event_loop_cycle"}, "framework"),   # Strands: wraps chat + tools
    ({"gen_ai.operation.name": "step 1"}, "framework"),
    ({"gen_ai.operation.name": "speech_to_text", "gen_ai.request.model": "whisper-1"}, "llm"),
    ({"gen_ai.operation.name": "rerank_chat", "gen_ai.usage.input_tokens": 40}, "llm"),
])
def test_an_unknown_operation_is_model_work_only_with_a_model_or_tokens(attributes, kind):
    assert conventions.span_facts(attributes).kind == kind


def test_smolagents_wrapped_tool_arguments_are_unwrapped():
    """smolagents' OpenInference TOOL span: input.value = {"args": [], "sanitize_inputs_outputs":
    true, "kwargs": {...}}; the arguments are the kwargs, so a repeat compares equal."""
    wrapped = json.dumps({"args": [], "sanitize_inputs_outputs": True, "kwargs": {"city": "Paris"}})
    facts = conventions.span_facts({"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                                     "input.value": wrapped})
    assert facts.tool_args == {"city": "Paris"}


def test_an_sdk_generated_instance_id_names_no_server():
    # The OpenTelemetry SDKs give a process a random service.instance.id when none is set (vLLM's
    # own tracer does): that is the process, not an address the server's metrics or clients share.
    # The Collector's Prometheus receiver puts the scrape target (host:port) there, which is one.
    vllm = {"service.name": "vllm", "service.instance.id": "4da766f8-f6d5-4895-bfcd-8f4f2436b253"}
    assert conventions.server_key({}, vllm) == ""
    assert conventions.server_key({}, {**vllm, "host.name": "gpu-node-3"}) == "gpu-node-3"
    assert conventions.server_key({}, {"service.instance.id": "VLLM-1:8000"}) == "vllm-1:8000"


def test_a_servers_port_is_a_number_however_it_is_sent():
    # A span sends server.port as an int, a Prometheus label as a string, some bridges a float.
    for port in (8000, "8000", " 8000", 8000.0, "8000.0"):
        assert conventions.server_key({"server.address": "vLLM-a", "server.port": port}, {}) == "vllm-a:8000", port
    # No server.port: the scrape's instance host:port of the same host gives it.
    scraped = {"server.address": "vllm-b", "service.instance.id": "vllm-b:8000"}
    assert conventions.server_key({}, scraped) == "vllm-b:8000"
    assert conventions.server_key({}, {**scraped, "service.instance.id": "other-host:9000"}) == "vllm-b"


def test_a_server_span_names_its_gpus_and_a_gpu_series_its_pod():
    assert conventions.span_gpus({}, {"hw.id": ["GPU-0", "GPU-1"]}) == ["GPU-0", "GPU-1"]
    assert conventions.span_gpus({"hw.id": "GPU-2"}, {"hw.id": ["GPU-0"]}) == ["GPU-2"]
    point = {"gpu": "5", "UUID": "GPU-5", "Hostname": "gpu-node-7", "pod": "vllm-b-0", "namespace": "inference",
             "container": "vllm"}
    # The resource's k8s.* describe the exporter's own pod, not the GPU's.
    exporter = {"k8s.pod.name": "dcgm-exporter-x2k4p"}
    assert conventions.device_labels(point, exporter, role=conventions.ROLE_GPU) == {
        "k8s.pod.name": "vllm-b-0", "k8s.namespace.name": "inference", "k8s.container.name": "vllm", "gpu": "5"}
    server = {"k8s.pod.name": "vllm-b-0", "k8s.namespace.name": "inference", "k8s.statefulset.name": "vllm-b",
              "service.name": "vllm"}
    assert conventions.device_labels({}, server, role=conventions.ROLE_SERVER) == {
        "k8s.pod.name": "vllm-b-0", "k8s.namespace.name": "inference", "k8s.statefulset.name": "vllm-b"}
