"""Analyse one task: load its steps, the baselines and the device telemetry around it, run
every detector, compute the critical path, latency budget and what-if, and replace the
task's findings and TaskAnalysis in one transaction (never duplicated, never partial).

Total wasted time de-duplication: every finding says which part of the task's timeline its
waste occupies (`Finding.intervals`); TaskAnalysis.wasted_ms is the measure of the union of
those intervals clipped to the task, so a repeated call that is also part of a serialised
group is counted once. A slow_step on an LLM turn that a context_growth finding already
explains (verdict prefill_bound) is dropped for the same reason.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from analysis.engine import learned, serving
from analysis.engine import whatif as whatif_module
from analysis.engine.baselines import DEVICE, baselines_ensure
from analysis.engine.budget import latency_budget
from analysis.engine.critical_path import critical_path, path_step_ids
from analysis.engine.detectors.base import (
    BaselineStats,
    DeviceNormal,
    Finding,
    MetricNormal,
    Sample,
    StepData,
    TaskContext,
    all_detectors,
    union_length,
)
from analysis.engine.verdicts import step_verdicts
from analysis.models import Baseline, TaskAnalysis
from analysis.models import Finding as FindingRow
from ingest.models import ResourceSample, Step, Task

log = logging.getLogger("agentops.analysis")

_STEP_FIELDS = ("step_id", "kind", "name", "started_at", "ended_at", "parent_step_id", "status", "depends_on",
                "model", "device", "input_tokens", "output_tokens", "ttft_ms", "tool_name", "tool_args", "tool_result",
                "tool_call_id", "tool_call_ids", "attributes__agentops.serving")
_SAMPLE_METRICS = ("queue_depth", "utilization", "temperature_c", "tokens_per_s", "power_w", "throttled",
                   "batch_size", "kv_cache_usage", "preemptions", "sm_clock_mhz", "sm_clock_max_mhz", "clock_reasons")
# Telemetry loaded around the task: enough to cover one sampling period either side.
SAMPLE_MARGIN = timedelta(seconds=60)


class ClaimLost(Exception):
    """Another worker owns the task now (our claim expired); our results are discarded."""


def _ms(dt) -> float:
    return dt.timestamp() * 1000.0


def load_steps(task: Task) -> list[StepData]:
    rows = Step.objects.filter(task=task).values_list(*_STEP_FIELDS)
    return [StepData(step_id=r[0], kind=r[1], name=r[2], start_ms=_ms(r[3]), end_ms=_ms(r[4]),
                     parent_step_id=r[5], status=r[6], depends_on=tuple(r[7] or ()), model=r[8], device=r[9],
                     input_tokens=r[10], output_tokens=r[11], ttft_ms=r[12], tool_name=r[13], tool_args=r[14],
                     tool_result=r[15], tool_call_id=r[16], tool_call_ids=tuple(r[17] or ()), serving=r[18])
            for r in rows]


def load_context(task: Task, steps: list[StepData]) -> TaskContext:
    keys, devices = baseline_keys(steps)
    related = serving.related_devices(task.project_id, devices)
    devices = serving.expand(devices, related)
    rows = _baselines(task.project_id, keys, devices)
    found = {(b.kind, b.key) for b in rows}
    if any(k not in found for k in keys) or any((DEVICE, d) not in found for d in devices):
        baselines_ensure(project=task.project, keys=keys, devices=devices)
        rows = _baselines(task.project_id, keys, devices)
    normals, stats = {}, {}
    for b in rows:
        entry = baseline_entry(b.kind, b.key, b.device, b.count, b.median_ms, b.mad_ms, b.p90_ms, b.p99_ms, b.stats)
        if entry is None:
            continue
        if b.kind == DEVICE:
            normals[b.key] = entry
        elif (b.kind, b.key) in keys:
            stats[(b.kind, b.key, b.device)] = entry
    samples = {}
    window = sample_window(steps)
    if window is not None:
        lo, hi = window
        per_device = defaultdict(list)
        for row in (ResourceSample.objects.filter(project_id=task.project_id, device__in=devices, ts__gte=lo, ts__lte=hi)
                    .order_by("ts").values_list("device", "ts", *_SAMPLE_METRICS)):
            per_device[row[0]].append(sample_of(_ms(row[1]), row[2:]))
        samples = dict(per_device)
    return context_build(task_id=task.task_id, started_at=task.started_at, ended_at=task.ended_at, steps=steps,
                         baselines=stats, device_normals=normals, samples=samples,
                         profile=learned.profile_for(task.project_id, task.name, task.release), related=related)


def baseline_keys(steps: list[StepData]) -> tuple[set[tuple[str, str]], set[str]]:
    """The (kind, key) baselines and the devices whose normals a task's analysis needs."""
    return {(s.kind, s.key) for s in steps if s.kind != "agent"}, {s.device for s in steps if s.device}


def sample_window(steps: list[StepData]) -> tuple[datetime, datetime] | None:
    """The telemetry read around a task: its device steps' span plus SAMPLE_MARGIN each side."""
    device_steps = [s for s in steps if s.device]
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
        line_log_mad=st.get("line_log_mad"))


def context_build(*, task_id: str, started_at, ended_at, steps: list[StepData], baselines: dict,
                  device_normals: dict, samples: dict, profile=None, related=None) -> TaskContext:
    """The TaskContext the detectors read (the same for one task and for a batch)."""
    start = _ms(started_at) if started_at else min((s.start_ms for s in steps), default=0.0)
    end = _ms(ended_at) if ended_at else max((s.end_ms for s in steps), default=start)
    return TaskContext(task_id=task_id, start_ms=start, end_ms=max(end, start), steps=steps, baselines=baselines,
                       device_normals=device_normals, samples=samples, profile=profile, related=related or {})


def _baselines(project_id: int, keys: set[tuple[str, str]], devices: set[str]) -> list[Baseline]:
    if not keys and not devices:
        return []
    return list(Baseline.objects.filter(project_id=project_id, kind__in={k for k, _ in keys} | {DEVICE},
                                        key__in={n for _, n in keys} | devices))


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
    segments = critical_path(ctx.steps, ctx.start_ms, ctx.end_ms)
    queue_wait = {sid: v["ttft_split"]["queue_wait_ms"] for sid, v in ctx.verdicts.items() if "ttft_split" in v}
    return {
        "findings": findings,
        "critical_path": path_step_ids(segments),
        "budget": latency_budget(segments, queue_wait_ms=queue_wait),
        # A possible (low-confidence) waste is no saving to promise.
        "whatif": whatif_module.projections(ctx, segments, counted(findings)),
        "wasted_ms": total_wasted(ctx, findings),
    }


def analyse_task(task_pk: int, *, claim_token: str = "") -> dict | None:
    """Analyse one task and store the results. With a `claim_token`, the results are only
    written while this worker still holds the claim (checked under a row lock)."""
    started = time.monotonic()
    task = Task.objects.select_related("project").filter(pk=task_pk).first()
    if task is None:
        return None
    seen_through = task.last_event_at
    steps = load_steps(task)
    ctx = load_context(task, steps)
    result = analyse(ctx)
    _store(task, result, seen_through=seen_through, claim_token=claim_token)
    log.debug("analysis.task_done task=%s steps=%d findings=%d seconds=%.3f", task.pk, len(steps),
             len(result["findings"]), time.monotonic() - started)
    return result


def _store(task: Task, result: dict, *, seen_through, claim_token: str) -> None:
    findings: list[Finding] = result["findings"]
    totals: dict[str, float] = defaultdict(float)
    for f in counted(findings):
        totals[f.kind] += f.wasted_ms
    values = {
        "project_id": task.project_id, "analyzed_at": timezone.now(), "analyzed_through": seen_through,
        "critical_path": result["critical_path"], "budget": result["budget"], "whatif": result["whatif"],
        "wasted_ms": round(result["wasted_ms"], 3),
        "top_finding": max(totals, key=totals.get) if totals else "",
        "finding_kinds": sorted(totals), "claimed_until": None, "claim_token": "",
    }
    with transaction.atomic():
        # The UPDATE locks the row until commit: the claim check and the writes are atomic.
        mine = TaskAnalysis.objects.filter(task=task, **({"claim_token": claim_token} if claim_token else {}))
        if not mine.update(**values):
            if claim_token:
                raise ClaimLost(f"task {task.pk}: claim lost")
            TaskAnalysis.objects.create(task=task, **values)
        FindingRow.objects.filter(task=task).delete()
        FindingRow.objects.bulk_create([
            FindingRow(project_id=task.project_id, task=task, kind=f.kind, step_ids=list(f.step_ids),
                       wasted_ms=round(f.wasted_ms, 3), severity=f.severity, summary=f.summary,
                       evidence=f.evidence, confidence=f.confidence, confidence_reason=f.confidence_reason,
                       task_started_at=task.started_at, release=task.release)
            for f in findings])
