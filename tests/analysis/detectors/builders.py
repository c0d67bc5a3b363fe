"""Hand-built tasks for detector tests: times in seconds from the task start, turned into the
epoch-ms StepData the detectors see."""

from __future__ import annotations

import random

from analysis.engine.detectors.base import (
    BaselineStats,
    DeviceNormal,
    MetricNormal,
    Sample,
    StepData,
    TaskContext,
)

T0 = 1_780_000_000_000.0  # an arbitrary epoch ms


def step(step_id: str, kind: str, start_s: float, end_s: float, **kw) -> StepData:
    kw.setdefault("name", kw.get("tool_name") or kw.get("model") or kind)
    return StepData(step_id=step_id, kind=kind, start_ms=T0 + start_s * 1000, end_ms=T0 + end_s * 1000, **kw)


def task(steps: list[StepData], *, end_s: float | None = None, **kw) -> TaskContext:
    end = end_s if end_s is not None else max((s.end_ms - T0) / 1000 for s in steps)
    return TaskContext(task_id="t1", start_ms=T0, end_ms=T0 + end * 1000, steps=steps, **kw)


def stats(median_ms: float, mad_ms: float, count: int = 200, **kw) -> BaselineStats:
    return BaselineStats(count=count, median_ms=median_ms, mad_ms=mad_ms, **kw)


def llm_stats(count: int = 200) -> BaselineStats:
    """A model whose TTFT is ~200 ms (MAD 20), 20 ms per output token (MAD 1.5), prompts ~2k."""
    return BaselineStats(count=count, median_ms=2200, mad_ms=300, ttft_median=200, ttft_mad=20,
                         tpot_median=20, tpot_mad=1.5, input_median=2000, input_mad=300)


def device_normal() -> DeviceNormal:
    return DeviceNormal({"queue_depth": MetricNormal(2, 1), "utilization": MetricNormal(0.6, 0.1),
                         "temperature_c": MetricNormal(65, 3), "tokens_per_s": MetricNormal(900, 60),
                         "throttled": MetricNormal(0, 0)}, interval_ms=1000, count=5000)


def samples(start_s: float, end_s: float, **metrics) -> list[Sample]:
    """One sample per second with normal readings, overridden by `metrics`."""
    rng = random.Random(7)
    out = []
    t = start_s
    while t <= end_s:
        values = {"queue_depth": 2 + rng.choice((-1, 0, 0, 1)), "utilization": 0.6 + rng.uniform(-0.05, 0.05),
                  "temperature_c": 65 + rng.uniform(-2, 2), "tokens_per_s": 900 + rng.uniform(-40, 40),
                  "throttled": 0.0, **metrics}
        out.append(Sample(T0 + t * 1000, values))
        t += 1
    return out
