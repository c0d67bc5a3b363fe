"""Plain records every ingest path produces (native JSON, OTLP traces, OTLP metrics) and the
one write path stores. No Django import: decoders and tests build these directly.

Also the cleaning every string goes through before it reaches Postgres: NUL bytes removed,
lone surrogates replaced by U+FFFD, over-long values truncated with a visible marker.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ingest import limits

STEP_KINDS = ("llm", "tool", "retrieval", "agent", "framework", "queue", "other")
STATUSES = ("ok", "error", "timeout")
# The statuses of a task or step that failed: what every error count and error rate counts.
FAILED_STATUSES = ("error", "timeout")

# Timestamps outside this range are refused: 0 (the OTLP "unset") and typos that land in
# 1970 or the far future would otherwise wreck every time axis.
MIN_TIME = datetime(2000, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(2200, 1, 1, tzinfo=UTC)

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


class RecordError(ValueError):
    """A value that cannot be stored; the message names the field."""


@dataclass(slots=True)
class TaskRecord:
    task_id: str
    name: str = ""
    # The name was given (a task event's name, a root span's agent or workflow name) rather
    # than taken from a framework's generic root span; a name not given is derived again from
    # the task's steps as they arrive.
    name_given: bool = False
    release: str = ""
    environment: str = ""
    session_id: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    status: str = ""
    attributes: dict = field(default_factory=dict)


@dataclass(slots=True)
class StepRecord:
    step_id: str
    task_id: str
    started_at: datetime
    ended_at: datetime
    kind: str = "other"
    name: str = ""
    parent_step_id: str = ""
    status: str = "ok"
    error: str = ""
    depends_on: list[str] = field(default_factory=list)
    attributes: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
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
    # What the tool returned (text, truncated), the id of the call this tool step answered and,
    # on an LLM step, the ids of the calls its response requested: the evidence dependencies
    # are inferred from (docs/analysis.md, "Dependencies").
    tool_result: str = ""
    tool_call_id: str = ""
    tool_call_ids: list[str] = field(default_factory=list)
    # Task-level facts a step may carry (OTLP resource attributes): used only for a task
    # that has not been reported itself.
    release: str = ""
    environment: str = ""
    session_id: str = ""
    # The instrumentation that sent it (ingest/instrumentation.py `source_of`): service, scope name
    # and version, telemetry.sdk name, language and version; empty for the native API.
    source: tuple[str, ...] = ()
    # device → labels the span gives it: an inference server's span names its GPUs (`hw.id`), and
    # each is that server's (ingest.conventions.SERVED_BY_LABEL).
    device_labels: dict = field(default_factory=dict)


@dataclass(slots=True)
class SampleRecord:
    device: str
    ts: datetime
    vendor: str = ""
    hardware: str = ""
    metrics: dict = field(default_factory=dict)
    # Where the device sits: its host, and whether it is a GPU or an inference server
    # ("gpu" | "server" | "" unknown); a step finds its server's GPUs by host.
    host: str = ""
    role: str = ""
    # Whose the device is (ingest.conventions.device_labels).
    labels: dict = field(default_factory=dict)


@dataclass(slots=True)
class HistogramRecord:
    metric: str
    ts: datetime
    count: int
    model: str = ""
    device: str = ""
    start: datetime | None = None
    sum: float | None = None
    bounds: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    attributes: dict = field(default_factory=dict)


@dataclass(slots=True)
class Batch:
    tasks: list[TaskRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    samples: list[SampleRecord] = field(default_factory=list)
    histograms: list[HistogramRecord] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tasks) + len(self.steps) + len(self.samples) + len(self.histograms)

    def add(self, record: TaskRecord | StepRecord | SampleRecord | HistogramRecord) -> None:
        {TaskRecord: self.tasks, StepRecord: self.steps, SampleRecord: self.samples,
         HistogramRecord: self.histograms}[type(record)].append(record)


def clean_text(value: str, *, limit: int = limits.MAX_ATTRIBUTE_VALUE_CHARS) -> str:
    if _BAD_CHARS.search(value):
        value = _BAD_CHARS.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", value)
    if len(value) > limit:
        value = value[:limit] + limits.TRUNCATION_MARKER
    return value


def clean_json(value: object, *, path: str, depth: int = 0) -> object:
    """A JSON-able value made safe for jsonb; raises RecordError past the nesting limit."""
    if depth > limits.MAX_JSON_DEPTH:
        raise RecordError(f"{path}: nested deeper than {limits.MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {
            clean_text(str(k), limit=limits.MAX_NAME_LENGTH): clean_json(v, path=path, depth=depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [clean_json(v, path=path, depth=depth + 1) for v in value]
    return clean_text(str(value))


def clean_attributes(value: object, *, path: str = "attributes") -> dict:
    """Attributes: an object; past MAX_ATTRIBUTES keys the rest are dropped and counted."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(f"{path}: must be an object")
    dropped = 0
    if len(value) > limits.MAX_ATTRIBUTES:
        dropped = len(value) - limits.MAX_ATTRIBUTES
        value = dict(list(value.items())[: limits.MAX_ATTRIBUTES])
    cleaned = clean_json(value, path=path)
    if dropped:
        cleaned["agentops.dropped_attributes"] = dropped
    return cleaned


def tool_result_text(value: object) -> str:
    """A tool result as stored: text as it is, anything else as compact JSON; truncated."""
    if value is None:
        return ""
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (ValueError, RecursionError):
            value = str(value)
    return clean_text(value, limit=limits.MAX_TOOL_RESULT_CHARS)


def check_time(value: datetime, *, path: str) -> datetime:
    if not MIN_TIME <= value < MAX_TIME:
        raise RecordError(f"{path}: {value.isoformat()} is outside {MIN_TIME.year}..{MAX_TIME.year}")
    return value


def check_span(started_at: datetime, ended_at: datetime, *, what: str) -> None:
    if ended_at < started_at:
        raise RecordError(f"{what}: ended_at is before started_at (negative duration)")


# --- numbers at the border (docs/otlp.md, "Numeric ranges") ------------------------------------

CLOCK_REASONS = "clock_reasons"
# Device readings that cannot be below zero: utilisations, power, clocks, memory, queues, counters.
NON_NEGATIVE_READINGS = frozenset({
    "utilization", "queue_depth", "batch_size", "power_w", "mem_bw_util", "kv_cache_hit_rate", "tokens_per_s",
    "throttled", "sm_clock_mhz", "sm_clock_max_mhz", "kv_cache_usage", "preemptions", "fb_used_mib",
    "fb_total_mib", "power_limit_w", "queue_time_s", "queue_time_requests", "hw_status",
})
_REASONS_MASK = (1 << limits.CLOCK_REASONS_BITS) - 1


def check_reading(column: str, value: object, *, path: str) -> float:
    """A device reading of `column` as it is stored; RecordError naming `path` if out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{path}: must be a number")
    if column == CLOCK_REASONS:
        whole = isinstance(value, int) or (math.isfinite(value) and value == int(value))
        if not whole or not 0 <= value < 2**64:
            raise RecordError(f"{path}: {value:g} is not a 64-bit mask (a whole number 0 <= v < 2^64)")
        return float(int(value) & _REASONS_MASK)
    if not math.isfinite(value):
        raise RecordError(f"{path}: {value} is not a finite number")
    low = 0.0 if column in NON_NEGATIVE_READINGS else -limits.MAX_READING
    if not low <= value <= limits.MAX_READING:
        raise RecordError(f"{path}: {value:g} is outside {low:g}..{limits.MAX_READING:g}")
    return float(value)


def check_count(value: object, *, path: str) -> int:
    """A count as stored in a bigint column: a whole number 0..2^63-1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limits.INT64_MAX:
        raise RecordError(f"{path}: {value} is outside 0..2^63-1 (a count is a signed 64-bit integer)")
    return value


def check_finite(value: float, *, path: str) -> float:
    """A histogram's sum or bound: finite and within ±MAX_HISTOGRAM_VALUE."""
    if not math.isfinite(value):
        raise RecordError(f"{path}: {value} is not a finite number")
    if abs(value) > limits.MAX_HISTOGRAM_VALUE:
        raise RecordError(f"{path}: {value:g} is outside ±{limits.MAX_HISTOGRAM_VALUE:g}")
    return float(value)
