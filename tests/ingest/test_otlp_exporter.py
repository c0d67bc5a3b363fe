"""The real OpenTelemetry SDK and its OTLP/HTTP exporter, pointed at a live agentops: a GenAI
agent trace must read back through GET /api/v1/tasks/<trace id> with the right kinds, models,
tokens, TTFT, tool arguments, release and environment."""

from __future__ import annotations

import json

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from ingest.models import Step, Task

MS = 1_000_000
T0 = 1_793_000_000_000_000_000


def run_agent(tracer, *, on_children_done=None) -> str:
    """invoke_agent root → chat (tool call) → two execute_tool → chat (streamed) → answer.
    Returns the trace id hex. Spans are exported as they end, so the root comes last."""
    root = tracer.start_span("invoke_agent support", start_time=T0, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-agent",
        "gen_ai.conversation.id": "conv-42"})
    ctx = set_span_in_context(root)
    chat = tracer.start_span("chat llama-3-70b", context=ctx, start_time=T0 + 10 * MS, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "groq",
        "gen_ai.request.model": "llama-3-70b", "gen_ai.response.model": "llama-3-70b-8192",
        "gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 64,
        "gen_ai.response.time_to_first_chunk": 0.185, "hw.id": "groq-lpu-03"})
    chat.end(end_time=T0 + 400 * MS)
    for i, city in enumerate(["Paris", "Oslo"]):
        tool = tracer.start_span("execute_tool get_weather", context=ctx,
                                 start_time=T0 + (410 + 300 * i) * MS, attributes={
                                     "gen_ai.operation.name": "execute_tool",
                                     "gen_ai.tool.name": "get_weather",
                                     "gen_ai.tool.call.id": f"call_{i}",
                                     "gen_ai.tool.call.arguments": json.dumps({"city": city, "units": "C"})})
        if city == "Oslo":
            tool.set_status(Status(StatusCode.ERROR, "weather service timed out"))
        tool.end(end_time=T0 + (690 + 300 * i) * MS)
    final = tracer.start_span("chat llama-3-70b", context=ctx, start_time=T0 + 1000 * MS, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "llama-3-70b",
        "gen_ai.usage.input_tokens": 990, "gen_ai.usage.output_tokens": 120})
    final.add_event("gen_ai.content.completion.chunk", timestamp=T0 + 1240 * MS)
    final.end(end_time=T0 + 1900 * MS)
    if on_children_done:
        on_children_done(format(root.get_span_context().trace_id, "032x"))
    root.end(end_time=T0 + 2000 * MS)
    return format(root.get_span_context().trace_id, "032x")


def tracer_for(exporter, resource):
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, provider.get_tracer("agent", "1.0")


def read_task(live_server, read_key, trace_id):
    r = requests.get(f"{live_server.url}/api/v1/tasks/{trace_id}",
                     headers={"Authorization": f"Bearer {read_key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def assert_agent_trace(detail):
    assert detail["name"] == "support-agent"
    assert detail["release"] == "2.3.0"
    assert detail["environment"] == "prod"
    assert detail["session_id"] == "conv-42"
    assert detail["duration_ms"] == 2000.0
    assert detail["step_count"] == 5
    assert detail["input_tokens"] == 812 + 990
    steps = detail["steps"]
    assert [s["kind"] for s in steps] == ["agent", "llm", "tool", "tool", "llm"]
    assert all(s["depth"] == 1 for s in steps[1:])
    first, paris, oslo, final = steps[1:]
    assert (first["model"], first["provider"], first["device"]) == ("llama-3-70b-8192", "groq", "groq-lpu-03")
    assert (first["input_tokens"], first["output_tokens"]) == (812, 64)
    assert first["ttft_ms"] == pytest.approx(185.0)
    assert final["model"] == "llama-3-70b"
    assert final["ttft_ms"] == pytest.approx(240.0) and final["streamed"] is True
    assert (paris["tool_name"], paris["tool_args"]) == ("get_weather", {"city": "Paris", "units": "C"})
    assert oslo["tool_args"] == {"city": "Oslo", "units": "C"}
    assert (oslo["status"], oslo["error"]) == ("error", "weather service timed out")
    assert paris["tool_call_id"] == "call_0"


def test_sdk_exporter_trace_reads_back_through_the_task_api(live_server, project, ingest_key, read_key):
    exporter = OTLPSpanExporter(endpoint=f"{live_server.url}/v1/traces",
                                headers={"Authorization": f"Bearer {ingest_key}"})
    provider, tracer = tracer_for(exporter, Resource.create({
        "service.name": "support", "service.version": "2.3.0", "deployment.environment.name": "prod"}))
    seen_before_root = {}

    def before_root(trace_id):
        # The root span has not arrived yet: the task already exists with the resource's facts.
        seen_before_root.update(read_task(live_server, read_key, trace_id))

    trace_id = run_agent(tracer, on_children_done=before_root)
    provider.shutdown()
    assert seen_before_root["release"] == "2.3.0" and seen_before_root["environment"] == "prod"
    assert seen_before_root["step_count"] == 4
    assert_agent_trace(read_task(live_server, read_key, trace_id))
    assert Task.objects.get(project=project, task_id=trace_id).attributes["service.name"] == "support"


def test_exporter_configured_only_by_standard_env_vars_with_gzip(live_server, monkeypatch, project,
                                                                 ingest_key, read_key):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", live_server.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer {ingest_key}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "support")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.version=2.3.0,deployment.environment=prod")
    exporter = OTLPSpanExporter()
    assert exporter._compression.value == "gzip"  # the SDK honoured the env var: bodies are gzipped
    provider, tracer = tracer_for(exporter, Resource.create())
    trace_id = run_agent(tracer)
    provider.shutdown()
    assert_agent_trace(read_task(live_server, read_key, trace_id))


def test_exporter_with_explicit_gzip_compression(live_server, project, ingest_key, read_key):
    exporter = OTLPSpanExporter(endpoint=f"{live_server.url}/v1/traces", compression=Compression.Gzip,
                                headers={"Authorization": f"Bearer {ingest_key}"})
    provider, tracer = tracer_for(exporter, Resource.create({
        "service.version": "2.3.0", "deployment.environment.name": "prod"}))
    trace_id = run_agent(tracer)
    provider.shutdown()
    assert_agent_trace(read_task(live_server, read_key, trace_id))


def test_exporter_with_a_wrong_key_stores_nothing(live_server, project, ingest_key):
    exporter = OTLPSpanExporter(endpoint=f"{live_server.url}/v1/traces",
                                headers={"Authorization": "Bearer ao_nothere_secret"})
    provider, tracer = tracer_for(exporter, Resource.create({"service.version": "1"}))
    span = tracer.start_span("invoke_agent x", start_time=T0)
    span.end(end_time=T0 + MS)
    provider.shutdown()
    assert not Step.objects.exists()
