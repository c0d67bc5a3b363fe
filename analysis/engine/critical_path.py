"""The critical path: the chain of steps that determined when the task ended.

Walk backwards from the task's end: the step on the path at instant `t` is the leaf step
(a step without children: parents are made of their children) that started before `t` and
ended latest, up to `t`; the path continues from its start. Between path steps nothing ran:
that idle time is returned as a gap segment. Parallel siblings that finished earlier are
off the path; overlapping steps are clipped so segments never overlap and exactly tile the
task from its start to its end.

Work first: framework and agent leaves (a LangGraph routing node, a chain span that is the
model call's sibling rather than its parent) are overhead, so the walk runs over the work
leaves (model, tool, retrieval, queue, other) and framework leaves only fill the gaps between
them. A wrapper that happens to end a millisecond after the model call it wraps never hides it.

Linear after one sort: steps sorted by end time, one pointer that only moves forward (a
step that started after the cursor can never be on the path once the cursor moved before
it). No recursion, so a 50,000-step task with a 50,000-deep chain is fine.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from analysis.engine.detectors.base import StepData, children_of


@dataclass(frozen=True, slots=True)
class Segment:
    start_ms: float
    end_ms: float
    step: StepData | None  # None: nothing ran (idle / framework)

    @property
    def length(self) -> float:
        return self.end_ms - self.start_ms


OVERHEAD_KINDS = ("framework", "agent")


def critical_path(steps: list[StepData], start_ms: float, end_ms: float) -> list[Segment]:
    """Segments tiling [start_ms, end_ms] in time order."""
    parents = children_of(steps)
    leaves = [s for s in steps if s.step_id not in parents and s.end_ms > start_ms and s.start_ms < end_ms]
    by_end = attrgetter("end_ms", "start_ms")
    work = sorted((s for s in leaves if s.kind not in OVERHEAD_KINDS), key=by_end, reverse=True)
    overhead = sorted((s for s in leaves if s.kind in OVERHEAD_KINDS), key=by_end, reverse=True)
    segments: list[Segment] = []
    append = segments.append
    cursor = end_ms
    w = o = 0
    while cursor > start_ms:
        while w < len(work) and work[w].start_ms >= cursor:
            w += 1
        while o < len(overhead) and overhead[o].start_ms >= cursor:
            o += 1
        work_end = min(work[w].end_ms, cursor) if w < len(work) else None
        over_end = min(overhead[o].end_ms, cursor) if o < len(overhead) else None
        if work_end is None and over_end is None:
            break
        if over_end is None or (work_end is not None and work_end >= over_end):
            step, finish = work[w], work_end
            begin = max(step.start_ms, start_ms)
            w += 1
        else:
            # Overhead runs until the latest work under it ends; the work takes over from there.
            step, finish = overhead[o], over_end
            begin = max(step.start_ms, start_ms, work_end if work_end is not None else start_ms)
            if begin <= step.start_ms:
                o += 1
        if finish < cursor:
            append(Segment(finish, cursor, None))
        if finish > begin:
            append(Segment(begin, finish, step))
        cursor = min(begin, finish)
    if cursor > start_ms:
        append(Segment(start_ms, cursor, None))
    segments.reverse()
    return segments


def path_step_ids(segments: list[Segment]) -> list[str]:
    return list(dict.fromkeys(seg.step.step_id for seg in segments if seg.step is not None))
