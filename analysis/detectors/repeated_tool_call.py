"""repeated_tool_call: the same tool (or retrieval) called again with equivalent arguments
in one task.

Arguments compare as canonical JSON (key order, formatting and whitespace runs do not
matter). A call repeated after the previous identical call *failed* is a retry, not waste,
so the chain restarts at every failure. wasted = the repeats' time (everything after the
first successful call), one finding per (tool, arguments).
"""

from __future__ import annotations

from collections import defaultdict

from analysis.detectors.base import Finding, TaskContext, canonical_args, fmt_ms, register

MIN_WASTED_MS = 1.0
# Retrieval steps are tool calls too (a vector search with the same query is a repeat).
CALL_KINDS = ("tool", "retrieval")


@register("repeated_tool_call")
def detect(ctx: TaskContext):
    groups = defaultdict(list)
    for step in sorted(ctx.steps, key=lambda s: (s.start_ms, s.step_id)):
        if step.kind not in CALL_KINDS or step.tool_args is None:
            continue
        groups[(step.label, canonical_args(step.tool_args))].append(step)
    for (tool, args), calls in groups.items():
        first_ok = None
        repeats = []
        for call in calls:
            if first_ok is None:
                if call.status == "ok":
                    first_ok = call
            else:
                repeats.append(call)
        wasted = sum(c.duration_ms for c in repeats)
        if not repeats or wasted < MIN_WASTED_MS:
            continue
        shown = args if len(args) <= 80 else args[:77] + "..."
        summary = (f"{tool} called {len(repeats) + 1}× with the same arguments {shown}; "
                   f"{fmt_ms(wasted)} repeated.")
        evidence = {"tool": tool, "arguments": args[:500], "calls": len(repeats) + 1,
                    "first_step_id": first_ok.step_id,
                    "repeat_ms": [round(c.duration_ms, 1) for c in repeats]}
        yield Finding("repeated_tool_call", (first_ok.step_id, *(c.step_id for c in repeats)), wasted,
                      summary, evidence, tuple((c.start_ms, c.end_ms) for c in repeats))
