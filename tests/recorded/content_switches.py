"""Each recorded family's payloads as its library sends them with its content switch off.

Recorded (RECORDED): every family was recorded a second time with its library's own switch set
(`make fixtures`, the recorder's `# content switch:` line, into
tests/fixtures/agents/content_off/<family>/, 3 December 2026, the versions of the content-on
recordings): those recordings are the content-off payloads the tests replay. Strands' (1.62:
OTEL_SEMCONV_STABILITY_OPT_IN token `gen_ai_unredacted_attributes=`, values become "[REDACTED]") too:
ingest reads "[REDACTED]" as hidden content, as it reads OpenInference's "__REDACTED__".

Derived (SWITCHES): the content-on recordings with exactly the attributes the switch removes removed
(or redacted), as our reading of the library's source says. Spans of other scopes (an agent's
hand-made spans) are untouched. Every rule is checked against its family's recording
(test_content_switches.py: per scope and span kind, the same attribute keys, the same redacted ones,
the same keys inside JSON-valued attributes, the same event keys and status descriptions); the
comparison found what is marked "(recording)" below, which our reading had missed.

- OpenInference (openinference-instrumentation 0.1.72, `config.py` `TraceConfig.mask`), with
  OPENINFERENCE_HIDE_INPUTS=true and OPENINFERENCE_HIDE_OUTPUTS=true: `llm.tools*` dropped,
  `input.value` → "__REDACTED__", `input.mime_type` dropped, `output.value` → "__REDACTED__",
  `output.mime_type` dropped, retrieval document content → "__REDACTED__", `llm.input_messages*`
  and `llm.output_messages*` dropped, `llm.prompts*` / `llm.choices*` → "__REDACTED__", input and
  output images dropped (in mask's order: the first rule that matches a key decides). The same for
  the OpenAI Agents SDK, LangGraph, smolagents, LlamaIndex, CrewAI (and OpenInference's OpenAI
  instrumentation that traces CrewAI's model calls) and Agno.
- pydantic-ai (2.68, `InstrumentationSettings(include_content=False)`): tool spans lose
  `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` (and their `logfire.json_schema`
  properties; `_tool_manager.py`); message parts lose `content` (text, thinking, binary),
  `arguments` (tool_call) and `result` (tool_call_response), ids and names stay (`messages.py`
  `otel_message_parts`); `gen_ai.system_instructions` and `final_result` are not set;
  (recording) `model_request_parameters` loses its instruction parts' `content` and
  `prompted_output_template`, an `exception` event keeps only `exception.type` and
  `exception.escaped`, and an ERROR status has no description (`_instrumentation.py`).
- OpenTelemetry GenAI utilities (opentelemetry-util-genai 1.1b0, openai-v2 2.4b0) with
  OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT unset (NO_CONTENT, the default): no
  `gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.system_instructions`
  (`span_utils._maybe_set_span_messages`, `get_content_attributes`).
- OpenLLMetry (opentelemetry-instrumentation-langchain 0.62.4) with TRACELOOP_TRACE_CONTENT=false
  (`utils.should_send_prompts`): no `traceloop.entity.input/output`, `gen_ai.task.input/output`,
  `gen_ai.tool.call.arguments/result` (callback_handler.py), `gen_ai.input.messages`,
  `gen_ai.output.messages`, `gen_ai.system_instructions` (span_utils.py); `gen_ai.tool.definitions`
  from the request's tools stays (set_request_params is not gated); (recording) so does
  `gen_ai.system_instructions` on the `create_agent` span: patch.py sets it from the agent's
  prompt without asking should_send_prompts.
- Google ADK 2.13 (telemetry schema 2): the content-on recording set
  OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only; unset (NO_CONTENT, as for the GenAI
  utilities above) no `gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.system_instructions`,
  `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result` on its spans (`gen_ai.tool.call.id` and
  `gen_ai.tool.name` stay).
- The AI SDK has no rule: its content-off payloads are only recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

REDACTED = "__REDACTED__"


def _within(key: str, namespace: str) -> bool:
    return key == namespace or key.startswith(namespace + ".")


def _openinference(key: str, value, operation: str = ""):
    """OPENINFERENCE_HIDE_INPUTS=true + OPENINFERENCE_HIDE_OUTPUTS=true: the new value, or None to drop."""
    if "llm.tools" in key:
        return None
    if key in ("input.value", "output.value"):
        return REDACTED
    if key in ("input.mime_type", "output.mime_type"):
        return None
    if _within(key, "retrieval.documents") and key.endswith(("document.content", "document.metadata")):
        return REDACTED
    if "llm.input_messages" in key:
        return None
    if "llm.prompts" in key:
        return REDACTED
    if "llm.output_messages" in key:
        return None
    if "llm.choices" in key:
        return REDACTED
    if _within(key, "input.images") or _within(key, "output.images"):
        return None
    return value


_PYDANTIC_PART_CONTENT = {"text": ("content",), "thinking": ("content",), "binary": ("content",),
                          "tool_call": ("arguments",), "tool_call_response": ("result",)}


def _without_content(messages_json: str) -> str:
    messages = json.loads(messages_json)
    for message in messages:
        for part in message.get("parts", []):
            for key in _PYDANTIC_PART_CONTENT.get(part.get("type"), ()):
                part.pop(key, None)
    return json.dumps(messages, separators=(",", ":"))


def _pydantic(key: str, value, operation: str = ""):
    if key in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.system_instructions",
               "final_result"):
        return None
    if key in ("gen_ai.input.messages", "gen_ai.output.messages", "pydantic_ai.all_messages"):
        return _without_content(value)
    if key == "model_request_parameters":  # `_instrumentation.py` (the instructions are message text)
        parameters = json.loads(value)
        for part in parameters.get("instruction_parts") or []:
            part.pop("content", None)
        if parameters.get("prompted_output_template") is not None:
            parameters["prompted_output_template"] = None
        return json.dumps(parameters, separators=(",", ":"))
    if key == "logfire.json_schema":
        schema = json.loads(value)
        for gone in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.system_instructions",
                     "final_result"):
            schema.get("properties", {}).pop(gone, None)
        return json.dumps(schema, separators=(",", ":"))
    return value


def _pydantic_span(span) -> None:
    """include_content=False also withholds what an error repeats (`_instrumentation.py`
    `record_exception`, `set_error_status`): the exception event keeps only exception.type and
    exception.escaped, the ERROR status no description."""
    for event in span.events:
        if event.name == "exception":
            kept = [kv for kv in event.attributes if kv.key in ("exception.type", "exception.escaped")]
            copies = [type(kv)() for kv in kept]
            for copy, kv in zip(copies, kept, strict=True):
                copy.CopyFrom(kv)
            del event.attributes[:]
            event.attributes.extend(copies)
    span.status.message = ""


def _otel_genai(key: str, value, operation: str = ""):
    return None if key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions") else value


_TRACELOOP_CONTENT = {"traceloop.entity.input", "traceloop.entity.output", "gen_ai.task.input", "gen_ai.task.output",
                      "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.input.messages",
                      "gen_ai.output.messages", "gen_ai.system_instructions"}


def _openllmetry(key: str, value, operation: str = ""):
    # `create_agent` spans (patch.py, create_agent's wrapper) set gen_ai.system_instructions from the
    # agent's prompt whatever TRACELOOP_TRACE_CONTENT says (the content-off recording keeps it).
    if key == "gen_ai.system_instructions" and operation == "create_agent":
        return value
    return None if key in _TRACELOOP_CONTENT else value


_ADK_CONTENT = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}


def _adk(key: str, value, operation: str = ""):
    return None if key in _ADK_CONTENT else value


_OI_OFF = "OPENINFERENCE_HIDE_INPUTS=true OPENINFERENCE_HIDE_OUTPUTS=true"
_GENAI_OFF = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT unset"
# The derivation rules: family → (the scope the switch belongs to, the switch as a user sets it, the
# attribute rule). Every family whose library's switch is known here, recorded with content off or not:
# for a recorded one the rule is checked against the recording (test_content_switches.py).
SWITCHES: dict[str, tuple[str, str, Callable]] = {
    "pydantic_ai": ("pydantic-ai", "InstrumentationSettings(include_content=False)", _pydantic),
    "openai_v2": ("opentelemetry.util.genai.handler", _GENAI_OFF, _otel_genai),
    "openai_agents": ("openinference.instrumentation.openai_agents", _OI_OFF, _openinference),
    "langgraph_openinference": ("openinference.instrumentation.langchain", _OI_OFF, _openinference),
    "langgraph_openllmetry": ("opentelemetry.instrumentation.langchain", "TRACELOOP_TRACE_CONTENT=false",
                              _openllmetry),
    "smolagents_openinference": ("openinference.instrumentation.smolagents", _OI_OFF, _openinference),
    "llamaindex_openinference": ("openinference.instrumentation.llama_index", _OI_OFF, _openinference),
    "google_adk": ("gcp.vertex.agent", _GENAI_OFF, _adk),
    "crewai_openinference": ("openinference.instrumentation.crewai", _OI_OFF, _openinference),
    "agno_openinference": ("openinference.instrumentation.agno", _OI_OFF, _openinference),
}
# What a switch does beyond attributes, per span (found by comparing with the recordings).
SPAN_RULES: dict[str, Callable] = {"pydantic_ai": _pydantic_span}
# Further scopes of a family that the same switch masks: CrewAI's model calls are traced by
# OpenInference's OpenAI instrumentation, which reads the same environment.
ALSO_MASKED: dict[str, tuple[str, ...]] = {"crewai_openinference": ("openinference.instrumentation.openai",)}


def stripped(family: str, body: bytes) -> bytes:
    """One recorded request body as the library sends it with its content switch off."""
    scope_name, _, rule = SWITCHES[family]
    masked = {scope_name, *ALSO_MASKED.get(family, ())}
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            if scope_spans.scope.name not in masked:
                continue
            for span in scope_spans.spans:
                operation = next((kv.value.string_value for kv in span.attributes if kv.key == "gen_ai.operation.name"),
                                 "")
                kept = []
                for kv in span.attributes:
                    is_string = kv.value.WhichOneof("value") == "string_value"
                    new = rule(kv.key, kv.value.string_value if is_string else kv.value, operation)
                    if new is None:
                        continue
                    if isinstance(new, str) and (not is_string or new != kv.value.string_value):
                        kv.value.Clear()
                        kv.value.string_value = new
                    kept.append(kv)
                copies = [type(kv)() for kv in kept]
                for copy, kv in zip(copies, kept, strict=True):
                    copy.CopyFrom(kv)
                del span.attributes[:]
                span.attributes.extend(copies)
                if family in SPAN_RULES:
                    SPAN_RULES[family](span)
    return request.SerializeToString()


# The families recorded a second time with their library's switch set to hide content, by `make
# fixtures` (each recorder's `# content switch:` line) into tests/fixtures/agents/content_off/<family>/:
# family → (the scope the switch belongs to, the switch as it was set). Their content-off payloads are
# these recordings; the other families' are derived by SWITCHES.
RECORDED: dict[str, tuple[str, str]] = {
    "crewai_openinference": ("openinference.instrumentation.crewai", _OI_OFF),
    "agno_openinference": ("openinference.instrumentation.agno", _OI_OFF),
    # The application's tracer, which the SDK's OpenTelemetry integration is given.
    "ai_sdk": ("support-agent", "telemetry: { recordInputs: false, recordOutputs: false }"),
    "smolagents_openinference": ("openinference.instrumentation.smolagents", _OI_OFF),
    "llamaindex_openinference": ("openinference.instrumentation.llama_index", _OI_OFF),
    # `make fixtures` runs the recorder under `env -u OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`.
    "google_adk": ("gcp.vertex.agent", _GENAI_OFF),
    # The recorder passes it when AGENTOPS_FIXTURES_CONTENT=off.
    "pydantic_ai": ("pydantic-ai", "InstrumentationSettings(include_content=False)"),
    # As for ADK; the agent's own tool spans (scope orders_agent) keep their arguments and results.
    "openai_v2": ("opentelemetry.util.genai.handler", _GENAI_OFF),
    "openai_agents": ("openinference.instrumentation.openai_agents", _OI_OFF),
    "langgraph_openinference": ("openinference.instrumentation.langchain", _OI_OFF),
    "langgraph_openllmetry": ("opentelemetry.instrumentation.langchain", "TRACELOOP_TRACE_CONTENT=false"),
}
# Strands 1.62 (telemetry/tracer.py): an empty `gen_ai_unredacted_attributes=` list replaces every
# sensitive attribute and event field with "[REDACTED]" (its REDACTED_VALUE).
_STRANDS_OFF = "gen_ai_unredacted_attributes="
RECORDED.update({
    "strands_default": ("strands.telemetry.tracer", f"OTEL_SEMCONV_STABILITY_OPT_IN={_STRANDS_OFF}"),
    "strands_latest": ("strands.telemetry.tracer",
                       f"OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental,{_STRANDS_OFF}"),
})
FAMILIES = [*SWITCHES, *(f for f in RECORDED if f not in SWITCHES)]
MEDIA = {".pb": "application/x-protobuf", ".json": "application/json"}


def scope_of(family: str) -> str:
    return (SWITCHES.get(family) or RECORDED[family])[0]


def folder_of(fixtures: Path, family: str, *, content: bool) -> Path:
    """Where the family's payloads with content on or off are: its recording, or its content-off
    recording for the families recorded so."""
    return fixtures / family if content or family not in RECORDED else fixtures / "content_off" / family


def bodies(folder: Path, *, content: bool) -> list[bytes]:
    """The .pb bodies of a family's recording (content on), or derived from them (content off)."""
    raw = [p.read_bytes() for p in sorted(folder.glob("*.pb"))]
    return raw if content else [stripped(folder.name, b) for b in raw]


def recorded(folder: Path) -> list[tuple[bytes, str]]:
    return [(p.read_bytes(), MEDIA[p.suffix]) for p in sorted(folder.iterdir())
            if p.suffix in MEDIA and p.stem.isdigit()]


def payloads(fixtures: Path, family: str, *, content: bool) -> list[tuple[bytes, str]]:
    """The request bodies (and their content type) of a family with its content switch on or off:
    recorded where a content-off recording exists, else derived from the recording by the rules above."""
    if family in RECORDED or content:
        return recorded(folder_of(fixtures, family, content=content))
    return [(b, MEDIA[".pb"]) for b in bodies(fixtures / family, content=False)]


def derived(fixtures: Path, family: str) -> list[tuple[bytes, str]]:
    """The content-off payloads derived from the content-on recording, recorded with content off or not."""
    return [(b, MEDIA[".pb"]) for b in bodies(fixtures / family, content=False)]
