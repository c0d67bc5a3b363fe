"""parallelizable_calls: independent tool calls run one after another.

Candidates are the tool/retrieval calls one LLM turn issued: consecutive tool or retrieval
steps under the same parent with no LLM step between them, started after some LLM step of
the task had finished (calls before any LLM answer — a RAG pipeline's retrieve-then-rerank,
say — were not issued by a model turn and are often a pipeline whose stages feed each other). Calls are dependent when one
lists the other in `depends_on` (the trace's own statement that it consumed that output);
otherwise they are independent and could have run at once.

The projected time of the group, run as parallel as its dependencies allow, is its longest
dependency chain (earliest-finish over the group's DAG, linear in calls + links). wasted =
the time the group actually occupied (union of its intervals) − that projection: for fully
independent serial calls, sum − max.

No statistics are involved — the waste is measured, not estimated — so the only guards are
against calls that were in fact concurrent: the group must have run essentially one after
another (its busy time ≥ 90 % of the sum of its durations; dispatching concurrently with a
little scheduling skew does not qualify), and the waste must be ≥ 10 ms (clock and
scheduling jitter). Repeats of an identical call are left
out of the group: they are `repeated_tool_call`'s, and the fix there is a cache.
"""

from __future__ import annotations

from collections import defaultdict

from analysis.detectors.base import (
    Finding,
    StepData,
    TaskContext,
    canonical_args,
    fmt_ms,
    register,
    union_length,
)

MIN_WASTED_MS = 10.0
MIN_SERIAL_SHARE = 0.9
CALL_KINDS = ("tool", "retrieval")


def turn_groups(steps: list[StepData]) -> list[list[StepData]]:
    """Runs of consecutive tool/retrieval calls per parent, split by LLM steps."""
    by_parent: dict[str, list[StepData]] = defaultdict(list)
    for s in steps:
        if s.kind in CALL_KINDS or s.kind == "llm":
            by_parent[s.parent_step_id].append(s)
    groups = []
    for siblings in by_parent.values():
        siblings.sort(key=lambda s: (s.start_ms, s.end_ms, s.step_id))
        run: list[StepData] = []
        for s in siblings:
            if s.kind == "llm":
                if len(run) >= 2:
                    groups.append(run)
                run = []
            else:
                run.append(s)
        if len(run) >= 2:
            groups.append(run)
    return groups


def parallel_ms(group: list[StepData]) -> float:
    """Duration of the group's longest dependency chain (calls in start order)."""
    finish: dict[str, float] = {}
    for s in group:
        ready = max((finish[d] for d in s.depends_on if d in finish), default=0.0)
        finish[s.step_id] = ready + s.duration_ms
    return max(finish.values(), default=0.0)


def distinct_calls(group: list[StepData]) -> list[StepData]:
    """The group without repeats of an identical call (those are repeated_tool_call's: the
    fix is a cache, not parallelism)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for s in group:
        key = (s.label, canonical_args(s.tool_args)) if s.tool_args is not None else (s.step_id, "")
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


@register("parallelizable_calls")
def detect(ctx: TaskContext):
    llm_ends = sorted(s.end_ms for s in ctx.steps if s.kind == "llm")
    for group in turn_groups(ctx.steps):
        group = distinct_calls(group)
        if len(group) < 2 or not llm_ends or llm_ends[0] > group[0].start_ms:
            continue
        ids = {s.step_id for s in group}
        linked = {s.step_id for s in group if ids.intersection(s.depends_on)}
        linked |= {d for s in group for d in s.depends_on if d in ids}
        independent = [s for s in group if s.step_id not in linked]
        if len(independent) < 2 and len(linked) == len(group):
            continue
        actual = union_length((s.start_ms, s.end_ms) for s in group)
        projected = parallel_ms(group)
        wasted = actual - projected
        total = sum(s.duration_ms for s in group)
        if wasted < MIN_WASTED_MS or actual < MIN_SERIAL_SHARE * total:
            continue
        end = max(s.end_ms for s in group)
        names = ", ".join(dict.fromkeys(s.label for s in group))
        summary = (f"{len(group)} calls ({names}) ran one after another though "
                   f"{'none depends on another' if not linked else 'only some depend on others'}; "
                   f"run in parallel they would take {fmt_ms(projected)} instead of {fmt_ms(actual)}.")
        evidence = {"calls": len(group), "actual_ms": round(actual, 1), "parallel_ms": round(projected, 1),
                    "sum_ms": round(sum(s.duration_ms for s in group), 1),
                    "dependent_step_ids": sorted(linked)}
        yield Finding("parallelizable_calls", tuple(s.step_id for s in group), wasted, summary, evidence,
                      ((end - wasted, end),))
