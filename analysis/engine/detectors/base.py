"""The detector interface: plain data in (`TaskContext`), frozen `Finding`s out, and a registry.

A detector is a pure function of one task's steps, the project's baselines and the device
telemetry around the task; it never touches the database, so it is tested with hand-built
tasks and runs the same in Celery, in `manage.py analyze` and in tests. Adding a kind means
adding one module that calls `register`.

Times are float milliseconds since the Unix epoch: interval arithmetic stays exact enough
(µs) and cheap for 50,000-step tasks.

Shared statistics, used the same way by every detector so thresholds mean one thing:
- modified z-score (Iglewicz & Hoaglin, 1993): z = 0.6745·(x − median) / MAD. The constant
  makes MAD comparable to a standard deviation under normality; |z| > 3.5 is their
  recommended outlier cut-off (`Z_OUTLIER`, used for device telemetry and prompt sizes);
  slowness, which screens every step, uses z > 4 (`Z_SLOW`, see below).
- Durations, TTFT, time per token and prompt sizes are compared on a log scale (`log_z`):
  latencies are right-skewed (roughly log-normal), so a symmetric z on raw milliseconds
  flags the natural long tail of every busy tool. On the log scale z > 4 means "more than
  4 typical spreads *slower by a factor*", and the false-alarm rate per step stays near the
  one-sided normal tail (3e-5).
- MAD is floored (`mad_floor`, `LOG_MAD_FLOOR`): a perfectly steady metric has MAD 0, and then
  any wobble would be an "outlier". The floor is the larger of a measurement resolution and
  5 % of the median, i.e. we never call a 5 % deviation anomalous.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache

from analysis.measures import baseline_key, prefill_tokens
from analysis.models import CONFIDENCE_HIGH, CONFIDENCE_LOW, CONFIDENCE_MEDIUM  # noqa: F401  (the detectors take them from here)

Z_OUTLIER = 3.5
# Slowness screens *every* step (and two components of each LLM step), thousands a day:
# Iglewicz & Hoaglin's 3.5 is for flagging points in one sample, and at that rate would
# raise a false slow_step every few thousand steps. z > 4 (one-sided normal tail ≈ 3e-5)
# keeps it under one per ten thousand steps screened, even with the heavier-than-log-normal
# tails real latencies have.
Z_SLOW = 4.0
MAD_TO_SIGMA = 0.6745
# Fewer samples than this and median/MAD are too unstable to call anything an outlier: a
# cold start (new tool, new model) produces no slow_step findings until it has history.
MIN_BASELINE_COUNT = 20


def mad_floor(mad: float | None, median: float | None, resolution: float) -> float:
    return max(mad or 0.0, abs(median or 0.0) * 0.05, resolution)


def robust_z(value: float, median: float, mad: float, *, resolution: float = 1.0) -> float:
    return MAD_TO_SIGMA * (value - median) / mad_floor(mad, median, resolution)


LOG_MAD_FLOOR = math.log(1.05)


def log_z(value: float, median: float, log_mad: float | None) -> float:
    """Modified z of ln(value) against ln(median) and the MAD of the logs."""
    return MAD_TO_SIGMA * (math.log(max(value, 1e-3)) - math.log(max(median, 1e-3))) / max(
        log_mad or 0.0, LOG_MAD_FLOOR)


@dataclass(frozen=True, slots=True)
class StepData:
    """One step as the detectors see it (times in epoch ms)."""

    step_id: str
    kind: str
    name: str
    start_ms: float
    end_ms: float
    parent_step_id: str = ""
    status: str = "ok"
    depends_on: tuple[str, ...] = ()
    model: str = ""
    device: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None  # of the input tokens, those read from the prompt cache
    ttft_ms: float | None = None
    tool_name: str = ""
    tool_args: object = None
    tool_result: str = ""
    tool_call_id: str = ""
    tool_call_ids: tuple[str, ...] = ()
    # An inference server's request span (vLLM `llm_request`): its timings in ms (queue_ms,
    # ttft_ms, prefill_ms, decode_ms, inference_ms, e2e_ms), read as its parent call's.
    serving: dict | None = None
    # An HTTP client span's server: `server.address[:server.port]`, else the host[:port] of its
    # URL (lower case; "" for other steps). Under an LLM call it names the server that answered.
    peer: str = ""
    # An LLM call's server as the call's own span names it (`server.address[:server.port]`, the
    # port as a number; "" for other steps), also when the span names its GPU (`hw.id`) as its
    # device: the server's own series describe the call too.
    server: str = ""

    @property
    def duration_ms(self) -> float:
        return max(0.0, self.end_ms - self.start_ms)

    @property
    def prefill_tokens(self) -> int | None:
        """The prompt tokens its server had to prefill (measures.prefill_tokens)."""
        return prefill_tokens(input_tokens=self.input_tokens, cached_tokens=self.cached_tokens)

    @property
    def key(self) -> str:
        """The baseline key: model for LLM steps, tool name for tools, else the name."""
        return baseline_key(self)

    @property
    def label(self) -> str:
        return self.tool_name or self.name or self.model or self.kind


def fitting_line(a: float | None, b: float | None, line_log_mad: float | None,
                 flat_log_mad: float) -> tuple[float, float] | None:
    """(a, b) of a baseline's line where it fits the key's calls at least as well as their median
    does (the MAD of its log residuals no wider than the MAD of their logs about the median),
    else None. Its thirds
    are taken over the range of x, so a handful of huge prompts (a context grown to 60k tokens,
    prefilled at another rate) can make the upper third alone: the slope is theirs, the
    intercept negative, and a usual prompt's start read from the line is a few ms (simulated
    seed 112358: seven false slow steps). Learned from the key's own calls, no constant."""
    if a is None or b is None or line_log_mad is None or line_log_mad > flat_log_mad:
        return None
    return a, b


@dataclass(frozen=True, slots=True)
class GroupStats:
    """A key's calls with the same arguments, or of the same release: in how many runs, their
    median and the MAD of their logs."""

    runs: int
    median_ms: float
    log_mad: float


@dataclass(frozen=True, slots=True)
class BaselineStats:
    count: int
    median_ms: float
    mad_ms: float
    p90_ms: float | None = None
    p99_ms: float | None = None
    # LLM only: TTFT, time per output token and input-token statistics.
    ttft_median: float | None = None
    ttft_mad: float | None = None
    tpot_median: float | None = None
    tpot_mad: float | None = None
    input_median: float | None = None
    input_mad: float | None = None
    # MADs of the logs (see log_z); absent in hand-built stats, then MAD/median (delta method).
    log_mad: float | None = None
    ttft_log_mad: float | None = None
    tpot_log_mad: float | None = None
    input_log_mad: float | None = None
    # LLM steps without TTFT: duration ≈ line_a + line_b × output tokens (a resistant line).
    line_a: float | None = None
    line_b: float | None = None
    line_log_mad: float | None = None
    # LLM steps with TTFT: TTFT ≈ prefill_a + prefill_b × prefill tokens (a resistant line: prefill
    # follows the uncached prompt, measures.prefill_tokens), with the MAD of the log residuals.
    prefill_a: float | None = None
    prefill_b: float | None = None
    prefill_log_mad: float | None = None
    # Steps other than LLM calls: the arguments (canonical_args) and the releases whose calls
    # recur in several runs and usually take longer than the key's (baselines.ARG_MIN_RUNS;
    # slow_step judges such a call by them).
    args: dict[str, GroupStats] | None = None
    releases: dict[str, GroupStats] | None = None

    def prefill_line(self) -> tuple[float, float] | None:
        """(a, b) of the prefill line where it fits the key's starts (fitting_line)."""
        return fitting_line(self.prefill_a, self.prefill_b, self.prefill_log_mad, self.spread("ttft"))

    def duration_line(self) -> tuple[float, float] | None:
        """(a, b) of the line of duration over output tokens where it fits the key's durations
        (fitting_line)."""
        return fitting_line(self.line_a, self.line_b, self.line_log_mad, self.spread("duration"))

    def expected_ttft(self, prefill: int | None) -> float | None:
        """What a call's TTFT usually is for its prompt: the prefill line at its prefill tokens
        (measures.prefill_tokens), else (no line that fits, no token count) the median TTFT. A
        start is judged with the spread of the key's starts, not the line's residuals: those
        are not all a start's ordinary variation (load, batching and the cache's state move it
        too), and judged by them a start 1.5x its line was an outlier on every simulated seed
        that had no incident there (slow_step precision 0.91-0.97)."""
        line = self.prefill_line()
        if prefill is not None and line is not None:
            return max(line[0] + line[1] * prefill, 1.0)
        return self.ttft_median

    def spread(self, name: str) -> float:
        """The log-scale MAD of `duration`, `ttft`, `tpot` or `input`."""
        value = getattr(self, "log_mad" if name == "duration" else f"{name}_log_mad")
        if value is not None:
            return value
        median, mad = ((self.median_ms, self.mad_ms) if name == "duration"
                       else (getattr(self, f"{name}_median"), getattr(self, f"{name}_mad")))
        return (mad or 0.0) / median if median else 0.0


@dataclass(frozen=True, slots=True)
class MetricNormal:
    median: float
    mad: float


@dataclass(frozen=True, slots=True)
class DeviceNormal:
    """A device's own normal telemetry (median/MAD per metric) and its sampling interval."""

    metrics: dict[str, MetricNormal]
    interval_ms: float = 1000.0
    count: int = 0


@dataclass(frozen=True, slots=True)
class Sample:
    ts_ms: float
    metrics: dict[str, float]


# How many spans may sit between an LLM call and a span of its request (the HTTP client span an
# instrumented HTTP library adds, a proxy's, the server's own): more is no longer the same request.
TRANSPORT_DEPTH = 3


@dataclass(frozen=True)
class Transport:
    """What lies below an LLM call on its way to the server: the server's own span of the request
    (vLLM `llm_request`) and the server the call reached, as the HTTP client span dialed it (the
    key the server's metrics carry), else as the server's span names itself."""

    server_span: StepData | None
    device: str
    parts: tuple[str, ...]  # the step ids of those spans


def transports(steps: list[StepData]) -> dict[str, Transport]:
    """LLM step_id → its Transport, for the calls with request spans below them: chat → POST →
    llm_request (an instrumented HTTP client), chat → llm_request, never a span below another
    LLM call or deeper than TRANSPORT_DEPTH. Many instrumentations record no `server.address`
    on the model call (openai-v2 on the openai 3 client), while the HTTP client span always
    names the URL it dialed."""
    by_id = {s.step_id: s for s in steps}
    below: dict[str, list[tuple[int, StepData]]] = {}
    for s in steps:
        if s.kind != "other" or not (s.serving or s.peer):
            continue
        parent, depth = by_id.get(s.parent_step_id), 1
        while parent is not None and parent.kind != "llm" and depth < TRANSPORT_DEPTH:
            parent, depth = by_id.get(parent.parent_step_id), depth + 1
        if parent is not None and parent.kind == "llm":
            below.setdefault(parent.step_id, []).append((depth, s))
    out = {}
    for call, found in below.items():
        found.sort(key=lambda pair: pair[0])
        server = next((s for _, s in found if s.serving), None)
        device = next((s.peer for _, s in found if s.peer), "") or (server.device if server is not None else "")
        parts = {s.step_id for _, s in found}
        for _, s in found:  # the spans between the call and each of them are its request's too
            parent = by_id.get(s.parent_step_id)
            while parent is not None and parent.step_id != call:
                parts.add(parent.step_id)
                parent = by_id.get(parent.parent_step_id)
        out[call] = Transport(server, device, tuple(sorted(parts)))
    return out


@dataclass
class TaskContext:
    task_id: str
    start_ms: float
    end_ms: float
    steps: list[StepData]
    # (kind, key, device) → stats; device "" is the all-devices baseline.
    baselines: dict[tuple[str, str, str], BaselineStats] = field(default_factory=dict)
    device_normals: dict[str, DeviceNormal] = field(default_factory=dict)
    samples: dict[str, list[Sample]] = field(default_factory=dict)  # per device, by time
    # device → the other devices whose telemetry describes the calls it served: its server's GPUs
    # (same host), or a GPU's server (`analysis.engine.serving`); their samples and normals are
    # loaded with the step's own.
    related: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # device → its hardware family (`analysis.hardware`), from the vendor it reported; a device
    # missing here runs hardware nobody named (a hosted API, a server with no GPU telemetry).
    families: dict[str, str] = field(default_factory=dict)
    # What the agent's other runs say about its calls' values and pairs (dependencies.Profile;
    # None: nothing learned yet).
    profile: object = None
    release: str = ""
    # Filled by the engine before detectors run: step_id → hardware verdict dict.
    verdicts: dict[str, dict] = field(default_factory=dict)
    # canonical_args of the steps' arguments, computed once per task (see call_args).
    _call_args: dict[int, str] = field(default_factory=dict, repr=False, compare=False)
    # LLM step_id → what lies below it on the way to its server (`transports`), once per task:
    # given by the batch, which needs it before the context exists, else computed on first use.
    _transports: dict[str, Transport] | None = field(default=None, repr=False, compare=False)
    _parts: set[str] | None = field(default=None, repr=False, compare=False)

    @property
    def duration_ms(self) -> float:
        return max(0.0, self.end_ms - self.start_ms)

    def baseline(self, step: StepData) -> BaselineStats | None:
        """The most specific baseline with enough history: per device, then per key."""
        for device in ((step.device, "") if step.device else ("",)):
            stats = self.baselines.get((step.kind, step.key, device))
            if stats is not None and stats.count >= MIN_BASELINE_COUNT:
                return stats
        return None

    def family(self, step: StepData) -> str | None:
        """The hardware family that served the step: its device's, else that of the GPUs on its
        server's host (None: unknown)."""
        if not step.device:
            return None
        if step.device in self.families:
            return self.families[step.device]
        found = {self.families[d] for d in self.related.get(step.device, ()) if d in self.families}
        return found.pop() if len(found) == 1 else None

    def own_device_count(self, step: StepData) -> int | None:
        """How many runs of the step's key its own device's baseline holds, when `baseline(step)`
        fell back to the key across devices because that is too few (None when it did not: the
        step has no device, or its device's baseline was used)."""
        if not step.device:
            return None
        own = self.baselines.get((step.kind, step.key, step.device))
        count = own.count if own is not None else 0
        return None if count >= MIN_BASELINE_COUNT else count

    def transport(self, step: StepData) -> Transport | None:
        """What lies below an LLM call on its way to the server (`transports`), if anything."""
        return self._reached().get(step.step_id)

    def is_transport(self, step: StepData) -> bool:
        """A span of an LLM call's own request (its HTTP client span, the server's span): part of
        that call, judged through it."""
        if self._parts is None:
            self._parts = {sid for t in self._reached().values() for sid in t.parts}
        return step.step_id in self._parts

    def _reached(self) -> dict[str, Transport]:
        if self._transports is None:
            self._transports = transports(self.steps)
        return self._transports

    def call_args(self, step: StepData) -> str:
        """canonical_args(step.tool_args), once per step of the task: repeated_tool_call and
        parallelizable_calls both group calls by it."""
        key = id(step)  # the step lives in self.steps as long as this context does
        if key not in self._call_args:
            self._call_args[key] = canonical_args(step.tool_args)
        return self._call_args[key]


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    step_ids: tuple[str, ...]
    wasted_ms: float
    summary: str
    evidence: dict
    # The parts of the task's timeline (epoch ms) this waste occupies; the task's total
    # wasted time is the measure of the union of all findings' intervals (no double count).
    intervals: tuple[tuple[float, float], ...] = ()
    severity: str = ""
    # high | medium | low, and the one line it rests on. Low-confidence findings are shown but
    # count in no wasted-time total (docs/analysis.md, "Confidence").
    confidence: str = CONFIDENCE_HIGH
    confidence_reason: str = ""

    @property
    def counts(self) -> bool:
        """Whether it counts in wasted-time totals, top findings and alerts (not a low one)."""
        return self.confidence != CONFIDENCE_LOW

    def with_severity(self, task_duration_ms: float) -> Finding:
        from dataclasses import replace

        return replace(self, severity=severity_for(self.wasted_ms, task_duration_ms))


def severity_for(wasted_ms: float, task_duration_ms: float) -> str:
    """high: a fifth of the task or more than 2 s; medium: 5 % or 500 ms; else low. A user
    notices ~0.5 s; 2 s is where an interactive agent feels broken."""
    share = wasted_ms / task_duration_ms if task_duration_ms > 0 else 0.0
    if share >= 0.2 or wasted_ms >= 2000:
        return "high"
    if share >= 0.05 or wasted_ms >= 500:
        return "medium"
    return "low"


Detector = Callable[[TaskContext], Iterable[Finding]]
REGISTRY: dict[str, Detector] = {}


def register(kind: str) -> Callable[[Detector], Detector]:
    def decorate(fn: Detector) -> Detector:
        REGISTRY[kind] = fn
        return fn
    return decorate


# The detector modules, in the order they run. Adding a kind: add a module and its name here.
MODULES = ("slow_step", "hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure", "repeated_tool_call",
           "serial_gap", "parallelizable_calls", "context_growth")


@cache  # once per process: import_module on every task cost ~3 % of a batch's CPU
def _import_detectors() -> None:
    for module in MODULES:
        importlib.import_module(f"analysis.engine.detectors.{module}")


def all_detectors() -> dict[str, Detector]:
    _import_detectors()
    return dict(REGISTRY)


# --- confidence ----------------------------------------------------------------------------

# A baseline of 20 runs (MIN_BASELINE_COUNT) is enough to call an outlier at all; its median and
# MAD are still loose (the MAD's relative standard error is ~1/sqrt(n): ±22 % at 20, ±14 % at
# 50), so a finding judged against fewer than 50 runs is medium, not high.
CONFIDENT_BASELINE_COUNT = 50


def baseline_confidence(count: int, *, what: str = "runs") -> tuple[str, str]:
    """The confidence a comparison against `count` past observations supports, and why."""
    if count >= CONFIDENT_BASELINE_COUNT:
        return "high", f"Judged against a baseline of {count:,} {what}."
    return "medium", (f"Judged against only {count:,} {what} (fewer than {CONFIDENT_BASELINE_COUNT}): "
                      "the usual time is still uncertain.")


# --- small helpers shared by detectors -----------------------------------------------------


def canonical_args(args: object) -> str:
    """Arguments as canonical JSON: key order, JSON formatting and runs of whitespace inside
    strings do not matter; a JSON string holding an object is parsed first."""
    if isinstance(args, str):
        text = args.strip()
        if text[:1] in ("{", "["):
            try:
                args = json.loads(text)
            except ValueError:
                pass
    return json.dumps(_normalise(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalise(value: object) -> object:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {str(k).strip(): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by intervals (overlaps counted once)."""
    total = 0.0
    cur_start = cur_end = None
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if cur_end is None or a > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def children_of(steps: Iterable[StepData]) -> set[str]:
    """Ids of steps that have at least one child."""
    ids = {s.step_id for s in steps}
    return {s.parent_step_id for s in steps if s.parent_step_id in ids and s.parent_step_id != s.step_id}
