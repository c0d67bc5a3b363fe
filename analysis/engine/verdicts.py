"""Is it the chip? A hardware verdict for every slow LLM step: `throttling`, `queueing`,
`prefill_bound` or `nominal`, from the device's samples over the step's interval against that
device's own normal, and the step's TTFT split into queue wait and compute. The method (when a
step is slow, the cut-offs, each verdict's rule) is docs/analysis.md, "Hardware verdict"."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from analysis.engine.detectors.base import (
    Z_OUTLIER,
    Z_SLOW,
    BaselineStats,
    StepData,
    TaskContext,
    log_z,
    robust_z,
)
from analysis.measures import tpot_ms

MIN_EXCESS_MS = 100.0
# With device evidence the question is no longer "is this step worth a look on its own" but
# "which steps did this device incident slow down": every one counts towards the incident,
# so only timer and network jitter (~20 ms) is excluded; the 20 % relative floor still holds.
MIN_EXCESS_CORROBORATED_MS = 20.0
MIN_EXCESS_RATIO = 0.2
Z_CORROBORATED = 2.0
# Resolutions of device metrics, used as MAD floors: below these a difference is noise.
RESOLUTION = {"queue_depth": 1.0, "utilization": 0.02, "temperature_c": 1.0, "tokens_per_s": 1.0,
              "throttled": 0.5, "power_w": 5.0, "batch_size": 1.0, "mem_bw_util": 0.02}


def llm_slowness(step: StepData, stats: BaselineStats | None, *, z_cut: float = Z_SLOW) -> dict | None:
    """Expected duration, excess and z-scores for an LLM step; None when it is not slow or
    there is no baseline to compare with."""
    if stats is None:
        return None
    out = max((step.output_tokens or 0) - 1, 0)
    ttft_z = tpot_z = None
    if step.ttft_ms is not None and stats.ttft_median and stats.tpot_median:
        expected = stats.ttft_median + stats.tpot_median * out
        ttft_z = log_z(step.ttft_ms, stats.ttft_median, stats.spread("ttft"))
        tpot = tpot_ms(duration_ms=step.duration_ms, ttft_ms=step.ttft_ms, output_tokens=step.output_tokens)
        if tpot is not None:
            tpot_z = log_z(tpot, stats.tpot_median, stats.spread("tpot"))
        outlier = ttft_z > z_cut or (tpot_z is not None and tpot_z > z_cut)
    elif step.output_tokens is not None and stats.line_b is not None and stats.line_a is not None:
        # No TTFT: the duration against the resistant line over output tokens.
        expected = max(stats.line_a + stats.line_b * step.output_tokens, 1.0)
        outlier = log_z(step.duration_ms, expected, stats.line_log_mad) > z_cut
    else:
        expected = stats.median_ms
        outlier = log_z(step.duration_ms, stats.median_ms, stats.spread("duration")) > z_cut
    excess = step.duration_ms - expected
    floor = MIN_EXCESS_CORROBORATED_MS if z_cut < Z_SLOW else MIN_EXCESS_MS
    if not outlier or excess < max(floor, MIN_EXCESS_RATIO * expected):
        return None
    decode_slow = tpot_z is not None and tpot_z > z_cut and tpot_z >= (ttft_z or 0.0)
    return {"expected_ms": round(expected, 1), "excess_ms": round(excess, 1),
            "ttft_z": _r(ttft_z), "tpot_z": _r(tpot_z), "z_cut": z_cut,
            "slow_part": "decode" if decode_slow else "prefill" if ttft_z is not None else "whole"}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _window(samples, start: float, end: float, times: list[float] | None = None):
    if times is None:
        times = [s.ts_ms for s in samples]
    return samples[bisect_left(times, start): bisect_right(times, end)]


def device_signals(ctx: TaskContext, step: StepData, *, times: list[float] | None = None) -> dict:
    """Peak robust z of each metric over the step's interval against the device's normal.
    `times`: the samples' ts_ms of the step's device, when the caller has them already."""
    normal = ctx.device_normals.get(step.device)
    samples = ctx.samples.get(step.device, [])
    pad = (normal.interval_ms if normal else 1000.0) / 2
    window = _window(samples, step.start_ms - pad, step.end_ms + pad, times)
    if not window:
        return {"samples": 0}
    signals: dict = {"samples": len(window)}
    for metric in ("queue_depth", "utilization", "temperature_c", "tokens_per_s", "power_w", "throttled"):
        values = [s.metrics[metric] for s in window if s.metrics.get(metric) is not None]
        if not values:
            continue
        worst = min(values) if metric in ("tokens_per_s", "power_w") else max(values)
        entry = {"value": round(worst, 3)}
        ref = normal.metrics.get(metric) if normal else None
        if ref is not None:
            entry["normal"] = round(ref.median, 3)
            entry["z"] = round(robust_z(worst, ref.median, ref.mad, resolution=RESOLUTION[metric]), 2)
        signals[metric] = entry
    return signals


def _z(signals: dict, metric: str) -> float:
    return signals.get(metric, {}).get("z", 0.0)


def _hot(signals: dict) -> bool:
    return _z(signals, "temperature_c") > Z_OUTLIER


def device_anomaly(signals: dict) -> tuple[bool, bool]:
    """(throttled, queued) from the device signals over a step."""
    throttled = signals.get("throttled", {}).get("value", 0.0) >= 0.5 or (
        _hot(signals) and (_z(signals, "tokens_per_s") < -Z_OUTLIER or _z(signals, "power_w") < -Z_OUTLIER))
    queue = signals.get("queue_depth", {})
    queued = (queue.get("z", 0.0) > Z_OUTLIER and queue.get("value", 0.0) - queue.get("normal", 0.0) >= 1.0) or (
        _z(signals, "utilization") > Z_OUTLIER and signals.get("utilization", {}).get("value", 0.0) >= 0.9)
    return throttled, queued


def verdict_for(ctx: TaskContext, step: StepData, slowness: dict, signals: dict) -> dict:
    """The hardware verdict of one slow LLM step, with the numbers behind it."""
    stats = ctx.baseline(step)
    throttled, queued = device_anomaly(signals)
    long_prompt = False
    if step.input_tokens and stats and stats.input_median:
        long_prompt = (log_z(step.input_tokens, stats.input_median, stats.spread("input")) > Z_OUTLIER
                       or step.input_tokens >= 2 * stats.input_median)
    decode_slow = slowness.get("slow_part") == "decode"
    compute = None
    if step.ttft_ms is not None and stats and stats.ttft_median is not None:
        scale = max(1.0, (step.input_tokens or 0) / stats.input_median) if stats.input_median else 1.0
        compute = min(step.ttft_ms, stats.ttft_median * scale)
    # A long prompt whose TTFT is no more than its prefill would take explains a slow start
    # by itself, whatever the queue did.
    prompt_explains = (long_prompt and not decode_slow and compute is not None
                       and step.ttft_ms <= compute * (1 + MIN_EXCESS_RATIO))
    if throttled and (decode_slow or not queued):
        verdict = "throttling"
    elif queued and not prompt_explains:
        verdict = "queueing"
    elif _hot(signals) and decode_slow:
        # Hot, not queued, and every token slower: the thermal signature, for devices that
        # report neither a throttle flag nor throughput.
        verdict = "throttling"
    elif long_prompt and not decode_slow:
        verdict = "prefill_bound"
    else:
        verdict = "nominal"
    out = {"verdict": verdict, "device": step.device, "telemetry": "present" if signals["samples"] else "missing",
           "signals": signals, **slowness}
    if compute is not None:
        queue_wait = step.ttft_ms - compute if verdict == "queueing" else 0.0
        out["ttft_split"] = {"ttft_ms": round(step.ttft_ms, 1), "queue_wait_ms": round(queue_wait, 1),
                             "compute_ms": round(step.ttft_ms - queue_wait, 1)}
    return out


def _verdict_candidate(ctx: TaskContext, step: StepData) -> bool:
    """An LLM step slow at least at the corroborated cut-off (the lower one). Any other step gets
    no verdict whatever its device did, so its telemetry is never read (most steps)."""
    return (step.kind == "llm" and step.status == "ok"
            and llm_slowness(step, ctx.baseline(step), z_cut=Z_CORROBORATED) is not None)


def telemetry_devices(ctx: TaskContext) -> set[str]:
    """The devices whose samples `step_verdicts` reads for this task: a batch loads only theirs
    (reading every task's telemetry was a seventh of a worker's CPU)."""
    return {step.device for step in ctx.steps if step.device and _verdict_candidate(ctx, step)}


def step_verdicts(ctx: TaskContext) -> dict[str, dict]:
    """step_id → verdict for every slow LLM step of the task."""
    verdicts = {}
    times: dict[str, list[float]] = {}  # per device: its samples' times, listed once per task
    for step in ctx.steps:
        if not _verdict_candidate(ctx, step):
            continue
        stats = ctx.baseline(step)
        if step.device and step.device not in times:
            times[step.device] = [s.ts_ms for s in ctx.samples.get(step.device, [])]
        signals = device_signals(ctx, step, times=times[step.device]) if step.device else {"samples": 0}
        corroborated = any(device_anomaly(signals)) or _hot(signals)
        slowness = llm_slowness(step, stats, z_cut=Z_CORROBORATED if corroborated else Z_SLOW)
        if slowness is None:
            continue
        verdict = verdict_for(ctx, step, slowness, signals)
        if corroborated and verdict["verdict"] not in ("queueing", "throttling"):
            # The device evidence did not explain it: the step must be slow on its own merits.
            slowness = llm_slowness(step, stats)
            if slowness is None:
                continue
            verdict = verdict_for(ctx, step, slowness, signals)
        verdicts[step.step_id] = verdict
    return verdicts


def _reading(sig: dict, metric: str, label: str, unit: str = "") -> str | None:
    entry = sig.get(metric)
    if not entry:
        return None
    normal = f" vs normal {entry['normal']:g}{unit}" if "normal" in entry else ""
    return f"{label} {entry['value']:g}{unit}{normal}"


def _why(verdict_name: str, device: str, sig: dict) -> str:
    if verdict_name == "queueing":
        parts = [_reading(sig, "queue_depth", "queue depth"), _reading(sig, "utilization", "utilisation")]
        return f"its device {device} was saturated ({'; '.join(p for p in parts if p) or 'no readings'})"
    flag = "throttle flag set" if sig.get("throttled", {}).get("value", 0) >= 0.5 else None
    parts = [flag, _reading(sig, "temperature_c", "temperature", " °C"), _reading(sig, "tokens_per_s", "tokens/s")]
    return f"its device {device} was throttling ({'; '.join(p for p in parts if p) or 'no readings'})"


def hardware_findings(ctx: TaskContext, verdict_name: str):
    """Findings `hardware_<verdict_name>` for the task's slow LLM steps with that verdict."""
    from analysis.engine.detectors.base import Finding, baseline_confidence, fmt_ms

    by_id = {s.step_id: s for s in ctx.steps}
    for step_id, verdict in ctx.verdicts.items():
        if verdict["verdict"] != verdict_name:
            continue
        step = by_id[step_id]
        why = _why(verdict_name, step.device, verdict.get("signals", {}))
        wasted = verdict["excess_ms"]
        summary = (f"{step.label} took {fmt_ms(step.duration_ms)} ({fmt_ms(wasted)} over the usual "
                   f"{fmt_ms(verdict['expected_ms'])}) because {why}.")
        normal = ctx.device_normals.get(step.device)
        confidence, reason = baseline_confidence(normal.count if normal else 0,
                                                 what=f"telemetry readings of {step.device or 'the device'}")
        yield Finding(f"hardware_{verdict_name}", (step_id,), wasted, summary, dict(verdict),
                      ((step.end_ms - wasted, step.end_ms),), confidence=confidence, confidence_reason=reason)
