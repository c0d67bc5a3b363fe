"""Native ingest events (`POST /api/v1/ingest`) parsed into records, one event at a time.

Every problem raises RecordError with a message that names the field, so the view can reject
that event alone and keep the rest of the batch. No Django import.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from ingest import limits
from ingest.records import (
    STATUSES,
    STEP_KINDS,
    RecordError,
    SampleRecord,
    StepRecord,
    TaskRecord,
    check_reading,
    check_span,
    check_time,
    clean_attributes,
    clean_json,
    clean_text,
    tool_result_text,
)


def parse_time(value: object, *, path: str) -> datetime:
    """RFC 3339 string or integer Unix nanoseconds → aware UTC datetime."""
    if isinstance(value, bool):
        raise RecordError(f"{path}: must be an RFC 3339 string or integer Unix nanoseconds")
    if isinstance(value, int):
        try:
            parsed = datetime.fromtimestamp(value / 1e9, tz=UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise RecordError(f"{path}: {value} is not a valid Unix time in nanoseconds") from exc
        return check_time(parsed, path=path)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError as exc:
            raise RecordError(f"{path}: {clean_text(value, limit=40)!r} is not an RFC 3339 timestamp") from exc
        if parsed.tzinfo is None:
            raise RecordError(f"{path}: timestamp needs a time zone offset (e.g. Z)")
        return check_time(parsed.astimezone(UTC), path=path)
    raise RecordError(f"{path}: must be an RFC 3339 string or integer Unix nanoseconds")


def _string(event: dict, key: str, *, required: bool = False, limit: int = limits.MAX_NAME_LENGTH) -> str:
    value = event.get(key)
    if value is None or value == "":
        if required:
            raise RecordError(f"{key}: is required")
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise RecordError(f"{key}: must be a string")
    value = clean_text(value, limit=10**9)
    if len(value) > limit:
        raise RecordError(f"{key}: longer than {limit} characters")
    return value


def _id(event: dict, key: str, *, required: bool = True) -> str:
    return _string(event, key, required=required, limit=limits.MAX_ID_LENGTH)


def _choice(event: dict, key: str, choices: tuple[str, ...], default: str) -> str:
    value = event.get(key)
    if value is None or value == "":
        return default
    if value not in choices:
        raise RecordError(f"{key}: {clean_text(str(value), limit=40)!r} is not one of {', '.join(choices)}")
    return value


def _count(event: dict, key: str) -> int | None:
    value = event.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value):  # JSON allows Infinity, which int() cannot take
        raise RecordError(f"{key}: must be a whole number")
    if not 0 <= value < 2**31:
        raise RecordError(f"{key}: must be between 0 and 2147483647")
    return int(value)


def _number(event: dict, key: str, *, minimum: float = 0.0) -> float | None:
    value = event.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordError(f"{key}: must be a number")
    if value < minimum or value > 1e12:
        raise RecordError(f"{key}: must be between {minimum:g} and 1e12")
    return float(value)


def parse_task(event: dict) -> TaskRecord:
    started_at = parse_time(event["started_at"], path="started_at") if event.get("started_at") is not None else None
    ended_at = parse_time(event["ended_at"], path="ended_at") if event.get("ended_at") is not None else None
    if started_at and ended_at:
        check_span(started_at, ended_at, what="task")
    name = _string(event, "name")
    return TaskRecord(
        task_id=_id(event, "task_id"),
        name=name,
        name_given=bool(name),
        release=_string(event, "release"),
        environment=_string(event, "environment", limit=100),
        session_id=_string(event, "session_id"),
        started_at=started_at,
        ended_at=ended_at,
        status=_choice(event, "status", STATUSES, ""),
        attributes=clean_attributes(event.get("attributes")),
    )


def parse_step(event: dict) -> StepRecord:
    for key in ("started_at", "ended_at"):
        if event.get(key) is None:
            raise RecordError(f"{key}: is required")
    started_at = parse_time(event["started_at"], path="started_at")
    ended_at = parse_time(event["ended_at"], path="ended_at")
    check_span(started_at, ended_at, what="step")
    depends_on = event.get("depends_on") or []
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        raise RecordError("depends_on: must be a list of step ids (strings)")
    if len(depends_on) > limits.MAX_DEPENDS_ON:
        raise RecordError(f"depends_on: more than {limits.MAX_DEPENDS_ON} step ids")
    streamed = event.get("streamed")
    if streamed is not None and not isinstance(streamed, bool):
        raise RecordError("streamed: must be true or false")
    tool_args = event.get("tool_args")
    if tool_args is not None and not isinstance(tool_args, dict | list | str):
        raise RecordError("tool_args: must be an object")
    error = event.get("error") or ""
    if not isinstance(error, str):
        error = str(error)
    tool_call_ids = event.get("tool_call_ids") or []
    if not isinstance(tool_call_ids, list) or not all(isinstance(c, str) for c in tool_call_ids):
        raise RecordError("tool_call_ids: must be a list of tool-call ids (strings)")
    if len(tool_call_ids) > limits.MAX_TOOL_CALL_IDS:
        raise RecordError(f"tool_call_ids: more than {limits.MAX_TOOL_CALL_IDS} ids")
    return StepRecord(
        step_id=_id(event, "step_id"),
        task_id=_id(event, "task_id"),
        parent_step_id=_id(event, "parent_step_id", required=False),
        kind=_choice(event, "kind", STEP_KINDS, "other"),
        name=_string(event, "name"),
        started_at=started_at,
        ended_at=ended_at,
        status=_choice(event, "status", STATUSES, "ok"),
        error=clean_text(error, limit=limits.MAX_ERROR_CHARS),
        depends_on=[clean_text(d, limit=limits.MAX_ID_LENGTH) for d in depends_on],
        attributes=clean_attributes(event.get("attributes")),
        model=_string(event, "model"),
        device=_string(event, "device"),
        input_tokens=_count(event, "input_tokens"),
        output_tokens=_count(event, "output_tokens"),
        cached_tokens=_count(event, "cached_tokens"),
        ttft_ms=_number(event, "ttft_ms"),
        streamed=streamed,
        tool_name=_string(event, "tool_name"),
        tool_args=clean_json(tool_args, path="tool_args") if tool_args is not None else None,
        tool_result=tool_result_text(event.get("tool_result")),
        tool_call_id=_id(event, "tool_call_id", required=False),
        tool_call_ids=[clean_text(c, limit=limits.MAX_ID_LENGTH) for c in tool_call_ids],
    )


def parse_sample(event: dict) -> SampleRecord:
    metrics = event.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise RecordError("metrics: must be a non-empty object of numbers")
    clean_metrics = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            value = float(value)
        name = clean_text(str(key), limit=limits.MAX_NAME_LENGTH)
        # The same bounds as OTLP's data points (records.check_reading): the event is refused alone.
        clean_metrics[name] = check_reading(name, value, path=f"metrics.{clean_text(str(key), limit=60)}")
    return SampleRecord(
        device=_string(event, "device", required=True),
        vendor=_string(event, "vendor", limit=50).lower(),
        hardware=_string(event, "hardware", limit=100),
        ts=parse_time(event.get("ts"), path="ts"),
        metrics=clean_metrics,
    )


PARSERS = {"task": parse_task, "step": parse_step, "resource": parse_sample}


def parse_event(event: object) -> TaskRecord | StepRecord | SampleRecord:
    if not isinstance(event, dict):
        raise RecordError("event: must be an object")
    kind = event.get("type")
    parser = PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise RecordError(f"type: must be one of {', '.join(PARSERS)}")
    try:
        return parser(event)
    except RecursionError as exc:
        raise RecordError(f"{kind}: nested too deeply") from exc
