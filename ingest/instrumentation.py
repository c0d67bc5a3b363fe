"""What each instrumentation sends: per span, which of the fields the analysis needs arrived, counted
at ingest per hour, service, instrumentation scope (otel.scope.name / version, telemetry.sdk.*),
release, environment and step kind. No Django.

The Instrumentation page reads only these counters (a few rows per hour and scope), never the
steps: whether tool arguments arrive cannot be read back from millions of steps on every visit,
and the scope a span came from is not stored on the step at all. Counting is a handful of
attribute look-ups per span, done on the records the decoders already built, so a field counts
as arrived exactly when the mapping (ingest.conventions) found it.

A span sent twice is counted twice (counters are added, not upserted per span): shares do not
move, as both the spans and the fields they carry are counted again. A batch that fails is rolled
back with its counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ingest import limits
from ingest.conventions import ARGS_CONTENT_KEYS, RESULT_CONTENT_KEYS, redacted
from ingest.records import StepRecord, clean_text

SERVICE_KEY = "service.name"
SDK_KEYS = ("telemetry.sdk.name", "telemetry.sdk.language", "telemetry.sdk.version")
# Where a source's key is empty: the native API (POST /api/v1/ingest) has no OpenTelemetry scope.
NATIVE = ("", "", "", "", "", "")

# Counted per span; each a column of ingest_instrumentationcount, in this order.
FIELDS = (
    "model",            # a model name (LLM steps)
    "tokens",           # input or output tokens
    "ttft",             # a time to first token
    "responses",        # the response was recorded (output messages): what the calls it requested are read from
    "call_ids",         # the response requested tool calls, by id
    "server_address",   # server.address on a model call: the server that answered; on an HTTP client
                        # span (kind other): the server it requested (below a model call, the call's)
    "device",           # a device or server the step ran on (hw.id, server.address, or its own server's)
    "serving",          # an inference server's own request span (vLLM llm_request)
    "tool_name",
    "tool_args",
    "args_redacted",    # a tool's input sent redacted ("__REDACTED__", "[REDACTED]": conventions.REDACTED_VALUES)
    "tool_result",
    "result_redacted",  # tool output sent redacted
    "tool_call_id",     # the id of the call a tool step answered
    "session",          # a session (conversation) id
    "ai_sdk_shape",     # shaped as the Vercel AI SDK writes its spans (AI_SDK_KEYS): the library, whatever its scope
)
SERVING_KEY = "agentops.serving"
# The Vercel AI SDK traces with the application's tracer (its scope is the app's name, not the SDK's),
# so what tells it is what it writes: up to AI SDK 6 its own `ai.*` attributes on every span
# (ai.operationId, ai.model.id), from 7 (@ai-sdk/otel) the operation's duration as a span attribute
# on its chat and tool spans, which the GenAI conventions define as metrics only.
AI_SDK_KEYS = ("ai.operationId", "ai.model.id", "gen_ai.client.operation.duration", "gen_ai.execute_tool.duration")
# Output messages of a model call, as each convention records them: GenAI's structured messages,
# the first flattened message of OpenInference and of OpenLLMetry's older form (looked up by key:
# scanning every key of a long prompt costs more than the rest of the count), and the span event
# the GenAI conventions' event form puts them in.
OUTPUT_MESSAGE_KEYS = ("gen_ai.output.messages", "llm.output_messages.0.message.role",
                       "llm.output_messages.0.message.content", "gen_ai.completion.0.role",
                       "gen_ai.completion.0.content")
OUTPUT_EVENT = "gen_ai.client.inference.operation.details"


def _text(value: object) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        text = str(value)
    else:
        return ""
    return clean_text(text, limit=limits.MAX_NAME_LENGTH - len(limits.TRUNCATION_MARKER))


def source_of(resource: dict, *, scope_name: object, scope_version: object) -> tuple[str, ...]:
    """(service, scope name, scope version, sdk name, sdk language, sdk version) of a span."""
    return (_text(resource.get(SERVICE_KEY)), _text(scope_name), _text(scope_version),
            *(_text(resource.get(k)) for k in SDK_KEYS))


def _responded(step: StepRecord) -> bool:
    if step.tool_call_ids:
        return True
    attributes = step.attributes
    if any(k in attributes and not redacted(attributes[k]) for k in OUTPUT_MESSAGE_KEYS):
        return True
    value = attributes.get("output.value")
    if value is not None and not redacted(value):
        return True
    for e in step.events:
        if not isinstance(e, dict):
            continue
        carried = e.get("attributes") or {}
        # the convention's details event, or semconv ≤ 1.36's per-choice event (Strands' default)
        key = OUTPUT_MESSAGE_KEYS[0] if e.get("name") == OUTPUT_EVENT else "message" if e.get("name") == "gen_ai.choice" else None
        if key and carried.get(key) is not None and not redacted(carried[key]):
            return True
    return False


HTTP_METHOD_KEYS = ("http.request.method", "http.method")
HTTP_SERVER_KEYS = ("server.address", "url.full", "http.url")


def names_http_server(attributes: dict) -> bool:
    """An HTTP client span that names the server it requested (the newer conventions' server.address
    or url.full, the older http.url): below a model call, the server that answered it."""
    return any(k in attributes for k in HTTP_METHOD_KEYS) and any(k in attributes for k in HTTP_SERVER_KEYS)


def presence(step: StepRecord) -> tuple[bool, ...]:
    """For each of FIELDS, whether this step carries it (comparisons, no calls: it runs per span)."""
    a = step.attributes
    llm = step.kind == "llm"
    tool = step.kind == "tool"  # input.value / output.value of other spans are prompts and answers
    args = step.tool_args is not None
    result = step.tool_result != ""
    return (
        step.model != "",
        step.input_tokens is not None or step.output_tokens is not None,
        step.ttft_ms is not None,
        llm and _responded(step),
        step.tool_call_ids != [],
        ("server.address" in a) if llm else (step.kind == "other" and names_http_server(a)),
        step.device != "",
        SERVING_KEY in a,
        step.tool_name != "",
        args,
        tool and not args and any(redacted(a.get(k)) for k in ARGS_CONTENT_KEYS),
        result,
        tool and not result and any(redacted(a.get(k)) for k in RESULT_CONTENT_KEYS),
        step.tool_call_id != "",
        step.session_id != "",
        any(k in a for k in AI_SDK_KEYS),
    )


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def tally(steps: Iterable[StepRecord]) -> list[tuple]:
    """Counter rows: (hour, *source, release, environment, kind, spans, *FIELDS counts), in key order
    (concurrent batches then lock shared rows in one order). Spans of one key mostly carry the same
    fields, so they are counted by their signature first and the columns added up once per signature."""
    signatures: dict[tuple, int] = {}
    for step in steps:
        signature = (_hour(step.started_at), step.source or NATIVE, step.release, step.environment, step.kind,
                     presence(step))
        signatures[signature] = signatures.get(signature, 0) + 1
    counts: dict[tuple, list[int]] = {}
    for (hour, source, release, environment, kind, present), n in signatures.items():
        key = (hour, *source, release, environment, kind)
        row = counts.get(key)
        if row is None:
            row = counts[key] = [0] * (len(FIELDS) + 1)
        row[0] += n
        for i, flag in enumerate(present, 1):
            if flag:
                row[i] += n
    return [(*key, *row) for key, row in sorted(counts.items())]
