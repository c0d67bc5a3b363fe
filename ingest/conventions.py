"""Attribute conventions: what OpenTelemetry GenAI semconv, OpenInference and OpenLLMetry
attributes mean in agentops words (step kind, model, tokens, TTFT, tool, device).

Pure functions over plain dicts of attribute values; no Django, no protobuf. The tables are
the facts of /work/shared/OTEL_MAPPING.md (semantic-conventions v1.41, openinference spec,
openllmetry semconv_ai). Old and new names are both accepted; where several conventions
disagree the OTel GenAI name wins, then OpenInference, then OpenLLMetry. Spans are classified
by attributes, never by span names, because names are free text chosen by each framework.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ingest.records import STEP_KINDS

# --- step kind ---------------------------------------------------------------------------

GENAI_OPERATIONS = {
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
    "embeddings": "llm",
    "execute_tool": "tool",
    "retrieval": "retrieval",
    "invoke_agent": "agent",
    "create_agent": "agent",
    "invoke_workflow": "framework",
}
OPENINFERENCE_KINDS = {
    "LLM": "llm",
    "EMBEDDING": "llm",
    "TOOL": "tool",
    "RETRIEVER": "retrieval",
    "RERANKER": "retrieval",
    "AGENT": "agent",
    "CHAIN": "framework",
    "GUARDRAIL": "other",
    "EVALUATOR": "other",
    "PROMPT": "other",
    "UNKNOWN": "other",
}
TRACELOOP_KINDS = {"workflow": "framework", "task": "framework", "agent": "agent", "tool": "tool"}
# OpenLLMetry marks vector-store calls with db.system; these are the stores it instruments.
VECTOR_STORES = {"chroma", "pinecone", "qdrant", "weaviate", "milvus", "lancedb", "marqo",
                 "pgvector", "redis_vector", "elasticsearch_vector", "opensearch_vector"}
# An explicit override for spans no convention covers (e.g. a queue wait).
AGENTOPS_KIND = "agentops.step.kind"


def step_kind(attributes: dict) -> str:
    """The step kind these attributes declare; "other" when no convention says."""
    explicit = attributes.get(AGENTOPS_KIND)
    if isinstance(explicit, str) and explicit in STEP_KINDS:
        return explicit
    operation = attributes.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation in GENAI_OPERATIONS:
        return GENAI_OPERATIONS[operation]
    oi_kind = attributes.get("openinference.span.kind")
    if isinstance(oi_kind, str) and oi_kind.upper() in OPENINFERENCE_KINDS:
        return OPENINFERENCE_KINDS[oi_kind.upper()]
    tl_kind = attributes.get("traceloop.span.kind")
    if isinstance(tl_kind, str) and tl_kind in TRACELOOP_KINDS:
        return TRACELOOP_KINDS[tl_kind]
    if "llm.request.type" in attributes:
        return "llm"
    if isinstance(operation, str) and operation:
        # A GenAI operation this table does not know: model work if it names a model or counts
        # tokens; otherwise orchestration (Strands' execute_event_loop_cycle, the AI SDK's
        # "step N" spans wrap the chat call and its tools and carry neither).
        model_work = any(key in attributes for key in (*MODEL_KEYS, *INPUT_TOKEN_KEYS, *OUTPUT_TOKEN_KEYS))
        return "llm" if model_work else "framework"
    db_system = attributes.get("db.system.name", attributes.get("db.system"))
    if isinstance(db_system, str) and db_system.lower() in VECTOR_STORES:
        return "retrieval"
    return "other"


# --- the other facts of a span -----------------------------------------------------------

MODEL_KEYS = ("gen_ai.response.model", "gen_ai.request.model", "llm.response.model_name",
              "llm.model_name", "llm.response.model", "llm.request.model")
LANGCHAIN_MODEL_KEY = "traceloop.association.properties.ls_model_name"
PROVIDER_KEYS = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                    "llm.token_count.prompt", "llm.usage.prompt_tokens")
OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                     "llm.token_count.completion", "llm.usage.completion_tokens")
CACHED_TOKEN_KEYS = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens",
                     "llm.token_count.prompt_details.cache_read")
# Seconds. pydantic-ai writes the metric's name as a span attribute on streamed chat spans.
TTFT_SECONDS_KEYS = ("gen_ai.response.time_to_first_chunk", "gen_ai.client.operation.time_to_first_chunk",
                     "gen_ai.server.time_to_first_token")
STREAM_KEYS = ("gen_ai.request.stream", "llm.is_streaming")
TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name")
TOOL_ARGS_KEYS = ("gen_ai.tool.call.arguments",)
TOOL_CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id", "tool.call_id", "tool.id")
TOOL_RESULT_KEYS = ("gen_ai.tool.call.result",)
# The calls one model response requested, as structured messages (GenAI semconv ≥ 1.37, also
# what pydantic-ai and openai-v2's latest conventions write) ...
OUTPUT_MESSAGES_KEYS = ("gen_ai.output.messages",)
# ... or flattened per call: OpenInference and OpenLLMetry (index placeholders matched below).
_FLAT_CALL_ID = re.compile(
    r"^(?:llm\.output_messages\.\d+\.message\.tool_calls\.\d+\.tool_call\.id"
    r"|gen_ai\.completion\.\d+\.tool_calls\.\d+\.id)$")
SESSION_KEYS = ("gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id")
TASK_NAME_KEYS = ("gen_ai.workflow.name", "gen_ai.agent.name", "traceloop.workflow.name")
# Names frameworks give their root span whatever the agent is: a task named so is named again
# after the agent that ran in it (its first agent step), else after its service.
GENERIC_ROOT_NAMES = frozenset({
    "langgraph", "agent workflow", "agent run", "invoke_agent", "workflow", "runnablesequence",
    "agentexecutor", "agent", "chain", "graph", "run", "root", "trace", "main",
})


def is_generic_name(name: str) -> bool:
    return name.strip().lower() in GENERIC_ROOT_NAMES
DEVICE_KEY = "hw.id"
RELEASE_KEY = "service.version"
ENVIRONMENT_KEYS = ("deployment.environment.name", "deployment.environment")

# Span events that mark the first streamed token/chunk (OpenInference, OpenLLMetry, and the
# spellings instrumentations use in the wild). TTFT = the first such event − span start.
FIRST_TOKEN_EVENTS = {"first token stream event", "first_token", "first token", "gen_ai.first_token",
                      "first_chunk", "gen_ai.first_chunk", "gen_ai.content.completion.chunk"}

_MAX_COUNT = 2**31 - 1


def is_first_token_event(name: str) -> bool:
    return name.lower() in FIRST_TOKEN_EVENTS


@dataclass(slots=True)
class SpanFacts:
    """What the attributes of one span say, and which attribute keys said it."""

    kind: str = "other"
    model: str = ""
    provider: str = ""
    device: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_ms: float | None = None
    streamed: bool | None = None
    tool_name: str = ""
    tool_args: object = None
    tool_result: object = None
    tool_call_id: str = ""
    tool_call_ids: list[str] = field(default_factory=list)
    session_id: str = ""
    task_name: str = ""
    used: set[str] = field(default_factory=set)


def _text(attributes: dict, keys: tuple[str, ...], used: set[str]) -> str:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            used.add(key)
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            used.add(key)
            return str(value)
    return ""


def _count(attributes: dict, keys: tuple[str, ...], used: set[str]) -> int | None:
    """A token count; values that are not whole numbers in range stay unmapped attributes."""
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str):
            value = value.strip()
            value = int(value) if value.isdigit() else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if value != value or value != int(value) or not 0 <= value <= _MAX_COUNT:
            continue
        used.add(key)
        return int(value)
    return None


def _flag(attributes: dict, keys: tuple[str, ...], used: set[str]) -> bool | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, bool):
            used.add(key)
            return value
    return None


def _ttft_ms(attributes: dict, used: set[str]) -> float | None:
    for key in TTFT_SECONDS_KEYS:
        value = attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e6:
            used.add(key)
            return float(value) * 1000.0
    return None


def parse_json_value(value: object) -> object:
    """A JSON string that parses becomes the object; anything else stays as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


# LangChain's tool-callback payload, which OpenLLMetry records as a tool's input: the arguments
# are `inputs`; `input_str` is a Python repr of them and `tags`/`metadata` change on every call
# (graph step, checkpoint), so the payload as a whole never compares equal to a repeat.
_LANGCHAIN_INPUT_KEYS = frozenset({"input_str", "tags", "metadata", "inputs", "kwargs"})


def _unwrap_arguments(parsed: object) -> tuple[object, str]:
    """The arguments inside a framework's wrapper, and the call id the wrapper names."""
    if not isinstance(parsed, dict):
        return parsed, ""
    keys = set(parsed)
    if "inputs" in keys and keys <= _LANGCHAIN_INPUT_KEYS and keys & {"input_str", "tags", "metadata"}:
        kwargs = parsed.get("kwargs")
        call_id = kwargs.get("tool_call_id") if isinstance(kwargs, dict) else None
        return parsed["inputs"], call_id if isinstance(call_id, str) else ""
    if keys <= {"args", "kwargs", "inputs", "sanitize_inputs_outputs"} and keys & {"args", "kwargs", "inputs"}:
        # OpenLLMetry wraps a Python call as {"args": [...], "kwargs": {...}}, and smolagents'
        # OpenInference adds its own flag `sanitize_inputs_outputs`: keyword arguments alone are
        # the arguments; positional ones are kept alongside.
        args, kwargs = parsed.get("args") or [], parsed.get("kwargs")
        if parsed.get("inputs") is not None and not args and not kwargs:
            return parsed["inputs"], ""
        if not args and isinstance(kwargs, dict):
            return kwargs, ""
    return parsed, ""


def _unwrap_result(parsed: object) -> tuple[object, str]:
    """A tool's result inside a framework's wrapper, and the call id it answered: OpenLLMetry's
    {"output": …, "kwargs": …}; a LangChain ToolMessage serialised by OpenInference
    ({"type": "tool", "data": {…}}) or by LangChain's dumpd ({"lc": 1, "id": [… "ToolMessage"],
    "kwargs": {…}})."""
    if isinstance(parsed, dict) and "output" in parsed and set(parsed) <= {"output", "kwargs"}:
        parsed = parse_json_value(parsed["output"])
    message = None
    if isinstance(parsed, dict):
        if parsed.get("type") == "tool" and isinstance(parsed.get("data"), dict):
            message = parsed["data"]
        elif parsed.get("lc") == 1 and isinstance(parsed.get("kwargs"), dict) and "ToolMessage" in str(parsed.get("id")):
            message = parsed["kwargs"]
    if message is None:
        return parsed, ""
    call_id = message.get("tool_call_id")
    return message.get("content"), call_id if isinstance(call_id, str) else ""


def _tool_args(attributes: dict, kind: str, used: set[str]) -> tuple[object, str]:
    """The call's arguments and, when a wrapper names it, the call id."""
    for key in TOOL_ARGS_KEYS:
        if attributes.get(key) is not None:
            used.add(key)
            return _unwrap_arguments(parse_json_value(attributes[key]))
    if kind != "tool":
        # On LLM and chain spans input.value is the prompt, not arguments.
        return None, ""
    for key in ("traceloop.entity.input", "input.value", "tool.parameters"):
        if attributes.get(key) is not None:
            used.add(key)
            return _unwrap_arguments(parse_json_value(attributes[key]))
    return None, ""


def _tool_result(attributes: dict, kind: str, used: set[str]) -> tuple[object, str]:
    """What the tool returned and, when a wrapper names it, the call id it answered."""
    for key in TOOL_RESULT_KEYS:
        if attributes.get(key) is not None:
            used.add(key)
            return _unwrap_result(parse_json_value(attributes[key]))
    if kind != "tool":
        # On LLM and chain spans output.value is the answer, not a tool's result.
        return None, ""
    for key in ("output.value", "traceloop.entity.output"):
        if attributes.get(key) is not None:
            used.add(key)
            return _unwrap_result(parse_json_value(attributes[key]))
    return None, ""


def requested_call_ids(attributes: dict) -> list[str]:
    """The ids of the tool calls an LLM response requested, in order, from whichever
    convention recorded them (structured output messages, or flattened attributes)."""
    ids: list[str] = []
    for key in OUTPUT_MESSAGES_KEYS:
        messages = parse_json_value(attributes.get(key))
        for message in messages if isinstance(messages, list) else ():
            parts = message.get("parts") if isinstance(message, dict) else None
            for part in parts if isinstance(parts, list) else ():
                if isinstance(part, dict) and part.get("type") == "tool_call" and isinstance(part.get("id"), str):
                    ids.append(part["id"])
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    ids.append(call["id"])
    if not ids:
        flat = sorted((k for k in attributes if _FLAT_CALL_ID.match(k)),
                      key=lambda k: [int(n) for n in re.findall(r"\d+", k)])
        ids = [attributes[k] for k in flat if isinstance(attributes[k], str) and attributes[k]]
    return list(dict.fromkeys(ids))


def span_facts(attributes: dict, *, resource: dict | None = None) -> SpanFacts:
    """Map one span's attributes (and its resource's, for the device) onto agentops fields."""
    used: set[str] = set()
    kind = step_kind(attributes)
    facts = SpanFacts(kind=kind, used=used)
    facts.model = _text(attributes, MODEL_KEYS, used)
    if facts.model.lower() in ("", "unknown"):
        # OpenLLMetry writes "unknown" for a LangChain model it cannot serialise; LangChain's own
        # metadata still names it.
        facts.model = _text(attributes, (LANGCHAIN_MODEL_KEY,), used) or facts.model
    facts.provider = _text(attributes, PROVIDER_KEYS, used)
    facts.input_tokens = _count(attributes, INPUT_TOKEN_KEYS, used)
    facts.output_tokens = _count(attributes, OUTPUT_TOKEN_KEYS, used)
    facts.cached_tokens = _count(attributes, CACHED_TOKEN_KEYS, used)
    facts.ttft_ms = _ttft_ms(attributes, used)
    facts.streamed = _flag(attributes, STREAM_KEYS, used)
    facts.session_id = _text(attributes, SESSION_KEYS, used)
    # Read, not consumed: the agent name stays on the step, where the task's name is found.
    facts.task_name = _text(attributes, TASK_NAME_KEYS, set())
    facts.device = _text(attributes, (DEVICE_KEY,), used)
    if not facts.device and resource:
        facts.device = _text(resource, (DEVICE_KEY,), set())
    facts.tool_name = _text(attributes, TOOL_NAME_KEYS, used)
    if not facts.tool_name and kind == "tool":
        facts.tool_name = _text(attributes, ("traceloop.entity.name",), used)
    facts.tool_args, args_call_id = _tool_args(attributes, kind, used)
    facts.tool_result, result_call_id = _tool_result(attributes, kind, used)
    if kind != "llm":
        facts.tool_call_id = _text(attributes, TOOL_CALL_ID_KEYS, used) or args_call_id or result_call_id
    if kind == "llm":
        facts.tool_call_ids = requested_call_ids(attributes)
    return facts


def resource_release(resource: dict) -> str:
    return _text(resource, (RELEASE_KEY,), set())


def resource_environment(resource: dict) -> str:
    return _text(resource, ENVIRONMENT_KEYS, set())


def resource_session(resource: dict) -> str:
    return _text(resource, SESSION_KEYS, set())


# --- device telemetry (/v1/metrics) ----------------------------------------------------

# metric name → (resource sample field, factor to the field's unit). The hw.* names are the
# OTel hardware conventions (fractions 0..1, watts, °C); DCGM exporter names are NVIDIA's,
# whose utilisations are percentages, hence the factor 0.01.
DEVICE_METRICS: dict[str, tuple[str, float]] = {
    "hw.gpu.utilization": ("utilization", 1.0),
    "hw.gpu.memory.utilization": ("mem_bw_util", 1.0),
    "hw.power": ("power_w", 1.0),
    "hw.gpu.power": ("power_w", 1.0),
    "hw.temperature": ("temperature_c", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("utilization", 0.01),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_bw_util", 0.01),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
}
AGENTOPS_DEVICE_PREFIX = "agentops.device."
DCGM_PREFIX = "DCGM_FI_"


def device_metric(name: str) -> tuple[str, float] | None:
    """The resource sample field (and unit factor) a device metric feeds; None if not a device metric."""
    if name in DEVICE_METRICS:
        return DEVICE_METRICS[name]
    if name.startswith(AGENTOPS_DEVICE_PREFIX) and len(name) > len(AGENTOPS_DEVICE_PREFIX):
        return name[len(AGENTOPS_DEVICE_PREFIX):], 1.0
    return None


def device_id(point: dict, resource: dict) -> str:
    """`hw.id` of the data point or its resource; for DCGM series the GPU's UUID, else
    `<Hostname>-gpu<gpu>` (DCGM exporter labels)."""
    for attrs in (point, resource):
        value = attrs.get(DEVICE_KEY)
        if isinstance(value, str) and value:
            return value
    for attrs in (point, resource):
        uuid = attrs.get("UUID")
        if isinstance(uuid, str) and uuid:
            return uuid
    gpu = point.get("gpu", resource.get("gpu"))
    if gpu is not None and gpu != "":
        host = point.get("Hostname", resource.get("Hostname"))
        return f"{host}-gpu{gpu}" if host else f"gpu{gpu}"
    return ""


def device_vendor(point: dict, resource: dict, *, metric: str) -> str:
    for attrs in (point, resource):
        value = attrs.get("hw.vendor")
        if isinstance(value, str) and value:
            return "".join(ch for ch in value.lower() if ch.isalnum())
    return "nvidia" if metric.startswith(DCGM_PREFIX) else ""


def device_hardware(point: dict, resource: dict) -> str:
    for key in ("hw.model", "modelName"):
        for attrs in (point, resource):
            value = attrs.get(key)
            if isinstance(value, str) and value:
                return value
    return ""


def histogram_model(point: dict) -> str:
    return _text(point, ("gen_ai.response.model", "gen_ai.request.model"), set())
