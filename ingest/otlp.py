"""OTLP/HTTP decoding: ExportTraceServiceRequest / ExportMetricsServiceRequest bytes (protobuf
or proto3 JSON) into the plain records of `ingest.records`, plus the replies. No Django.

Traces: every span becomes a step (task_id = trace id hex, step_id = span id hex,
parent_step_id = parent span id hex); a root span (no parent) also becomes the task. Release,
environment and session come from the resource and ride on every step, so a task whose root
span arrives last, or never, still gets them. Attribute meaning lives in `ingest.conventions`.

One bad span never loses the others: its problem (bad id, end before start, a time outside
2000..2200, nesting too deep) is counted and named in the reply's partialSuccess, as OTLP
asks, and the client does not retry it. Only a body that cannot be decoded at all raises
`OtlpDecodeError` (the view answers 400).

Protobuf is walked directly (no MessageToDict): this is the hot path of every SDK exporter.
Proto3 JSON is read span by span into the same protobuf classes (ids are hex in OTLP/JSON,
not base64, so they are taken out first), which gives one mapping for both encodings.

Metrics: gauges and sums of device metrics (hw.*, agentops.device.*, DCGM exporter names,
see `conventions.DEVICE_METRICS`) whose data point or resource names a device become
resource samples; `gen_ai.*` histograms become latency histograms per model. Other metrics
are not about agents or devices and are ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    NumberDataPoint,
    SummaryDataPoint,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ingest import conventions, instrumentation, limits
from ingest.records import (
    Batch,
    HistogramRecord,
    RecordError,
    SampleRecord,
    StepRecord,
    TaskRecord,
    check_count,
    check_finite,
    check_reading,
    check_span,
    check_time,
    clean_attributes,
    clean_json,
    clean_text,
    tool_result_text,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MEDIA_ALIASES = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}

STATUS_CODE_ERROR = 2
# Span events kept per step: enough for streaming markers and exceptions; a span that logs
# every chunk as an event would otherwise put megabytes into one row.
MAX_SPAN_EVENTS = 128
# Problems named in partialSuccess.errorMessage; the count covers all of them.
MAX_REPORTED_PROBLEMS = 10

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_JSON_ERRORS = (json_format.ParseError, ValueError, TypeError, AttributeError, KeyError,
                IndexError, RecursionError)


class OtlpDecodeError(ValueError):
    """The body as a whole cannot be decoded; the message says what and where."""


def media_type(content_type: str) -> str | None:
    """The OTLP encoding a Content-Type header names (parameters such as charset ignored)."""
    return _MEDIA_ALIASES.get(content_type.split(";", 1)[0].strip().lower())


@dataclass(slots=True)
class Decoded:
    """Records decoded from one request, and what was refused in it."""

    batch: Batch = field(default_factory=Batch)
    rejected: int = 0
    problems: list[str] = field(default_factory=list)

    def reject(self, path: str, problem: str) -> None:
        self.rejected += 1
        if len(self.problems) < MAX_REPORTED_PROBLEMS:
            self.problems.append(f"{path}: {problem}")

    def error_message(self) -> str:
        if not self.rejected:
            return ""
        more = self.rejected - len(self.problems)
        return "; ".join(self.problems) + (f"; and {more} more" if more > 0 else "")


# --- bodies ------------------------------------------------------------------------------


def _parse_protobuf(message_class, body: bytes):
    message = message_class()
    try:
        message.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        hint = " (it looks like JSON: send Content-Type: application/json)" if body.lstrip()[:1] in (b"{", b"[") else ""
        raise OtlpDecodeError(
            f"body: not a valid {message_class.DESCRIPTOR.name} protobuf message ({exc}){hint}") from None
    return message


def _parse_json(body: bytes) -> dict:
    if not body.strip():
        return {}
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        raise OtlpDecodeError(f"body: malformed JSON at line {exc.lineno} column {exc.colno} "
                              f"(char {exc.pos}): {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise OtlpDecodeError(f"body: not UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise OtlpDecodeError("body: JSON nested too deeply") from None
    if not isinstance(payload, dict):
        raise OtlpDecodeError("body: must be a JSON object")
    return payload


def _json_list(obj: dict, keys: tuple[str, ...], path: str) -> list:
    for key in keys:
        value = obj.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            raise OtlpDecodeError(f"{path}.{key}: must be an array")
        return value
    return []


def _json_object(value: object, path: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpDecodeError(f"{path}: must be an object")
    return value


def _json_message(message_class, value: dict, path: str):
    try:
        return json_format.ParseDict(value, message_class(), ignore_unknown_fields=True)
    except _JSON_ERRORS as exc:
        raise OtlpDecodeError(f"{path}: {_parse_error(exc)}") from None


def _parse_error(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return clean_text(str(exc), limit=300)


# --- values ------------------------------------------------------------------------------


def _value(any_value, depth: int = 0) -> object:
    """An AnyValue as a plain Python value (bytes as base64 text)."""
    which = any_value.WhichOneof("value")
    if which == "string_value":
        return any_value.string_value
    if which == "int_value":
        return any_value.int_value
    if which == "double_value":
        return any_value.double_value
    if which == "bool_value":
        return any_value.bool_value
    if depth >= limits.MAX_JSON_DEPTH:
        raise RecordError(f"attributes: nested deeper than {limits.MAX_JSON_DEPTH} levels")
    if which == "array_value":
        return [_value(v, depth + 1) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value, depth + 1) for kv in any_value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(any_value.bytes_value).decode()
    return None


def _attributes(key_values) -> dict:
    out = {}
    for kv in key_values:
        value = kv.value
        # Most attribute values are strings: answer them without a call.
        out[kv.key] = value.string_value if value.WhichOneof("value") == "string_value" else _value(value)
    return out


def _time(nanos: int, *, path: str) -> datetime:
    if not nanos:
        raise RecordError(f"{path}: is missing (0)")
    return check_time(_EPOCH + timedelta(microseconds=nanos // 1000), path=path)


def _iso(nanos: int) -> str | None:
    try:
        return _time(nanos, path="").isoformat()
    except RecordError:
        return None


def _short(value: str, limit: int = limits.MAX_NAME_LENGTH) -> str:
    """Cleaned text that fits a column of `limit` characters (marker included)."""
    value = clean_text(value, limit=10**9)
    if len(value) <= limit:
        return value
    return value[: limit - len(limits.TRUNCATION_MARKER)] + limits.TRUNCATION_MARKER


def _id(raw: bytes, size: int, *, path: str) -> str:
    if len(raw) != size:
        raise RecordError(f"{path}: must be {size} bytes ({2 * size} hex digits), got {len(raw)}")
    if not any(raw):
        raise RecordError(f"{path}: all zeros is not a valid id")
    return raw.hex()


# --- traces ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Resource:
    """What a resource contributes to each of its spans, computed once."""

    attributes: dict
    release: str = ""
    environment: str = ""
    session_id: str = ""
    task_attributes: dict = field(default_factory=dict)
    error: str = ""

    @classmethod
    def of(cls, resource) -> _Resource:
        try:
            attributes = _attributes(resource.attributes)
            task_attributes = clean_attributes({
                k: v for k, v in attributes.items()
                if k != conventions.RELEASE_KEY and k not in conventions.ENVIRONMENT_KEYS
            }, path="resource.attributes")
        except RecordError as exc:
            return cls(attributes={}, error=str(exc))
        return cls(
            attributes=attributes,
            release=_short(conventions.resource_release(attributes)),
            environment=_short(conventions.resource_environment(attributes), 100),
            session_id=_short(conventions.resource_session(attributes)),
            task_attributes=task_attributes,
        )


def _events(span) -> tuple[list[dict], float | None, str]:
    """The span's events as JSON, the TTFT (ms) a first-token event marks, the exception text."""
    events: list[dict] = []
    ttft_ms = None
    exception = ""
    start = span.start_time_unix_nano
    for event in span.events[:MAX_SPAN_EVENTS]:
        attributes = _attributes(event.attributes)
        if ttft_ms is None and conventions.is_first_token_event(event.name) and event.time_unix_nano >= start:
            ttft_ms = (event.time_unix_nano - start) / 1e6
        if event.name == "exception" and not exception:
            parts = [str(attributes.get(k, "")) for k in ("exception.type", "exception.message")]
            exception = ": ".join(p for p in parts if p)
        events.append({"name": event.name, "ts": _iso(event.time_unix_nano), "attributes": attributes})
    if len(span.events) > MAX_SPAN_EVENTS:
        events.append({"name": "agentops.dropped_events", "ts": None,
                       "attributes": {"count": len(span.events) - MAX_SPAN_EVENTS}})
    return events, ttft_ms, exception


# A first token cannot come after its call ended; clocks of a span's start and its events may
# disagree by a little.
TTFT_SLACK_MS = 5.0
# An event this long after its span's end is a clock or exporter error, not a late end.
MAX_LATE_EVENT_S = 3600.0


def _plausible_ttft(ttft_ms: float | None, duration_ms: float) -> tuple[float | None, str]:
    """A TTFT longer than its call is impossible. Read in seconds as the conventions say, such a
    value that fits when read as milliseconds was sent in milliseconds (Strands sends
    gen_ai.server.time_to_first_token = 132 for a 133 ms call); otherwise it is dropped. The
    note says which, on the step."""
    if ttft_ms is None or ttft_ms <= duration_ms + TTFT_SLACK_MS:
        return ttft_ms, ""
    if 1.0 <= ttft_ms / 1000.0 <= duration_ms + TTFT_SLACK_MS:  # no model answers within 1 ms
        return ttft_ms / 1000.0, "TTFT read as milliseconds: in seconds it exceeded the call"
    return None, f"TTFT dropped: {ttft_ms:.0f} ms is longer than the call ({duration_ms:.0f} ms)"


def span_records(span, resource: _Resource) -> tuple[TaskRecord | None, StepRecord]:
    """One span as a step, and as the task too when it is a root span. Raises RecordError."""
    if resource.error:
        raise RecordError(f"resource: {resource.error}")
    trace_id = _id(span.trace_id, 16, path="traceId")
    span_id = _id(span.span_id, 8, path="spanId")
    parent_id = _id(span.parent_span_id, 8, path="parentSpanId") if span.parent_span_id else ""
    started_at = _time(span.start_time_unix_nano, path="startTimeUnixNano")
    ended_at = _time(span.end_time_unix_nano, path="endTimeUnixNano")
    check_span(started_at, ended_at, what="span")
    attributes = _attributes(span.attributes)
    events, event_ttft_ms, exception = _events(span)
    facts = conventions.span_facts(attributes, resource=resource.attributes, events=events, span_kind=span.kind)
    last_event = max((e.time_unix_nano for e in span.events[:MAX_SPAN_EVENTS]), default=0)
    if last_event > span.end_time_unix_nano:
        # A span cannot end before its own events: LlamaIndex's OpenInference ends a streamed
        # call's span when the stream is handed back, and records its first token after that.
        # The call lasted at least until its last event.
        late = _time(last_event, path="events.timeUnixNano")
        if (late - ended_at).total_seconds() <= MAX_LATE_EVENT_S:
            ended_at = late
            attributes["agentops.end_note"] = "ended at its last event, recorded after the span's end"
    kind = facts.kind
    input_tokens, output_tokens, cached_tokens = facts.input_tokens, facts.output_tokens, facts.cached_tokens
    if facts.serving is not None:
        # An inference server's request span is the server's view of its parent, the client's
        # LLM call: a child of kind `other` whose timings the analysis folds into that call, not a
        # second call (its token counts stay attributes, or every task would count them twice).
        # With no parent (the client sent no trace context) it is the only record of the call.
        attributes[conventions.SERVING_KEY] = facts.serving
        if parent_id:
            kind, input_tokens, output_tokens, cached_tokens = "other", None, None, None
        else:
            kind = "llm"
    if not parent_id and kind == "other":
        kind = "framework"  # an unclassified root span is the orchestration around the steps
    ttft_ms = facts.ttft_ms if facts.ttft_ms is not None else event_ttft_ms
    ttft_ms, ttft_note = _plausible_ttft(ttft_ms, (ended_at - started_at).total_seconds() * 1000)
    if ttft_note:
        attributes["agentops.ttft_note"] = ttft_note
    # A time to first chunk, however recorded, means the response was streamed.
    streamed = facts.streamed if facts.streamed is not None else (True if ttft_ms is not None else None)
    failed = span.status.code == STATUS_CODE_ERROR
    error = (span.status.message or exception or "error") if failed else ""
    session_id = _short(facts.session_id) or resource.session_id
    # The release is the service's version; an agent that names only its own version
    # (gen_ai.agent.version) is released under that.
    agent_version = attributes.get(conventions.AGENT_VERSION_KEY)
    release = resource.release or (_short(str(agent_version)) if isinstance(agent_version, str | int) else "")
    if facts.tool_server:
        attributes[conventions.TOOL_SERVER_KEY] = facts.tool_server
    name = _short(span.name)
    if kind == "agent" and not any(attributes.get(k) for k in ("gen_ai.agent.name", "agent.name")):
        # An agent step that names its agent only in its span name (CrewAI's `<role>._execute_core`).
        owner = conventions.run_owner(name)
        if owner != name and not conventions.is_generic_name(owner):
            attributes[conventions.AGENT_NAME_KEY] = owner
    step = StepRecord(
        step_id=span_id,
        task_id=trace_id,
        parent_step_id=parent_id,
        kind=kind,
        name=name,
        started_at=started_at,
        ended_at=ended_at,
        status="error" if failed else "ok",
        error=clean_text(error, limit=limits.MAX_ERROR_CHARS),
        attributes=clean_attributes({k: v for k, v in attributes.items() if k not in facts.used}),
        events=clean_json(events, path="events"),
        model=_short(facts.model),
        provider=_short(facts.provider, 100),
        # hw.id when the span names its device; else the server that answered (docs/otlp.md,
        # "Which server and GPU served a call").
        device=_short(facts.device or facts.server),
        # An inference server's span that names its GPUs says they are that server's.
        device_labels={_short(gpu): {conventions.SERVED_BY_LABEL: _short(facts.server)}
                       for gpu in conventions.span_gpus(attributes, resource.attributes)}
        if facts.serving is not None and facts.server else {},
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        ttft_ms=ttft_ms,
        streamed=streamed,
        tool_name=_short(facts.tool_name),
        tool_args=clean_json(facts.tool_args, path="tool_args") if facts.tool_args is not None else None,
        tool_result=tool_result_text(facts.tool_result),
        tool_call_id=_short(facts.tool_call_id, limits.MAX_ID_LENGTH),
        tool_call_ids=[_short(c, limits.MAX_ID_LENGTH) for c in facts.tool_call_ids[:limits.MAX_TOOL_CALL_IDS]],
        release=release,
        environment=resource.environment,
        session_id=session_id,
    )
    if parent_id:
        return None, step
    agent_name = attributes.get("agent.name")
    given = _short(facts.task_name) or (_short(agent_name) if isinstance(agent_name, str) else "")
    if not given and not conventions.is_generic_name(name):
        given = conventions.run_owner(name)
    task = TaskRecord(
        task_id=trace_id,
        name=given or name,
        name_given=bool(given) and not conventions.is_generic_name(given),
        release=release,
        environment=resource.environment,
        session_id=session_id,
        started_at=started_at,
        ended_at=ended_at,
        status="error" if failed else "ok",
        attributes=resource.task_attributes,
    )
    return task, step


def _add_span(decoded: Decoded, span, resource: _Resource, *, path: str, source: tuple[str, ...] = ()) -> None:
    try:
        task, step = span_records(span, resource)
    except RecordError as exc:
        decoded.reject(path, str(exc))
        return
    step.source = source
    decoded.batch.steps.append(step)
    if task is not None:
        decoded.batch.tasks.append(task)


def _json_id(value: object, size: int, *, path: str) -> bytes:
    """OTLP/JSON ids are hex; base64 (what a generic proto3 JSON encoder writes) is tolerated."""
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        raise RecordError(f"{path}: must be a hex string")
    try:
        return bytes.fromhex(value)
    except ValueError:
        pass
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size:
        return raw
    raise RecordError(f"{path}: {clean_text(value, limit=40)!r} is not {2 * size} hex digits")


def _json_span(value: object) -> Span:
    if not isinstance(value, dict):
        raise RecordError("must be an object")
    value = dict(value)
    value.pop("links", None)  # links carry hex ids too, and agentops does not use them
    ids = {key: value.pop(key, None) for key in ("traceId", "spanId", "parentSpanId")}
    try:
        span = json_format.ParseDict(value, Span(), ignore_unknown_fields=True)
    except _JSON_ERRORS as exc:
        raise RecordError(_parse_error(exc)) from None
    span.trace_id = _json_id(ids["traceId"], 16, path="traceId")
    span.span_id = _json_id(ids["spanId"], 8, path="spanId")
    span.parent_span_id = _json_id(ids["parentSpanId"], 8, path="parentSpanId")
    return span


def decode_traces(body: bytes, *, media: str) -> Decoded:
    """An ExportTraceServiceRequest body as records; raises OtlpDecodeError if undecodable."""
    decoded = Decoded()
    if media == PROTOBUF:
        request = _parse_protobuf(ExportTraceServiceRequest, body)
        for ri, resource_spans in enumerate(request.resource_spans):
            resource = _Resource.of(resource_spans.resource)
            for si, scope_spans in enumerate(resource_spans.scope_spans):
                source = instrumentation.source_of(resource.attributes, scope_name=scope_spans.scope.name,
                                                   scope_version=scope_spans.scope.version)
                for pi, span in enumerate(scope_spans.spans):
                    _add_span(decoded, span, resource, source=source,
                              path=f"resourceSpans[{ri}].scopeSpans[{si}].spans[{pi}]")
        return decoded
    payload = _parse_json(body)
    for ri, resource_spans in enumerate(_json_list(payload, ("resourceSpans",), "body")):
        rpath = f"resourceSpans[{ri}]"
        resource_spans = _json_object(resource_spans, rpath)
        resource = _Resource.of(_json_message(
            Resource, _json_object(resource_spans.get("resource"), f"{rpath}.resource"), f"{rpath}.resource"))
        scopes = _json_list(resource_spans, ("scopeSpans", "instrumentationLibrarySpans"), rpath)
        for si, scope_spans in enumerate(scopes):
            spath = f"{rpath}.scopeSpans[{si}]"
            scope = _json_object(scope_spans, spath).get("scope", scope_spans.get("instrumentationLibrary"))
            scope = scope if isinstance(scope, dict) else {}
            source = instrumentation.source_of(resource.attributes, scope_name=scope.get("name"),
                                               scope_version=scope.get("version"))
            for pi, value in enumerate(_json_list(_json_object(scope_spans, spath), ("spans",), spath)):
                path = f"{spath}.spans[{pi}]"
                try:
                    span = _json_span(value)
                except RecordError as exc:
                    decoded.reject(path, str(exc))
                    continue
                _add_span(decoded, span, resource, path=path, source=source)
    return decoded


# --- metrics -----------------------------------------------------------------------------


def _number(point) -> int | float | None:
    """The point's value as sent (an int stays exact: a bitmask must); None when it has none."""
    which = point.WhichOneof("value")
    if which == "as_double":
        return point.as_double
    if which == "as_int":
        return point.as_int
    return None


def _point_path(path: str, places: Sequence[int], di: int) -> str:
    """Where a data point sat in the request (`places`: the original positions of the points kept
    after JSON points that could not be read were taken out)."""
    return f"{path}.dataPoints[{places[di] if places else di}]"


def _device_points(decoded: Decoded, samples: dict, metric, points, resource: dict, *, path: str,
                   places: Sequence[int] = ()) -> None:
    target = conventions.device_metric(metric.name)
    role = conventions.ROLE_GPU
    if target is None:
        target = conventions.server_metric(metric.name)
        role = conventions.ROLE_SERVER
    if target is None:
        return
    column, factor = target
    column = _short(column, 100)
    for di, point in enumerate(points):
        try:
            attributes = _attributes(point.attributes)
            device, host = _point_device(metric.name, attributes, resource, role=role)
            value = _number(point)
            if value is None:
                raise RecordError(f"{metric.name}: the data point has no value")
            # Checked against the column's type and meaning, one point at a time (records.check_reading).
            value = check_reading(column, value if factor == 1 else value * factor, path=f"{metric.name} ({column})")
            ts = _time(point.time_unix_nano, path="timeUnixNano")
        except RecordError as exc:
            decoded.reject(_point_path(path, places, di), str(exc))
            continue
        if column == "hw_status" and (value := conventions.hw_status(attributes, resource, value)) is None:
            continue
        _sample_value(samples, device, host, ts, column, value, role=role, metric=metric.name,
                      attributes=attributes, resource=resource)


def _point_device(metric: str, attributes: dict, resource: dict, *, role: str) -> tuple[str, str]:
    """The device a data point describes and its host: an inference server by its key, a GPU by its id."""
    if role == conventions.ROLE_SERVER:
        device = conventions.server_key(attributes, resource)
        if not device:
            raise RecordError(f"{metric}: no server.address, instance or service.instance.id "
                              "on the data point or its resource")
        return device, conventions.host_of_server(device)
    device = conventions.device_id(attributes, resource)
    if not device:
        raise RecordError(f"{metric}: no hw.id on the data point or its resource")
    return device, conventions.device_host(attributes, resource)


def _sample_value(samples: dict, device: str, host: str, ts, column: str, value: float, *, role: str,
                  metric: str, attributes: dict, resource: dict) -> None:
    key = (_short(device), ts)
    sample = samples.get(key)
    if sample is None:
        sample = samples[key] = SampleRecord(device=key[0], ts=ts)
    known = sample.metrics.get(column)
    if known is not None:
        # One series per model (or engine) of the same server at the same instant, or per task
        # (`hw.gpu.task`) or state (`hw.status`) of a GPU: the server's counts add up, else the highest.
        summed = role == conventions.ROLE_SERVER and column in conventions.SERVER_SUMMED
        value = known + value if summed else max(known, value)
    sample.metrics[column] = value
    sample.host = sample.host or _short(host, 200)
    sample.role = sample.role or role
    sample.vendor = sample.vendor or _short(conventions.device_vendor(attributes, resource, metric=metric), 50)
    sample.hardware = sample.hardware or _short(conventions.device_hardware(attributes, resource), 100)
    for label, text in conventions.device_labels(attributes, resource, role=role).items():
        sample.labels.setdefault(label, _short(text))


def _server_histogram_points(decoded: Decoded, samples: dict, metric, resource: dict, *, path: str,
                             places: Sequence[int] = ()) -> None:
    """A server's cumulative histogram (vLLM's queue time) as two counters of its samples: the sum
    (seconds) and the count of requests."""
    sum_field, count_field, factor = conventions.server_histogram(metric.name)
    for di, point in enumerate(metric.histogram.data_points):
        try:
            attributes = _attributes(point.attributes)
            device, host = _point_device(metric.name, attributes, resource, role=conventions.ROLE_SERVER)
            if not point.HasField("sum"):
                raise RecordError(f"{metric.name}: the data point has no sum")
            total = check_reading(sum_field, point.sum * factor, path=f"{metric.name} (sum)")
            count = check_reading(count_field, point.count, path=f"{metric.name} (count)")  # a float column
            ts = _time(point.time_unix_nano, path="timeUnixNano")
        except RecordError as exc:
            decoded.reject(_point_path(path, places, di), str(exc))
            continue
        for column, value in ((sum_field, total), (count_field, count)):
            _sample_value(samples, device, host, ts, column, value, role=conventions.ROLE_SERVER, metric=metric.name,
                          attributes=attributes, resource=resource)


def _histogram_point(point, metric_name: str, resource: dict) -> HistogramRecord:
    attributes = _attributes(point.attributes)
    bounds = list(point.explicit_bounds)
    counts = list(point.bucket_counts)
    if counts and len(counts) != len(bounds) + 1:
        raise RecordError(f"{metric_name}: {len(counts)} bucket counts for {len(bounds)} bounds")
    count = check_count(point.count, path=f"{metric_name} (count)")
    for i, n in enumerate(counts):
        check_count(n, path=f"{metric_name} (bucketCounts[{i}])")
    for i, bound in enumerate(bounds):
        check_finite(bound, path=f"{metric_name} (explicitBounds[{i}])")
    total = check_finite(point.sum, path=f"{metric_name} (sum)") if point.HasField("sum") else None
    return HistogramRecord(
        metric=_short(metric_name),
        ts=_time(point.time_unix_nano, path="timeUnixNano"),
        count=count,
        model=_short(conventions.histogram_model(attributes)),
        device=_short(conventions.device_id(attributes, resource)),
        start=_time(point.start_time_unix_nano, path="startTimeUnixNano") if point.start_time_unix_nano else None,
        sum=total,
        bounds=bounds,
        counts=counts,
        attributes=clean_attributes(attributes),
    )


def _histogram_points(decoded: Decoded, histograms: dict, metric, resource: dict, *, path: str,
                      places: Sequence[int] = ()) -> None:
    for di, point in enumerate(metric.histogram.data_points):
        try:
            record = _histogram_point(point, metric.name, resource)
        except RecordError as exc:
            decoded.reject(_point_path(path, places, di), str(exc))
            continue
        key = (record.metric, record.model, record.device, record.ts)
        known = histograms.get(key)
        if known is not None and known.bounds == record.bounds and len(known.counts) == len(record.counts):
            if known.count + record.count > limits.INT64_MAX or any(
                    a + b > limits.INT64_MAX for a, b in zip(known.counts, record.counts, strict=True)):
                decoded.reject(_point_path(path, places, di), f"{metric.name} (count): added to the series before it, "
                                                           "it exceeds 2^63-1")
                continue
            # Series that differ only in attributes agentops does not key on (operation,
            # server address) are one histogram per model and device: add them up.
            known.count += record.count
            known.counts = [a + b for a, b in zip(known.counts, record.counts, strict=True)]
            known.sum = None if known.sum is None or record.sum is None else known.sum + record.sum
            continue
        histograms[key] = record


def decode_metrics(body: bytes, *, media: str) -> Decoded:
    """An ExportMetricsServiceRequest body as samples and histograms; rejected data points are
    counted. Raises OtlpDecodeError if undecodable."""
    decoded = Decoded()
    kept: dict[tuple[int, int, int], list[int]] = {}
    if media == PROTOBUF:
        request = _parse_protobuf(ExportMetricsServiceRequest, body)
    else:
        payload = _parse_json(body)
        _drop_exemplars(payload)
        kept = _json_points_check(decoded, payload)
        request = _json_message(ExportMetricsServiceRequest, payload, "body")
    samples: dict = {}
    histograms: dict = {}
    for ri, resource_metrics in enumerate(request.resource_metrics):
        try:
            resource = _attributes(resource_metrics.resource.attributes)
        except RecordError as exc:
            raise OtlpDecodeError(f"resourceMetrics[{ri}].resource: {exc}") from None
        for si, scope_metrics in enumerate(resource_metrics.scope_metrics):
            for mi, metric in enumerate(scope_metrics.metrics):
                path = f"resourceMetrics[{ri}].scopeMetrics[{si}].metrics[{mi}]"
                places = kept.get((ri, si, mi), ())
                which = metric.WhichOneof("data")
                if which in ("gauge", "sum"):
                    _device_points(decoded, samples, metric, getattr(metric, which).data_points,
                                   resource, path=path, places=places)
                elif which == "histogram" and conventions.server_histogram(metric.name):
                    _server_histogram_points(decoded, samples, metric, resource, path=path, places=places)
                elif which == "histogram" and metric.name.startswith("gen_ai."):
                    _histogram_points(decoded, histograms, metric, resource, path=path, places=places)
                elif which == "exponential_histogram" and metric.name.startswith("gen_ai."):
                    decoded.reject(path, f"{metric.name}: exponential histograms are not supported; "
                                         "use explicit bucket boundaries")
    decoded.batch.samples = list(samples.values())
    decoded.batch.histograms = list(histograms.values())
    return decoded


_POINT_CLASSES = {"gauge": NumberDataPoint, "sum": NumberDataPoint, "histogram": HistogramDataPoint,
                  "exponentialHistogram": ExponentialHistogramDataPoint, "summary": SummaryDataPoint}


def _json_points_check(decoded: Decoded, payload: dict) -> dict[tuple[int, int, int], list[int]]:
    """Take out of an OTLP/JSON metrics body the data points proto3 JSON cannot read (a count
    beyond uint64, a string where a number goes), each rejected on its own: one bad point must not
    refuse the whole body. Returns, per metric that lost points, the positions of those kept.
    Anything malformed above the points is left for the whole body's parse to refuse."""
    kept: dict[tuple[int, int, int], list[int]] = {}
    resources = payload.get("resourceMetrics")
    for ri, resource_metrics in enumerate(resources if isinstance(resources, list) else ()):
        scopes = resource_metrics.get("scopeMetrics") if isinstance(resource_metrics, dict) else None
        for si, scope_metrics in enumerate(scopes if isinstance(scopes, list) else ()):
            metrics = scope_metrics.get("metrics") if isinstance(scope_metrics, dict) else None
            for mi, metric in enumerate(metrics if isinstance(metrics, list) else ()):
                if not isinstance(metric, dict):
                    continue
                for kind, point_class in _POINT_CLASSES.items():
                    data = metric.get(kind)
                    points = data.get("dataPoints") if isinstance(data, dict) else None
                    if not isinstance(points, list):
                        continue
                    good = []
                    for di, point in enumerate(points):
                        try:
                            json_format.ParseDict(point, point_class(), ignore_unknown_fields=True)
                        except _JSON_ERRORS as exc:
                            path = f"resourceMetrics[{ri}].scopeMetrics[{si}].metrics[{mi}].dataPoints[{di}]"
                            decoded.reject(path, f"{clean_text(str(metric.get('name')), limit=200)}: "
                                                 f"{_parse_error(exc)}")
                            continue
                        good.append(di)
                    if len(good) < len(points):
                        data["dataPoints"] = [points[di] for di in good]
                        kept[(ri, si, mi)] = good
    return kept


def _drop_exemplars(payload: object, depth: int = 0) -> None:
    """Exemplars carry hex span/trace ids that proto3 JSON would read as base64; unused here."""
    if depth > 12:
        return
    if isinstance(payload, dict):
        payload.pop("exemplars", None)
        for value in payload.values():
            _drop_exemplars(value, depth + 1)
    elif isinstance(payload, list):
        for value in payload:
            _drop_exemplars(value, depth + 1)


# --- replies -----------------------------------------------------------------------------


def _encode(message, media: str) -> bytes:
    if media == PROTOBUF:
        return message.SerializeToString()
    return json.dumps(json_format.MessageToDict(message)).encode()


def trace_response(decoded: Decoded, *, media: str) -> bytes:
    """ExportTraceServiceResponse; partialSuccess only when spans were refused (OTLP spec)."""
    response = ExportTraceServiceResponse()
    if decoded.rejected:
        response.partial_success.rejected_spans = decoded.rejected
        response.partial_success.error_message = decoded.error_message()
    return _encode(response, media)


def metrics_response(decoded: Decoded, *, media: str) -> bytes:
    response = ExportMetricsServiceResponse()
    if decoded.rejected:
        response.partial_success.rejected_data_points = decoded.rejected
        response.partial_success.error_message = decoded.error_message()
    return _encode(response, media)


# google.rpc.Code for the HTTP statuses OTLP/HTTP answers with.
GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 429: 8, 503: 14}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_body(http_status: int, message: str, *, media: str) -> bytes:
    """The google.rpc.Status OTLP/HTTP puts in a failure reply, in the request's encoding.

    Encoded by hand (two fields) so the product needs no googleapis-common-protos."""
    code = GRPC_CODES.get(http_status, 2)
    if media == PROTOBUF:
        text = message.encode()
        return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
    return json.dumps({"code": code, "message": message, "error": message}).encode()
