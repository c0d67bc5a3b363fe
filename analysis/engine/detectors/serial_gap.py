"""serial_gap: time inside a task when no step was doing work (framework overhead, waits).

Work = the union of leaf steps (steps without children), except `framework` steps: those are
the overhead this finding is about, so a long framework step counts as a gap and is named in
the finding. A parent (agent) step whose children leave holes is exactly the case we want.

A gap is reported when it is at least 250 ms — an order of magnitude above a framework's
normal hand-off between steps (single-digit to tens of ms), and above the ~100–200 ms a
person starts to notice — and also an outlier among the task's own hand-offs
(median + 3.5/0.6745 MADs), so an agent with uniformly slow hand-offs is one finding of
overhead per long gap, not noise. The leading gap (task start → first step) and the trailing
one (last step → task end) count too. wasted = the gap.
"""

from __future__ import annotations

from statistics import median

from analysis.engine.detectors.base import (
    MAD_TO_SIGMA,
    Z_OUTLIER,
    Finding,
    StepData,
    TaskContext,
    children_of,
    mad_floor,
    register,
)
from analysis.units import fmt_ms

MIN_GAP_MS = 250.0


def idle_gaps(ctx: TaskContext) -> list[tuple[float, float, StepData | None, StepData | None]]:
    """(start, end, step before, step after) of every hole in the work, within the task."""
    parents = children_of(ctx.steps)
    work = sorted((s for s in ctx.steps if s.step_id not in parents and s.kind != "framework"),
                  key=lambda s: (s.start_ms, s.end_ms))
    gaps = []
    cursor, before = ctx.start_ms, None
    for step in work:
        if step.start_ms > cursor:
            gaps.append((cursor, min(step.start_ms, ctx.end_ms), before, step))
        if step.end_ms > cursor:
            cursor, before = step.end_ms, step
    if ctx.end_ms > cursor:
        gaps.append((cursor, ctx.end_ms, before, None))
    return [g for g in gaps if g[1] > g[0]]


@register("serial_gap")
def detect(ctx: TaskContext):
    if not ctx.steps:
        return
    gaps = idle_gaps(ctx)
    lengths = [b - a for a, b, _, _ in gaps]
    threshold = MIN_GAP_MS
    if len(lengths) >= 3:
        med = median(lengths)
        mad = median(abs(x - med) for x in lengths)
        threshold = max(threshold, med + Z_OUTLIER / MAD_TO_SIGMA * mad_floor(mad, med, 10.0))
    framework = [s for s in ctx.steps if s.kind == "framework"]
    for start, end, before, after in gaps:
        length = end - start
        if length < threshold:
            continue
        inside = [s.step_id for s in framework if s.start_ms < end and s.end_ms > start]
        ids = tuple(dict.fromkeys([*(x.step_id for x in (before, after) if x), *inside]))
        where = (f"between {before.label} and {after.label}" if before and after
                 else f"before {after.label}" if after else f"after {before.label}" if before else "")
        summary = f"{fmt_ms(length)} with no step running {where}".rstrip() + "."
        evidence = {"gap_ms": round(length, 1), "offset_ms": round(start - ctx.start_ms, 1),
                    "threshold_ms": round(threshold, 1), "framework_steps": inside,
                    "before": before.step_id if before else None, "after": after.step_id if after else None}
        yield Finding("serial_gap", ids, length, summary, evidence, ((start, end),),
                      confidence="high", confidence_reason="Measured: no step of the task was running.")
