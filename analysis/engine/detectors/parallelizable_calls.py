"""parallelizable_calls: independent tool calls run one after another.

Candidates are the calls one model turn led to: the calls one LLM response requested (by their
tool-call ids) and, where ids are missing, the calls that started after the same LLM step
ended and before the next one (whatever their parents: framework wrapper spans such as graph
nodes do not split a turn). Calls before any LLM answer (a RAG pipeline's retrieve-then-rerank,
say) were not issued by a model and are left alone.

Which calls of a turn depended on which is inferred from evidence (dependencies.py): depends_on
when sent; a value of a result in a later call's arguments → dependent, even when one response
requested both (a planner's placeholder the executor filled); otherwise positive evidence of
independence (bases.py): calls that overlapped, calls of tools that do not act requested together,
or the agent's other runs showing the pair concurrent or in both orders. The projected time of the group, run as parallel as its dependencies allow, is its
longest dependency chain (earliest finish over the group's DAG). wasted = the time the group
actually occupied (union of its intervals) − that projection: for fully independent serial
calls, sum − max.

The finding's confidence, and its `evidence["basis"]`, are those of its weakest assumption of
independence (pairs nothing shows independent are kept in order first: the waste that positive
evidence alone supports, where there is some, is asserted; else the whole is possible): high when this trace shows it (call ids of tools that do not act, overlap, declared
dependencies), medium when the agent's other runs do, low ("possible") when nothing positive does
(no flow seen is not evidence); a low one is shown but counts in no total.

The waste is measured, not estimated, so the only guards are against calls that were in fact
concurrent and against jitter. Calls that ran mostly at the same time (`ran_together`: one
started while the other was at most half through) already run in parallel: the projection keeps
the later one's lag (dispatch, not waiting), only an independent pair that did not run together
can make a finding, and the group must have run in at least two stages (`serial_stages`). A
stagger (each call started when the one before was more than half done) is partly serialised;
a serial chain with one concurrent sibling is still a chain. The waste must be ≥ 10 ms (clock
and scheduling jitter). A call that started before another ended could not use its result: that
pair is independent (dependencies.concurrent). Repeats of an identical call are left out of the
group: they are `repeated_tool_call`'s, and the fix there is a cache.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from analysis.engine.detectors.base import (
    CONFIDENCE_HIGH,
    CONFIDENCE_LOW,
    CONFIDENCE_MEDIUM,
    Finding,
    StepData,
    TaskContext,
    canonical_args,
    register,
    union_length,
)
from analysis.engine.detectors.dependencies import (
    BOTH_ORDERS,
    DECLARED,
    FAN_OUT,
    INDEPENDENT_CONCURRENT,
    INDEPENDENT_IDS,
    INDEPENDENT_NO_FLOW,
    LEARNED_NO_FLOW,
    LEARNED_TOGETHER,
    LEARNED_UNKNOWN,
    LINK_WINDOW,
    STRENGTH,
    TOGETHER_ACTING,
    UNKNOWN,
    UNKNOWN_COMMON,
    UNKNOWN_SHARED,
    Evidence,
    Link,
)
from analysis.units import fmt_ms

MIN_WASTED_MS = 10.0
# Calls that overlapped for at least this share of the shorter one ran together (one stage):
# the later one started while the earlier was at most half through, and more of their time was
# shared than not.
STAGE_OVERLAP = 0.5
TIME_RESOLUTION_MS = 0.001  # timestamps are stored to the microsecond
MAX_EVIDENCE_LINKS = 20
_RANK = {CONFIDENCE_LOW: 0, CONFIDENCE_MEDIUM: 1, CONFIDENCE_HIGH: 2}
REASONS = {
    FAN_OUT: "The model requested these calls of one tool together in one response, with different arguments "
             "and no value in common (a fan-out), so none consumed another's output.",
    INDEPENDENT_IDS: "The model requested these calls together in one response, and none of them acts, so none "
                     "consumed another's output.",
    DECLARED: "The trace declares which calls depended on which (depends_on).",
    INDEPENDENT_CONCURRENT: "Each call started while the one before it still ran, so none could use another's "
                            "result: they were started one by one, not together.",
    LEARNED_TOGETHER: "In other runs this agent (this release or another) ran these calls concurrently, both "
                      "succeeding, so neither needs the other's output.",
    BOTH_ORDERS: "In other runs this agent ran these calls one after the other in both orders, both succeeding, "
                 "with no value passed between them.",
    TOGETHER_ACTING: "Possible only: the model requested these calls together, but one of them acts (writes, "
                     "clicks, submits, navigates...), and such calls are often meant to run in order.",
    INDEPENDENT_NO_FLOW: "Possible only: their results were recorded and no value from one visibly reached "
                         "another's arguments, but a value can flow in a form that does not show.",
    UNKNOWN: "Possible only: the trace records no tool-call ids, results or dependencies, "
             "so nothing shows whether these calls needed each other's output.",
    UNKNOWN_SHARED: "Possible only: these calls share a value (an id, a path) and the trace does not "
                    "show whether the agent meant one to wait for the other.",
    LEARNED_NO_FLOW: "Possible only: over this agent's recent runs no value of the earlier call's result was "
                     "seen in the later call's arguments, which does not show that none flowed.",
    UNKNOWN_COMMON: "Possible only: the earlier call's result and the later call's arguments share a value, "
                    "but one this agent's runs all carry, so it may have flowed or be a coincidence.",
    LEARNED_UNKNOWN: "Possible only: this agent's runs do not show whether one of these calls needed "
                     "the other's output.",
}


def turn_groups(steps: list[StepData], evidence: Evidence) -> list[list[StepData]]:
    """The calls of each model turn, in start order (only turns of two calls or more)."""
    llms = sorted((s for s in steps if s.kind == "llm"), key=lambda s: s.end_ms)
    ends = [s.end_ms for s in llms]
    turns: dict[str, list[StepData]] = defaultdict(list)
    for call in evidence.calls:
        issuer = evidence.issuer(call)
        if issuer is None:
            i = bisect.bisect_right(ends, call.start_ms + 1e-6)
            if i == 0:
                continue
            issuer = llms[i - 1]
        turns[issuer.step_id].append(call)
    return [calls for calls in turns.values() if len(calls) >= 2]


def parallel_ms(group: list[StepData], dependent: set[tuple[str, str]],
                ordered: set[tuple[str, str]] = frozenset()) -> float:
    """Duration of the group run as parallel as its dependencies allow: independent calls start
    with the group, a dependent one after what it needs plus the hand-off it really took (the
    agent's dispatch time between a call and its follow-up is not parallelism to win), and a call
    that ran together with an earlier one (`ran_together`) keeps its lag behind it: the agent
    already runs the two in parallel, so what held the later one back (its dispatch, a model still
    streaming the call) is not something running them in parallel would remove. An `ordered` pair
    (nothing shows it independent) only keeps its order: the later one starts once the earlier ended."""
    needs: dict[str, list[StepData]] = defaultdict(list)
    after: dict[str, list[str]] = defaultdict(list)
    by_id = {s.step_id: s for s in group}
    for earlier, later in dependent:
        needs[later].append(by_id[earlier])
    for earlier, later in ordered:
        after[later].append(earlier)
    ordered = sorted(group, key=lambda c: (c.start_ms, c.step_id))
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    for j, s in enumerate(ordered):
        ready = max((finish[e.step_id] + max(0.0, s.start_ms - e.end_ms) for e in needs[s.step_id]
                     if e.step_id in finish), default=0.0)
        ready = max([ready, *(finish[e] for e in after[s.step_id] if e in finish)])
        for e in ordered[max(0, j - LINK_WINDOW):j]:
            if ran_together(e, s):
                ready = max(ready, start[e.step_id] + s.start_ms - e.start_ms)
        start[s.step_id], finish[s.step_id] = ready, ready + s.duration_ms
    return max(finish.values(), default=0.0)


def _mostly(overlap: float, shorter: float) -> bool:
    """An overlap of at least STAGE_OVERLAP of the shorter duration (to the stored timestamps'
    microsecond: a call dispatched exactly halfway through another is together with it)."""
    return overlap >= STAGE_OVERLAP * shorter - TIME_RESOLUTION_MS


def ran_together(a: StepData, b: StepData) -> bool:
    """The two calls ran mostly at the same time: one started while the other was at most half
    through, and they overlapped for at least half of the shorter one. Nothing to win between them
    but the dispatch lag. A call started later than that (a stagger) spent most of its time after
    the other: partly serialised."""
    return _mostly(min(a.end_ms, b.end_ms) - max(a.start_ms, b.start_ms), min(a.duration_ms, b.duration_ms))


def serial_stages(group: list[StepData]) -> int:
    """How many stages the group ran in: a call that joined a stage still running (overlapping it
    for at least STAGE_OVERLAP of the shorter of it and the stage's shortest call) is part of it,
    with nothing to win but dispatch skew. A serial chain with one concurrent sibling, or calls
    started one by one while the previous was mostly done (a stagger), are several."""
    stages: list[list[float]] = []  # [start, end, shortest duration] of each stage, by start
    for s in sorted(group, key=lambda c: (c.start_ms, c.end_ms)):
        if stages:
            last = stages[-1]
            if _mostly(min(last[1], s.end_ms) - s.start_ms, min(last[2], s.duration_ms)):
                last[1], last[2] = max(last[1], s.end_ms), min(last[2], s.duration_ms)
                continue
        stages.append([s.start_ms, s.end_ms, s.duration_ms])
    return len(stages)


def distinct_calls(group: list[StepData], ctx: TaskContext | None = None) -> list[StepData]:
    """The group without repeats of an identical call (those are repeated_tool_call's: the
    fix is a cache, not parallelism). With `ctx`, the arguments' canonical forms it holds."""
    canonical = ctx.call_args if ctx is not None else (lambda step: canonical_args(step.tool_args))
    seen: set[tuple[str, str]] = set()
    out = []
    for s in group:
        key = (s.label, canonical(s)) if s.tool_args is not None else (s.step_id, "")
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _weakest(serial: list[Link]) -> str:
    """The basis of the weakest assumption of independence the waste rests on: that of the
    pairs that did not run together (a pair that did assumes nothing: its lag is kept)."""
    assumed = [link for link in serial if not link.dependent]
    return min((link.basis for link in assumed), key=lambda b: _RANK[STRENGTH[b]])


@register("parallelizable_calls")
def detect(ctx: TaskContext):
    evidence = Evidence(ctx.steps, ctx.profile)
    for group in turn_groups(ctx.steps, evidence):
        group = distinct_calls(group, ctx)
        if len(group) < 2:
            continue
        links = evidence.links(group)
        dependent = {(link.earlier, link.later) for link in links if link.dependent}
        by_id = {s.step_id: s for s in group}
        # Only an independent pair that did not already run together can be advice to run in parallel.
        serial = [link for link in links if not ran_together(by_id[link.earlier], by_id[link.later])]
        if all(link.dependent for link in serial):
            continue
        actual = union_length((s.start_ms, s.end_ms) for s in group)
        projected = parallel_ms(group, dependent)
        wasted = actual - projected
        total = sum(s.duration_ms for s in group)
        if wasted < MIN_WASTED_MS or serial_stages(group) < 2:
            continue
        # What positive evidence alone supports: the pairs nothing shows independent kept in
        # order. Where that still wastes time, the finding asserts that much (a fan-out beside a
        # framework's own zero-length span, three reads beside a click); else the whole is possible.
        unknown = {(link.earlier, link.later) for link in links if link.dependent is None}
        shown = [link for link in serial if link.dependent is False]
        sure = parallel_ms(group, dependent, unknown) if unknown else projected
        if shown and actual - sure >= MIN_WASTED_MS:
            projected, wasted, basis = sure, actual - sure, _weakest(shown)
        else:
            basis = _weakest(serial)
        confidence = STRENGTH[basis]
        end = max(s.end_ms for s in group)
        names = ", ".join(dict.fromkeys(s.label for s in group))
        linked = sorted({sid for pair in dependent for sid in pair})
        claim = ("though none depends on another" if not dependent else "though only some depend on others")
        if confidence != CONFIDENCE_LOW and unknown:
            claim = "though some of them needed none of the others"
        if confidence == CONFIDENCE_LOW:
            claim = "and nothing in the trace shows whether one needed another's output"
        took, would = fmt_ms(actual), fmt_ms(projected)
        if took == would:  # 1.24 s and 1.16 s both read "1.2 s": say them in ms
            took, would = f"{actual:,.0f} ms", f"{projected:,.0f} ms"
        summary = (f"{'Possibly: ' if confidence == CONFIDENCE_LOW else ''}{len(group)} calls ({names}) ran one after "
                   f"another {claim}; run in parallel they would take {would} instead of {took}.")
        evidence_out = {
            "calls": len(group), "actual_ms": round(actual, 1), "parallel_ms": round(projected, 1),
            "sum_ms": round(total, 1), "dependent_step_ids": linked, "basis": basis,
            "unknown_step_ids": sorted({sid for pair in unknown for sid in pair}),
            "links": [{"earlier": link.earlier, "later": link.later, "dependent": link.dependent,
                       "basis": link.basis} for link in links[:MAX_EVIDENCE_LINKS]],
        }
        yield Finding("parallelizable_calls", tuple(s.step_id for s in group), wasted, summary, evidence_out,
                      ((end - wasted, end),), confidence=confidence, confidence_reason=REASONS[basis])
