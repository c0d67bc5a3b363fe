"""Attribute conventions: what OpenTelemetry GenAI semconv, OpenInference and OpenLLMetry
attributes mean in agentops words (step kind, model, tokens, TTFT, tool, device).

Pure functions over plain dicts of attribute values; no Django, no protobuf. The tables are
the facts of /work/shared/OTEL_MAPPING.md (semantic-conventions v1.41, openinference spec,
openllmetry semconv_ai). Old and new names are both accepted; where several conventions
disagree the OTel GenAI name wins, then OpenInference, then OpenLLMetry. Spans are classified
by attributes, never by span names, because names are free text chosen by each framework.
"""

from __future__ import annotations

import ast
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


# MCP (semantic-conventions-genai docs/gen-ai/mcp.md): a `tools/call` span is a tool call
# (GenAI's execute_tool); the server's own span of the same call (span kind SERVER) is the
# server's view of its parent, not a second call; other methods (initialize, tools/list,
# notifications) are the protocol's own work.
MCP_METHOD = "mcp.method.name"
MCP_TOOLS_CALL = "tools/call"
SPAN_KIND_SERVER = 2


def step_kind(attributes: dict, *, span_kind: int = 0) -> str:
    """The step kind these attributes declare; "other" when no convention says."""
    explicit = attributes.get(AGENTOPS_KIND)
    if isinstance(explicit, str) and explicit in STEP_KINDS:
        return explicit
    method = attributes.get(MCP_METHOD)
    if isinstance(method, str) and method:
        return "tool" if method == MCP_TOOLS_CALL and span_kind != SPAN_KIND_SERVER else "other"
    operation = attributes.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation in GENAI_OPERATIONS:
        return GENAI_OPERATIONS[operation]
    oi_kind = attributes.get("openinference.span.kind")
    if isinstance(oi_kind, str) and oi_kind.upper() in OPENINFERENCE_KINDS:
        if oi_kind.upper() == "LLM" and _prepared_request_only(attributes):
            return "other"
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


def _prepared_request_only(attributes: dict) -> bool:
    """An OpenInference LLM span that only built a request: LlamaIndex's instrumentation marks
    `OpenAI._prepare_chat_with_tools` LLM, and its output.value is the prepared
    `{"messages": [...]}`, with no response, finish reason or token count of its own."""
    output = parse_json_value(attributes.get("output.value"))
    if not (isinstance(output, dict) and set(output) <= {"messages", "tools", "tool_choice", "parallel_tool_calls"}
            and "messages" in output):
        return False
    return not any(key.startswith(("llm.output_messages.", "llm.token_count.")) or key == "llm.finish_reason"
                   for key in attributes)


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
TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "mcp.tool.name")
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
# The agent's own version: the release when the resource names none (service.version).
AGENT_VERSION_KEY = "gen_ai.agent.version"
# The MCP server a tool call went to: its name where the instrumentation gives one (Sentry's
# mcp.server.name), else its address; kept on the tool step as this attribute.
MCP_SERVER_NAME_KEYS = ("mcp.server.name",)
TOOL_SERVER_KEY = "agentops.tool.server"
MCP_ARGUMENT_PREFIX = "mcp.request.argument."
TASK_NAME_KEYS = ("gen_ai.workflow.name", "gen_ai.agent.name", "traceloop.workflow.name")
# Names frameworks give their root span whatever the agent is: a task named so is named again
# after the agent that ran in it (its first agent step), else after its service.
GENERIC_ROOT_NAMES = frozenset({
    "langgraph", "agent workflow", "agent run", "invoke_agent", "workflow", "runnablesequence",
    "agentexecutor", "agent", "chain", "graph", "run", "root", "trace", "main", "crew", "flow",
    # OpenInference names a LlamaIndex or smolagents run `<class or agent name>.run`; these are
    # the frameworks' own classes, which say nothing of the agent.
    "functionagent.run", "reactagent.run", "codeactagent.run", "agentworkflow.run", "workflow.run",
    "toolcallingagent.run", "codeagent.run", "multistepagent.run",
})
# `<Owner>.<method>`: a method call's span name, the method one that runs an agent or a crew
# (OpenInference's LlamaIndex, smolagents and Agno roots `support_agent.run` / `.arun`, CrewAI's
# `support_crew.kickoff` and its agent steps `<role>._execute_core` or `<role>.<task>._execute_core`):
# the task or agent is named after <Owner>, the part before the first dot.
_RUN_METHOD = re.compile(r"^(?P<owner>[^.]+)(?:\.[^.]+)?\.(?:a?run|kickoff(?:_async)?|a?invoke|_?execute(?:_core)?)$")
# An id made for each run (a UUID, 32 hex digits) names no agent: CrewAI's unnamed crew is
# `Crew_<uuid>`; with the id taken out what is left is read as any other name (`Crew`: generic).
_GENERATED_ID = re.compile(r"[_\-:# ]?(?<![0-9a-f])[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}"
                           r"(?![0-9a-f])", re.I)
# Where the agent name a step's own name gives is kept (agent steps that name no agent).
AGENT_NAME_KEY = "agentops.agent.name"


def is_generic_name(name: str) -> bool:
    return _GENERATED_ID.sub("", name).strip().lower() in GENERIC_ROOT_NAMES


def run_owner(name: str) -> str:
    """The agent, crew or workflow a `<Owner>.run` (`.kickoff`, `._execute_core`, …) span name names,
    without an id made for the run; the name itself otherwise."""
    match = _RUN_METHOD.match(name.strip())
    if not match or is_generic_name(name):
        return name
    return _GENERATED_ID.sub("", match.group("owner")).strip() or name


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
    # The inference server that answered (client spans), see `server_key`.
    server: str = ""
    # An inference server's own request span (vLLM `llm_request`): its timings in ms.
    serving: dict | None = None
    # The MCP server a tool call went to (see TOOL_SERVER_KEY).
    tool_server: str = ""
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


# vLLM's request span (SERVER kind, `llm_request`, child of the client's call when the client
# propagates trace context) reports where the call's time went on the server, in seconds.
SERVING_SECONDS_KEYS = {
    "gen_ai.latency.time_in_queue": "queue_ms",
    "gen_ai.latency.time_to_first_token": "ttft_ms",
    "gen_ai.latency.time_in_model_prefill": "prefill_ms",
    "gen_ai.latency.time_in_model_decode": "decode_ms",
    "gen_ai.latency.time_in_model_inference": "inference_ms",
    "gen_ai.latency.e2e": "e2e_ms",
}
SERVING_KEY = "agentops.serving"


def serving_timings(attributes: dict) -> dict | None:
    """The server-side timings (ms) of an inference server's request span; None for other spans."""
    timings = {}
    for key, name in SERVING_SECONDS_KEYS.items():
        value = attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e6:
            timings[name] = round(float(value) * 1000.0, 3)
    return timings or None


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
    if isinstance(parsed, dict) and "blocks" in parsed and "raw_output" in parsed and "tool_name" in parsed:
        # LlamaIndex's ToolOutput (OpenInference output.value): what the tool returned is
        # raw_output; its blocks are the text sent to the model.
        raw = parsed["raw_output"]
        return (raw if raw is not None else _block_text(parsed["blocks"])), ""
    text = _block_text(parsed)
    if text is not None:
        return parse_json_value(text), ""
    message = None
    if isinstance(parsed, dict):
        if parsed.get("type") == "tool" and isinstance(parsed.get("data"), dict):
            message = parsed["data"]
        elif parsed.get("lc") == 1 and isinstance(parsed.get("kwargs"), dict) and "ToolMessage" in str(parsed.get("id")):
            message = parsed["kwargs"]
    if message is None:
        return _python_literal(parsed), ""
    call_id = message.get("tool_call_id")
    return message.get("content"), call_id if isinstance(call_id, str) else ""


# A result longer than this is kept as the text it came as (literal_eval's cost grows with it).
_MAX_LITERAL_CHARS = 16_384


def _python_literal(value: object) -> object:
    """A dict or list written as Python writes it (str() of the tool's return value, single quotes,
    None/True: Agno's OpenInference `output.value`) as that dict or list; anything else as it is."""
    if not (isinstance(value, str) and value[:1] in ("{", "[") and value.rstrip()[-1:] in ("}", "]")
            and len(value) <= _MAX_LITERAL_CHARS):
        return value
    try:
        found = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value
    return found if isinstance(found, dict | list) else value


# What instrumentations send in place of a hidden value: OpenInference's "__REDACTED__"
# (OPENINFERENCE_HIDE_INPUTS / _OUTPUTS, openinference-instrumentation config.py REDACTED_VALUE)
# and Strands' "[REDACTED]" (OTEL_SEMCONV_STABILITY_OPT_IN without gen_ai_unredacted_attributes
# entries: every sensitive attribute and event field). No content, so no arguments, result or
# response: read as arguments, every call of a tool would look like a repeat of the one before.
REDACTED_VALUE = "__REDACTED__"
REDACTED_VALUES = frozenset({REDACTED_VALUE, "[REDACTED]"})
# A tool span's arguments and result where no GenAI key holds them (on other spans these are the
# prompt and the answer); with TOOL_ARGS_KEYS / TOOL_RESULT_KEYS, where hidden content shows as such.
TOOL_ARGS_FALLBACK_KEYS = ("traceloop.entity.input", "input.value")
TOOL_RESULT_FALLBACK_KEYS = ("output.value", "traceloop.entity.output")
ARGS_CONTENT_KEYS = (*TOOL_ARGS_KEYS, *TOOL_ARGS_FALLBACK_KEYS)
RESULT_CONTENT_KEYS = (*TOOL_RESULT_KEYS, *TOOL_RESULT_FALLBACK_KEYS)


def redacted(value: object) -> bool:
    """Whether a value is an instrumentation's stand-in for content it hid."""
    return isinstance(value, str) and value in REDACTED_VALUES


def _block_text(value: object) -> str | None:
    """The text of a list of content blocks that hold only text ([{"text": ...}], as Strands
    and Bedrock's Converse API write a tool's result); None for anything else."""
    if not (isinstance(value, list) and value and all(isinstance(b, dict) and set(b) == {"text"} for b in value)):
        return None
    return "".join(str(b["text"]) for b in value)


def _mcp_arguments(attributes: dict) -> dict | None:
    """The arguments of an MCP call recorded one per attribute (`mcp.request.argument.<name>`,
    each JSON-serialised), as opentelemetry-instrumentation-mcp writes them."""
    found = {key[len(MCP_ARGUMENT_PREFIX):]: _json_or_text(value) for key, value in attributes.items()
             if key.startswith(MCP_ARGUMENT_PREFIX) and len(key) > len(MCP_ARGUMENT_PREFIX)}
    return found or None


def _json_or_text(value: object) -> object:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _tool_args(attributes: dict, kind: str, used: set[str]) -> tuple[object, str]:
    """The call's arguments and, when a wrapper names it, the call id."""
    for key in TOOL_ARGS_KEYS:
        if redacted(attributes.get(key)):
            return None, ""
        if attributes.get(key) is not None:
            used.add(key)
            return _unwrap_arguments(parse_json_value(attributes[key]))
    if kind != "tool":
        # On LLM and chain spans input.value is the prompt, not arguments.
        return None, ""
    for key in (*TOOL_ARGS_FALLBACK_KEYS, "tool.parameters"):
        if redacted(attributes.get(key)):
            return None, ""  # hidden, and tool.parameters is the schema, not these arguments
        if attributes.get(key) is not None:
            used.add(key)
            return _unwrap_arguments(parse_json_value(attributes[key]))
    mcp = _mcp_arguments(attributes)
    if mcp is not None:
        used.update(MCP_ARGUMENT_PREFIX + name for name in mcp)
        return mcp, ""
    return None, ""


def _tool_result(attributes: dict, kind: str, used: set[str]) -> tuple[object, str]:
    """What the tool returned and, when a wrapper names it, the call id it answered."""
    for key in TOOL_RESULT_KEYS:
        if redacted(attributes.get(key)):
            return None, ""
        if attributes.get(key) is not None:
            used.add(key)
            return _unwrap_result(parse_json_value(attributes[key]))
    if kind != "tool":
        # On LLM and chain spans output.value is the answer, not a tool's result.
        return None, ""
    for key in TOOL_RESULT_FALLBACK_KEYS:
        if redacted(attributes.get(key)):
            return None, ""
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


# Content some instrumentations put in span events rather than attributes (Strands, by default
# and in its latest mode). The GenAI convention's own event form: one
# `gen_ai.client.inference.operation.details` event whose attributes are the span attributes'
# names (gen_ai.output.messages, ...). And the per-message events of semconv ≤ 1.36 as Strands
# writes them: `gen_ai.tool.message` on a tool span with the call's arguments (`content`) and id,
# `gen_ai.choice` with the answer (`message`: on a chat span the response's content blocks, with
# its `toolUse` requests; on a tool span the tool's result).
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
DETAILS_KEYS = ("gen_ai.output.messages", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


def event_content(events: list[dict], *, kind: str) -> dict:
    """Attributes that the span's events carry in their stead (attributes the span itself has win)."""
    found: dict = {}
    for event in events:
        name, attributes = event.get("name"), event.get("attributes") or {}
        if name == DETAILS_EVENT:
            for key in DETAILS_KEYS:
                if attributes.get(key) is not None and not (key in OUTPUT_MESSAGES_KEYS and redacted(attributes[key])):
                    found.setdefault(key, attributes[key])
        elif name == "gen_ai.tool.message" and kind == "tool":
            if attributes.get("content") is not None:
                found.setdefault("gen_ai.tool.call.arguments", attributes["content"])
            if isinstance(attributes.get("id"), str) and attributes["id"]:
                found.setdefault("gen_ai.tool.call.id", attributes["id"])
        elif name == "gen_ai.choice" and attributes.get("message") is not None:
            if kind == "tool":  # a hidden result is carried as hidden: _tool_result reads it so
                found.setdefault("gen_ai.tool.call.result", attributes["message"])
            elif kind == "llm":
                messages = _choice_messages(parse_json_value(attributes["message"]))
                if messages:
                    found.setdefault("gen_ai.output.messages", messages)
    return found


def _choice_messages(message: object) -> list:
    """A `gen_ai.choice` event's message as output messages: semconv 1.36's message object
    (`tool_calls` with ids), or Strands' content blocks (`toolUse` with `toolUseId`)."""
    if isinstance(message, dict):
        return [message]
    if not isinstance(message, list):
        return []
    parts = []
    for block in message:
        use = block.get("toolUse") if isinstance(block, dict) else None
        if isinstance(use, dict) and isinstance(use.get("toolUseId"), str):
            parts.append({"type": "tool_call", "id": use["toolUseId"], "name": use.get("name"),
                          "arguments": use.get("input")})
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append({"type": "text", "content": block["text"]})  # an answer is a response too
    return [{"role": "assistant", "parts": parts}] if parts else []


def span_facts(attributes: dict, *, resource: dict | None = None, events: list[dict] | None = None,
               span_kind: int = 0) -> SpanFacts:
    """Map one span's attributes (and its resource's, for the device; its events', for content
    recorded there) onto agentops fields."""
    used: set[str] = set()
    kind = step_kind(attributes, span_kind=span_kind)
    if events:
        carried = event_content(events, kind=kind)
        if carried.keys() - attributes.keys():
            attributes = {**carried, **attributes}
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
    facts.serving = serving_timings(attributes)
    if facts.serving is not None:
        # The server's own span: the server is its resource (service.instance.id, host.name).
        facts.server = server_key({}, resource or {})
    elif kind == "llm":
        # A client call names the server that answered (server.address/server.port).
        facts.server = server_key(attributes, {}) if "server.address" in attributes else ""
    facts.tool_name = _text(attributes, TOOL_NAME_KEYS, used)
    if not facts.tool_name and kind == "tool":
        facts.tool_name = _text(attributes, ("traceloop.entity.name",), used)
    if kind == "tool" and isinstance(attributes.get(MCP_METHOD), str):
        facts.tool_server = _text(attributes, MCP_SERVER_NAME_KEYS, set()) or (
            server_key(attributes, {}) if "server.address" in attributes else "")
    facts.tool_args, args_call_id = _tool_args(attributes, kind, used)
    facts.tool_result, result_call_id = _tool_result(attributes, kind, used)
    if kind != "llm":
        facts.tool_call_id = _text(attributes, TOOL_CALL_ID_KEYS, used) or args_call_id or result_call_id
    if kind == "llm":
        facts.tool_call_ids = requested_call_ids(attributes)
    return facts


# The keys `span_facts` consumes: their value moves to a step column and leaves the step's stored
# attributes (one copy per step, not two). Attribute search (`attr=key:value`, analysis/filters.py)
# reads these keys from their column, so a key is found as the sender sent it, consumed or not.
# The session id is a task column. Content keys (tool arguments and results: input.value,
# output.value, …) are unwrapped on the way in, so they have no exact value to match: their words
# are found by `q`.
CONSUMED_KEY_COLUMNS: dict[str, str] = {
    **dict.fromkeys((*MODEL_KEYS, LANGCHAIN_MODEL_KEY), "model"),
    **dict.fromkeys(PROVIDER_KEYS, "provider"),
    **dict.fromkeys(INPUT_TOKEN_KEYS, "input_tokens"),
    **dict.fromkeys(OUTPUT_TOKEN_KEYS, "output_tokens"),
    **dict.fromkeys(CACHED_TOKEN_KEYS, "cached_tokens"),
    **dict.fromkeys(TTFT_SECONDS_KEYS, "ttft_ms"),      # sent in seconds, stored in ms
    **dict.fromkeys(STREAM_KEYS, "streamed"),
    **dict.fromkeys(SESSION_KEYS, "session_id"),
    DEVICE_KEY: "device",
    **dict.fromkeys((*TOOL_NAME_KEYS, "traceloop.entity.name"), "tool_name"),
    **dict.fromkeys(TOOL_CALL_ID_KEYS, "tool_call_id"),
}
# Resource keys that become task columns and leave the task's attributes.
CONSUMED_RESOURCE_KEY_COLUMNS: dict[str, str] = {
    RELEASE_KEY: "release", **dict.fromkeys(ENVIRONMENT_KEYS, "environment")}


def resource_release(resource: dict) -> str:
    return _text(resource, (RELEASE_KEY,), set())


def resource_environment(resource: dict) -> str:
    return _text(resource, ENVIRONMENT_KEYS, set())


def resource_session(resource: dict) -> str:
    return _text(resource, SESSION_KEYS, set())


# --- device telemetry (/v1/metrics) ----------------------------------------------------

# metric name → (resource sample field, factor to the field's unit). GPU series: the OTel
# hardware conventions (fractions 0..1, watts, °C) and dcgm-exporter's names (NVIDIA DCGM field
# ids; utilisations in percent, hence 0.01; clocks in MHz; frame buffer in MiB). The clock-event
# reasons field is the raw bitmask (`CLOCK_REASONS`); it was called CLOCK_THROTTLE_REASONS
# before DCGM 3.3 and exporters send either name.
DEVICE_METRICS: dict[str, tuple[str, float]] = {
    "hw.gpu.utilization": ("utilization", 1.0),
    "hw.gpu.memory.utilization": ("mem_bw_util", 1.0),
    "hw.power": ("power_w", 1.0),
    "hw.gpu.power": ("power_w", 1.0),
    "hw.temperature": ("temperature_c", 1.0),
    "hw.gpu.memory.usage": ("fb_used_mib", 1 / 1048576),  # bytes
    "hw.gpu.memory.limit": ("fb_total_mib", 1 / 1048576),
    # 1 for the state the component is in, 0 for the others (`hw.state`); read for GPUs only, as
    # a severity (`HW_STATES`).
    "hw.status": ("hw_status", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("utilization", 0.01),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("utilization", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_bw_util", 0.01),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_reasons", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_reasons", 1.0),
    "DCGM_FI_DEV_FB_USED": ("fb_used_mib", 1.0),
    # The power limit the GPU is held to (W; management limit, or the enforced one): the Devices
    # page draws power against it. No sample column: it lands in the sample's extra.
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    # Triton's own GPU gauges (fractions and watts), labelled gpu_uuid.
    "nv_gpu_utilization": ("utilization", 1.0),
    "nv_gpu_power_usage": ("power_w", 1.0),
}
# Inference-server series, by name with ':' and '.' read as '_' and a counter's `_total` dropped
# (a Prometheus scrape through the Collector keeps vLLM's `vllm:` names; other bridges rewrite
# them). Waiting requests are the server's queue depth, running requests its batch, KV-cache
# usage a fraction 0..1 (vLLM's `_perc` gauges are fractions despite the name: "1 means 100
# percent usage"), preemptions a counter.
SERVER_METRICS: dict[str, tuple[str, float]] = {
    "vllm_num_requests_waiting": ("queue_depth", 1.0),
    "vllm_num_requests_running": ("batch_size", 1.0),
    "vllm_kv_cache_usage_perc": ("kv_cache_usage", 1.0),
    "vllm_gpu_cache_usage_perc": ("kv_cache_usage", 1.0),
    "vllm_num_preemptions": ("preemptions", 1.0),
    "sglang_num_queue_reqs": ("queue_depth", 1.0),
    "sglang_num_running_reqs": ("batch_size", 1.0),
    "sglang_token_usage": ("kv_cache_usage", 1.0),
    "tgi_queue_size": ("queue_depth", 1.0),
    "tgi_batch_current_size": ("batch_size", 1.0),
    "nv_inference_pending_request_count": ("queue_depth", 1.0),
    # Time requests spent queued, as two counters: seconds in queue and requests, summed over
    # all requests since the server started. Their rise between two scrapes is the mean queue
    # time of the requests in between. Triton: cumulative µs in queue, and its requests counted
    # as succeeded and failed (both sum into one count).
    "nv_inference_queue_duration_us": ("queue_time_s", 1e-6),
    "nv_inference_request_success": ("queue_time_requests", 1.0),
    "nv_inference_request_failure": ("queue_time_requests", 1.0),
}
# Server histograms read as the same two counters: (field of the sum, field of the count, the
# sum's factor to seconds). vLLM's per-request queue time (cumulative, seconds).
SERVER_HISTOGRAMS: dict[str, tuple[str, str, float]] = {
    "vllm_request_queue_time_seconds": ("queue_time_s", "queue_time_requests", 1.0),
}
# Server fields that several series of one server add up to (one series per model, or per
# engine of a data-parallel vLLM); the others take the largest.
SERVER_SUMMED = frozenset({"queue_depth", "batch_size", "preemptions", "queue_time_s", "queue_time_requests"})
AGENTOPS_DEVICE_PREFIX = "agentops.device."
DCGM_PREFIX = "DCGM_FI_"
ROLE_SERVER = "server"
ROLE_GPU = "gpu"


def _server_name(name: str) -> str:
    name = name.replace(":", "_").replace(".", "_")
    return name[:-6] if name.endswith("_total") else name


# `hw.status`'s states as a severity: the highest a GPU reports at an instant is kept.
HW_STATES = {"ok": 0.0, "degraded": 1.0, "needs_cleaning": 1.0, "predicted_failure": 1.0, "failed": 2.0}


def hw_status(point: dict, resource: dict, value: float) -> float | None:
    """The severity a `hw.status` point states (None: a state it is not in, or not a GPU's)."""
    kind = _attr(point, resource, "hw.type")
    if value != 1 or (kind and kind != "gpu"):
        return None
    return HW_STATES.get(_attr(point, resource, "hw.state"))


def device_metric(name: str) -> tuple[str, float] | None:
    """The resource sample field (and unit factor) a device metric feeds; None if not a device metric."""
    if name in DEVICE_METRICS:
        return DEVICE_METRICS[name]
    if name.startswith(AGENTOPS_DEVICE_PREFIX) and len(name) > len(AGENTOPS_DEVICE_PREFIX):
        return name[len(AGENTOPS_DEVICE_PREFIX):], 1.0
    return None


def server_metric(name: str) -> tuple[str, float] | None:
    """The resource sample field an inference server's series feeds; None if it is not one."""
    return SERVER_METRICS.get(_server_name(name))


def server_histogram(name: str) -> tuple[str, str, float] | None:
    """The (sum field, count field, factor) an inference server's histogram feeds; None if none."""
    return SERVER_HISTOGRAMS.get(_server_name(name))


def _attr(point: dict, resource: dict, key: str) -> str:
    for attrs in (point, resource):
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return ""


def short_host(name: str) -> str:
    """A host as servers and GPUs are matched on: lower case, its first DNS label (a client
    names `vllm-1.internal` where dcgm-exporter says `vllm-1`); IP addresses stay whole."""
    name = name.strip().lower().strip("[]")
    if not name or ":" in name or name.replace(".", "").isdigit():
        return name
    return name.split(".", 1)[0]


def host_of_server(key: str) -> str:
    """The host part of a server key `address[:port]`."""
    address, _, port = key.rpartition(":")
    return short_host(address if address and port.isdigit() else key)


# The OpenTelemetry SDKs give every process a random `service.instance.id` (a UUID) when none
# is configured: an identity of the process, never the address of a server.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def server_port(value: object) -> str:
    """A port as servers are matched on: the number, whether it was sent as an int (a span's
    `server.port`), a string (a Prometheus label, `"8000"`) or a float; else the text as sent."""
    if isinstance(value, bool):
        return ""
    text = str(value).strip() if isinstance(value, str | int | float) else ""
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() and number >= 0 else text


def server_key(point: dict, resource: dict) -> str:
    """The inference server a series (or span) belongs to: `server.address[:server.port]`, else the
    Prometheus `instance` label the Collector puts in `service.instance.id`, else `host.name`. The
    port is a number however it was sent (`server_port`); an address with no `server.port` takes
    the port of an `instance` / `service.instance.id` `host:port` of the same host."""
    address = _attr(point, resource, "server.address")
    if address:
        port = next((p for attrs in (point, resource) if (p := server_port(attrs.get("server.port")))), "")
        if not port:
            for key in ("instance", "service.instance.id"):
                host, _, named = _attr(point, resource, key).rpartition(":")
                if host and short_host(host) == short_host(address) and server_port(named).isdigit():
                    port = server_port(named)
                    break
        return (f"{address}:{port}" if port else address).lower()
    for key in ("instance", "service.instance.id", "host.name"):
        value = _attr(point, resource, key)
        if value and not (key == "service.instance.id" and _UUID.fullmatch(value)):
            host, _, port = value.rpartition(":")
            if host and port and server_port(port).isdigit():
                value = f"{host}:{server_port(port)}"
            return value.lower()
    return ""


# Whose a device is, beyond its host (docs/otlp.md, "Which server and GPU served a call"). A server
# series: its pod, namespace and workload, the OTel k8s resource attributes (the Collector's
# k8sattributes processor adds them). A GPU series: the pod, namespace and container dcgm-exporter
# labels it with in Kubernetes (the pod the GPU is assigned to, on the data point: the resource's
# k8s.* describe the exporter's own pod) and its index on the host (`gpu`).
SERVER_LABEL_KEYS = ("k8s.pod.name", "k8s.namespace.name", "k8s.deployment.name", "k8s.statefulset.name",
                     "k8s.service.name")
GPU_POD_LABELS = {"pod": "k8s.pod.name", "namespace": "k8s.namespace.name", "container": "k8s.container.name",
                  "pod_name": "k8s.pod.name", "pod_namespace": "k8s.namespace.name",
                  "container_name": "k8s.container.name", "k8s.pod.name": "k8s.pod.name",
                  "k8s.namespace.name": "k8s.namespace.name"}
GPU_INDEX_LABEL = "gpu"
# A GPU's label: the server whose own request spans name it (`hw.id` on vLLM's `llm_request`).
SERVED_BY_LABEL = "agentops.server"


def device_labels(point: dict, resource: dict, *, role: str) -> dict[str, str]:
    """The labels that say whose a device is (SERVER_LABEL_KEYS, GPU_POD_LABELS, its index)."""
    if role == ROLE_SERVER:
        return {key: value for key in SERVER_LABEL_KEYS if (value := _attr(point, resource, key))}
    out: dict[str, str] = {}
    for label, key in GPU_POD_LABELS.items():
        value = point.get(label)
        if isinstance(value, str) and value:
            out.setdefault(key, value)
    index = _attr(point, resource, GPU_INDEX_LABEL)
    if index:
        out[GPU_INDEX_LABEL] = index
    return out


def span_gpus(attributes: dict, resource: dict) -> list[str]:
    """The GPUs a span names: `hw.id` on the span, else on its resource; one id or a list of them
    (a tensor-parallel server runs on several)."""
    for attrs in (attributes, resource):
        value = attrs.get(DEVICE_KEY)
        if isinstance(value, str) and value:
            return [value]
        if isinstance(value, list | tuple):
            found = [v for v in value if isinstance(v, str) and v]
            if found:
                return found
    return []


def device_id(point: dict, resource: dict) -> str:
    """`hw.id` of the data point or its resource; for DCGM series the GPU's UUID, else
    `<Hostname>-gpu<gpu>` (DCGM exporter labels); Triton's `gpu_uuid`."""
    for attrs in (point, resource):
        value = attrs.get(DEVICE_KEY)
        if isinstance(value, str) and value:
            return value
    for key in ("UUID", "gpu_uuid"):
        uuid = _attr(point, resource, key)
        if uuid:
            return uuid
    gpu = point.get("gpu", resource.get("gpu"))
    if gpu is not None and gpu != "":
        host = point.get("Hostname", resource.get("Hostname"))
        return f"{host}-gpu{gpu}" if host else f"gpu{gpu}"
    return ""


def device_host(point: dict, resource: dict) -> str:
    """The host a GPU series reports from: dcgm-exporter's `Hostname`, else `host.name`, else the
    host of the server that exports it (Triton's GPU gauges)."""
    host = _attr(point, resource, "Hostname") or _attr(point, resource, "host.name")
    if host:
        return short_host(host)
    server = server_key(point, resource)
    return host_of_server(server) if server else ""


def device_vendor(point: dict, resource: dict, *, metric: str) -> str:
    for attrs in (point, resource):
        value = attrs.get("hw.vendor")
        if isinstance(value, str) and value:
            return "".join(ch for ch in value.lower() if ch.isalnum())
    return "nvidia" if metric.startswith(DCGM_PREFIX) or metric.startswith("nv_gpu_") else ""


def device_hardware(point: dict, resource: dict) -> str:
    for key in ("hw.model", "modelName"):
        for attrs in (point, resource):
            value = attrs.get(key)
            if isinstance(value, str) and value:
                return value
    return ""


def histogram_model(point: dict) -> str:
    return _text(point, ("gen_ai.response.model", "gen_ai.request.model"), set())
