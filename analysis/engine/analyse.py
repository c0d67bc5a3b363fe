"""What is derived from one task, as plain data: from its context (steps, baselines, device
telemetry, what was learned of its agent) run every detector, compute the critical path, latency
budget and what-if; and the pure pieces a context is built from. Loading contexts and storing
results is analysis/engine/batch.py's (one path for one task or hundreds).

Total wasted time de-duplication: every finding says which part of the task's timeline its
waste occupies (`Finding.intervals`); TaskAnalysis.wasted_ms is the measure of the union of
those intervals clipped to the task, so a repeated call that is also part of a serialised
group is counted once. A slow_step on an LLM turn that a context_growth finding already
explains (verdict prefill_bound) is dropped for the same reason.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from analysis.engine import whatif as whatif_module
from analysis.engine.baselines import DEVICE
from analysis.engine.budget import latency_budget
from analysis.engine.critical_path import critical_path, path_step_ids
from analysis.engine.detectors.base import (
    BaselineStats,
    DeviceNormal,
    Finding,
    GroupStats,
    MetricNormal,
    Sample,
    StepData,
    TaskContext,
    Transport,
    all_detectors,
    canonical_args,
    union_length,
)
from analysis.engine.verdicts import step_verdicts

log = logging.getLogger("agentops.analysis")

_SAMPLE_METRICS = ("queue_depth", "utilization", "temperature_c", "tokens_per_s", "power_w", "throttled",
                   "batch_size", "kv_cache_usage", "preemptions", "sm_clock_mhz", "sm_clock_max_mhz", "clock_reasons",
                   "queue_time_s", "queue_time_requests")
# Telemetry loaded around the task: enough to cover one sampling period either side.
SAMPLE_MARGIN = timedelta(seconds=60)


def _ms(dt) -> float:
    return dt.timestamp() * 1000.0


def baseline_keys(steps: list[StepData], reached: dict[str, Transport]) -> tuple[set[tuple[str, str]], set[str]]:
    """The (kind, key) baselines and the devices whose normals a task's analysis needs: the steps'
    own (a call's GPU and the server it names), and the servers that model calls naming none reached (`reached`: the task's `transports`)."""
    devices = ({s.device for s in steps if s.device} | {s.server for s in steps if s.server}
               | {t.device for t in reached.values() if t.device})
    return {(s.kind, s.key) for s in steps if s.kind != "agent"}, devices


def sample_window(steps: list[StepData], reached: dict[str, Transport]) -> tuple[datetime, datetime] | None:
    """The telemetry read around a task: its device steps' span plus SAMPLE_MARGIN each side
    (a model call naming no device counts by the server it reached: `reached`, its `transports`)."""
    device_steps = [s for s in steps if s.device or s.server or (s.step_id in reached and reached[s.step_id].device)]
    if not device_steps:
        return None
    first = min(s.start_ms for s in device_steps)
    last = max(s.end_ms for s in device_steps)
    return (datetime.fromtimestamp(first / 1000, tz=UTC) - SAMPLE_MARGIN,
            datetime.fromtimestamp(last / 1000, tz=UTC) + SAMPLE_MARGIN)


def sample_of(ts_ms: float, values) -> Sample:
    """A Sample from the _SAMPLE_METRICS values of one row (None: not reported)."""
    return Sample(ts_ms, {m: v for m, v in zip(_SAMPLE_METRICS, values, strict=True) if v is not None})


def baseline_entry(kind, key, device, count, median_ms, mad_ms, p90_ms, p99_ms, stats):
    """A Baseline row as the detectors see it: a DeviceNormal for kind "device", BaselineStats
    for a step key with a median, else None (a placeholder with no usable history)."""
    if kind == DEVICE:
        metrics = {m: MetricNormal(v["median"], v["mad"] or 0.0)
                   for m, v in ((stats or {}).get("metrics") or {}).items() if v.get("median") is not None}
        return DeviceNormal(metrics, (stats or {}).get("interval_ms") or 1000.0, count)
    if median_ms is None:
        return None
    st = stats or {}
    return BaselineStats(
        count=count, median_ms=median_ms, mad_ms=mad_ms or 0.0, p90_ms=p90_ms, p99_ms=p99_ms,
        ttft_median=st.get("ttft_median"), ttft_mad=st.get("ttft_mad"), tpot_median=st.get("tpot_median"),
        tpot_mad=st.get("tpot_mad"), input_median=st.get("input_median"), input_mad=st.get("input_mad"),
        log_mad=st.get("log_mad"), ttft_log_mad=st.get("ttft_log_mad"), tpot_log_mad=st.get("tpot_log_mad"),
        input_log_mad=st.get("input_log_mad"), line_a=st.get("line_a"), line_b=st.get("line_b"),
        line_log_mad=st.get("line_log_mad"), prefill_a=st.get("prefill_a"), prefill_b=st.get("prefill_b"),
        prefill_log_mad=st.get("prefill_log_mad"),
        args=_groups(st.get("args"), canonical_args), releases=_groups(st.get("releases"), str))


def _groups(stored: list[dict] | None, name) -> dict[str, GroupStats] | None:
    """A baseline's argument or release groups (baselines._heavier), by `name` of their value;
    a group in another shape (written by another version, until the next refresh) is skipped."""
    groups = {name(g["value"]): GroupStats(g["runs"], g["median"], g["log_mad"] or 0.0)
              for g in stored or () if isinstance(g, dict) and "value" in g and g.get("median") is not None}
    return groups or None


def context_build(*, task_id: str, started_at, ended_at, steps: list[StepData], baselines: dict,
                  device_normals: dict, samples: dict, profile=None, related=None, families=None,
                  reached: dict[str, Transport] | None = None, release: str = "") -> TaskContext:
    """The TaskContext the detectors read (`reached`: the steps' `transports`, when known)."""
    start = _ms(started_at) if started_at else min((s.start_ms for s in steps), default=0.0)
    end = _ms(ended_at) if ended_at else max((s.end_ms for s in steps), default=start)
    return TaskContext(task_id=task_id, start_ms=start, end_ms=max(end, start), steps=steps, baselines=baselines,
                       device_normals=device_normals, samples=samples, profile=profile, related=related or {},
                       families=families or {}, _transports=reached, release=release)


def run_detectors(ctx: TaskContext) -> list[Finding]:
    ctx.verdicts = step_verdicts(ctx)
    findings: list[Finding] = []
    for kind, detect in all_detectors().items():
        try:
            findings.extend(detect(ctx))
        except Exception:
            log.exception("analysis.detector_failed kind=%s task=%s", kind, ctx.task_id)
    explained = {sid for f in findings if f.kind == "context_growth" for sid in f.step_ids}
    findings = [f for f in findings if not (
        f.kind == "slow_step" and f.step_ids[0] in explained and f.evidence.get("verdict") == "prefill_bound")]
    return [f.with_severity(ctx.duration_ms) for f in findings if f.wasted_ms > 0]


def counted(findings: list[Finding]) -> list[Finding]:
    """The findings that count in wasted-time totals: all but the low-confidence ones."""
    return [f for f in findings if f.counts]


def total_wasted(ctx: TaskContext, findings: list[Finding]) -> float:
    clipped = [(max(a, ctx.start_ms), min(b, ctx.end_ms)) for f in counted(findings) for a, b in f.intervals]
    return union_length(clipped)


def analyse(ctx: TaskContext) -> dict:
    """Everything derived from one task, as plain data (no database)."""
    findings = run_detectors(ctx)
    # The spans of a model call's own request (its HTTP client span, the server's span) are the
    # call: on the path it is the call, with its time as model time.
    segments = critical_path([s for s in ctx.steps if not ctx.is_transport(s)], ctx.start_ms, ctx.end_ms)
    queue_wait = {sid: v["ttft_split"]["queue_wait_ms"] for sid, v in ctx.verdicts.items() if "ttft_split" in v}
    return {
        "findings": findings,
        "critical_path": path_step_ids(segments),
        "budget": latency_budget(segments, queue_wait_ms=queue_wait),
        # A possible (low-confidence) waste is no saving to promise.
        "whatif": whatif_module.projections(ctx, segments, counted(findings)),
        "wasted_ms": total_wasted(ctx, findings),
    }
