"""The critical path: the chain of steps that determined when the task ended.

Walk backwards from the task's end: the step on the path at instant `t` is the leaf step
(a step without children: parents are made of their children) that started before `t` and
ended latest, up to `t`; the path continues from its start. Between path steps nothing ran:
that idle time is returned as a gap segment. Parallel siblings that finished earlier are
off the path; overlapping steps are clipped so segments never overlap and exactly tile the
task from its start to its end.

Linear after one sort: steps sorted by end time, one pointer that only moves forward (a
step that started after the cursor can never be on the path once the cursor moved before
it). No recursion, so a 50,000-step task with a 50,000-deep chain is fine.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from analysis.detectors.base import StepData, children_of


@dataclass(frozen=True, slots=True)
class Segment:
    start_ms: float
    end_ms: float
    step: StepData | None  # None: nothing ran (idle / framework)

    @property
    def length(self) -> float:
        return self.end_ms - self.start_ms


def critical_path(steps: list[StepData], start_ms: float, end_ms: float) -> list[Segment]:
    """Segments tiling [start_ms, end_ms] in time order."""
    parents = children_of(steps)
    leaves = [s for s in steps if s.step_id not in parents and s.end_ms > start_ms and s.start_ms < end_ms]
    leaves.sort(key=attrgetter("end_ms", "start_ms"), reverse=True)
    segments: list[Segment] = []
    append = segments.append
    cursor = end_ms
    for step in leaves:
        if cursor <= start_ms:
            break
        begin, finish = step.start_ms, step.end_ms
        if begin >= cursor:
            continue
        if finish < cursor:
            append(Segment(finish, cursor, None))
        else:
            finish = cursor
        if begin < start_ms:
            begin = start_ms
        if finish > begin:
            append(Segment(begin, finish, step))
        cursor = begin
    if cursor > start_ms:
        segments.append(Segment(start_ms, cursor, None))
    segments.reverse()
    return segments


def path_step_ids(segments: list[Segment]) -> list[str]:
    return list(dict.fromkeys(seg.step.step_id for seg in segments if seg.step is not None))
