"""Instrumentation libraries, told apart by their OpenTelemetry scope (otel.scope.name / version),
and for each what it records of the content the analysis needs and the switch that changes it.

The switches are the libraries' own, read in their sources (docs/otlp.md, "Content switches", cites
them): OpenInference's TraceConfig (openinference-instrumentation config.py: OPENINFERENCE_HIDE_INPUTS
replaces input.value with "__REDACTED__" and drops llm.input_messages.*; _HIDE_OUTPUTS does the same to
output.value and llm.output_messages.*), OpenLLMetry's should_send_prompts() (TRACELOOP_TRACE_CONTENT,
opentelemetry-instrumentation-langchain utils.py), the OpenTelemetry GenAI utilities'
get_content_capturing_mode() (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, opentelemetry-util-genai),
pydantic-ai's InstrumentationSettings.include_content (_tool_manager.py, messages.py), the Vercel AI SDK's
experimental_telemetry recordInputs / recordOutputs (told by its spans' shape: it traces under the
application's tracer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Fix:
    """What to change: `switch` (an environment variable or setting, shown as code; empty when the
    library has none) and a sentence on it."""

    switch: str
    text: str


@dataclass(frozen=True)
class Library:
    key: str
    name: str
    args: Fix           # tool arguments on tool spans
    results: Fix        # tool results on tool spans
    call_ids: Fix       # the id of the call a tool span answered
    responses: Fix      # model responses (the calls they requested, by id)
    ttft: Fix           # time to first token on model calls
    session: Fix = None  # a session id on the task's spans (SESSION when the library has no way of its own)

    def __post_init__(self):
        if self.session is None:
            object.__setattr__(self, "session", SESSION)


SESSION = Fix("gen_ai.conversation.id", "set it (or session.id) on the root span, or session.id on the resource")
_OI = "OpenInference"
_OI_INPUTS = Fix("OPENINFERENCE_HIDE_INPUTS=false",
                 "unset it or set it to false (in code: TraceConfig(hide_inputs=False)); when it is on, tool input "
                 "arrives as __REDACTED__")
_OI_OUTPUTS = Fix("OPENINFERENCE_HIDE_OUTPUTS=false",
                  "unset it or set it to false (TraceConfig(hide_outputs=False)); when it is on, tool output arrives "
                  "as __REDACTED__ and the model's output messages are dropped")
_OI_RESPONSES = Fix("OPENINFERENCE_HIDE_OUTPUTS=false OPENINFERENCE_HIDE_OUTPUT_MESSAGES=false",
                    "unset both (TraceConfig(hide_outputs=False, hide_output_messages=False)): the requested calls' ids "
                    "are in llm.output_messages.*")
_OI_TTFT = Fix("", "no switch: this instrumentation sends no first-token event for the calls recorded")
_TRACELOOP = Fix("TRACELOOP_TRACE_CONTENT=true",
                 "the default; false (or Traceloop.init(trace_content=False)) drops tool inputs and outputs, prompts "
                 "and completions, and with them the call ids inside them")
_GENAI_CONTENT = Fix("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only",
                     "with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental; off (NO_CONTENT) by default, and "
                     "opentelemetry-util-genai 1.1b0 refuses true: span_only or span_and_event")
_PYDANTIC = Fix("InstrumentationSettings(include_content=True)",
                "the default; include_content=False drops gen_ai.tool.call.arguments and gen_ai.tool.call.result "
                "(tool-call ids stay)")
_OWN = Fix("gen_ai.tool.call.arguments / gen_ai.tool.call.result / gen_ai.tool.call.id",
           "no known library names this tracer: your own spans, or a library given your tracer (the Vercel AI "
           "SDK's OpenTelemetry integration takes one: there, its recordInputs / recordOutputs settings); set "
           "them on each tool span, and gen_ai.output.messages on model calls")
_OWN_TTFT = Fix("gen_ai.response.time_to_first_chunk", "set it (seconds) on streamed model calls")

LIBRARIES = {
    "openinference": Library("openinference", _OI, _OI_INPUTS, _OI_OUTPUTS, _OI_OUTPUTS, _OI_RESPONSES, _OI_TTFT,
                             Fix("with using_session(session_id):",
                                 "openinference.instrumentation's context manager puts session.id on every span "
                                 "started inside it")),
    "openllmetry": Library("openllmetry", "OpenLLMetry (Traceloop)", _TRACELOOP, _TRACELOOP, _TRACELOOP, _TRACELOOP,
                           Fix("", "no switch: OpenLLMetry's LangChain instrumentation records no time to first token"),
                           Fix('Traceloop.set_association_properties({"session_id": …})',
                               "recorded as traceloop.association.properties.session_id")),
    "otel-genai": Library(
        "otel-genai", "OpenTelemetry GenAI instrumentation (opentelemetry-util-genai)", _GENAI_CONTENT, _GENAI_CONTENT,
        _GENAI_CONTENT, _GENAI_CONTENT,
        Fix("", "not on spans: only the gen_ai.client.operation.time_to_first_chunk metric (send /v1/metrics; "
                "agentops keeps it per model, not per call)")),
    "pydantic-ai": Library("pydantic-ai", "pydantic-ai", _PYDANTIC, _PYDANTIC, Fix("", "always recorded"),
                           Fix("", "always recorded: tool-call ids stay in gen_ai.output.messages without content"),
                           Fix("", "recorded on streamed runs only (agent.run_stream): a call that is not streamed "
                                   "has no first token")),
    "strands": Library(
        "strands", "Strands Agents",
        Fix("OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental",
            "by default the arguments travel only in the gen_ai.tool.message span event; the latest conventions put "
            "them in gen_ai.tool.call.arguments. An empty gen_ai_unredacted_attributes= in the same variable sends "
            "every one as [REDACTED]: list there the attributes to keep"),
        Fix("OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental",
            "the latest conventions put the result in gen_ai.tool.call.result"),
        Fix("", "always recorded (gen_ai.tool.call.id)"),
        Fix("OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental",
            "the default form keeps the response in gen_ai.choice events"),
        Fix("", "gen_ai.server.time_to_first_token on streamed calls")),
    "google-adk": Library(
        "google-adk", "Google ADK",
        *[Fix("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only",
              "ADK 2's GenAI spans (telemetry schema 2, its default) carry prompts, tool arguments, results and "
              "responses only so; true means EVENT_ONLY there (log records, not spans). ADK 1's spans read "
              "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=true, the default")] * 4,
        _OWN_TTFT),
    "vercel-ai": Library(
        "vercel-ai", "Vercel AI SDK",
        *[Fix("telemetry: { recordInputs: true, recordOutputs: true }",
              "AI SDK 7's call option (experimental_telemetry, with isEnabled: true, before 7); both default to "
              "true; false drops prompts, tool arguments and results, and the responses' requested calls")] * 4,
        Fix("", "streamText calls only: gen_ai.client.operation.time_to_first_chunk (AI SDK 7, @ai-sdk/otel), "
                "ai.response.msToFirstChunk (earlier versions); generateText streams nothing")),
    "native": Library(
        "native", "agentops native API (POST /api/v1/ingest)",
        Fix("tool_args", "send it on each tool step"), Fix("tool_result", "send it on each tool step"),
        Fix("tool_call_id", "send it on each tool step"),
        Fix("tool_call_ids", "send the ids of the calls a model response requested on its LLM step"),
        Fix("ttft_ms", "send it on streamed LLM steps")),
    "own": Library("own", "your own spans", _OWN, _OWN, _OWN, _OWN, _OWN_TTFT),
}

# OpenLLMetry's packages share the OpenTelemetry contrib namespace (opentelemetry.instrumentation.<x>)
# but are versioned 0.N.M with N in the tens; contrib's GenAI packages are pre-releases (0.1b0, 2.4b0).
_OPENLLMETRY_VERSION = re.compile(r"^0\.([1-9]\d)\.\d+$")


# Languages the Vercel AI SDK runs in (telemetry.sdk.language); "" when the resource does not say.
_AI_SDK_LANGUAGES = ("", "nodejs", "webjs", "js")


def library_of(scope_name: str, scope_version: str, *, sdk_language: str = "", ai_sdk_share: float = 0.0) -> Library:
    """The library a scope belongs to; "own" for a tracer no known library names (the agent's own
    spans), "native" for the native API (no scope). `ai_sdk_share`: the share of the scope's model and
    tool spans shaped as the Vercel AI SDK writes them (ingest.instrumentation.AI_SDK_KEYS), which
    tells the SDK under the application's own tracer, the scope it is given."""
    name = scope_name.lower()
    if not name:
        return LIBRARIES["native"]
    if name.startswith("openinference."):
        return LIBRARIES["openinference"]
    if name == "pydantic-ai" or name.startswith("pydantic_ai"):
        return LIBRARIES["pydantic-ai"]
    if name.startswith("strands."):
        return LIBRARIES["strands"]
    if name.startswith("gcp.vertex.agent") or name.startswith("google.adk"):
        return LIBRARIES["google-adk"]
    if name == "ai":
        return LIBRARIES["vercel-ai"]
    if name.startswith("traceloop.") or (name.startswith("opentelemetry.instrumentation.")
                                         and _OPENLLMETRY_VERSION.match(scope_version)):
        return LIBRARIES["openllmetry"]
    if name.startswith(("opentelemetry.instrumentation.", "opentelemetry.util.genai")):
        return LIBRARIES["otel-genai"]
    if ai_sdk_share >= 0.5 and sdk_language.lower() in _AI_SDK_LANGUAGES:
        return LIBRARIES["vercel-ai"]
    return LIBRARIES["own"]


def package_name(scope_name: str, library: Library) -> str:
    """The package a scope names, where the scope says it (openinference.instrumentation.langchain →
    openinference-instrumentation-langchain)."""
    if library.key in ("openinference", "openllmetry", "otel-genai") and scope_name.count(".") >= 2:
        return scope_name.replace(".", "-").replace("_", "-")
    return ""
