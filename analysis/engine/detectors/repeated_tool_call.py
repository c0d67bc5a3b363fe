"""repeated_tool_call: the same tool (or retrieval) called again with equivalent arguments
in one task.

Arguments compare as canonical JSON (key order, formatting and whitespace runs do not
matter). A call repeated after the previous identical call *failed* is a retry, not waste,
so the chain restarts at every failure. wasted = the repeats' time (everything after the
first successful call), one finding per (tool, arguments).
"""

from __future__ import annotations

import json
from collections import defaultdict

from analysis.engine.detectors.base import Finding, TaskContext, register
from analysis.units import fmt_ms

MIN_WASTED_MS = 1.0
# Retrieval steps are tool calls too (a vector search with the same query is a repeat).
CALL_KINDS = ("tool", "retrieval")


def _what(canonical: str) -> str:
    """"order_id" for {"order_id": …}, "order_id and full" for two keys, else "arguments"."""
    try:
        parsed = json.loads(canonical)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and 0 < len(parsed) <= 3:
        keys = [k[:40] for k in parsed]
        return ", ".join(keys[:-1]) + (" and " if len(keys) > 1 else "") + keys[-1]
    return "arguments"


@register("repeated_tool_call")
def detect(ctx: TaskContext):
    groups = defaultdict(list)
    for step in sorted(ctx.steps, key=lambda s: (s.start_ms, s.step_id)):
        if step.kind not in CALL_KINDS or step.tool_args is None:
            continue
        groups[(step.label, ctx.call_args(step))].append(step)
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
        summary = (f"{tool} called {len(repeats) + 1}× with the same {_what(args)}; "
                   f"{fmt_ms(wasted)} repeated.")
        evidence = {"tool": tool, "arguments": args[:500], "calls": len(repeats) + 1,
                    "first_step_id": first_ok.step_id,
                    "repeat_ms": [round(c.duration_ms, 1) for c in repeats]}
        confidence, reason = _confidence(args, [first_ok, *repeats])
        yield Finding("repeated_tool_call", (first_ok.step_id, *(c.step_id for c in repeats)), wasted,
                      summary, evidence, tuple((c.start_ms, c.end_ms) for c in repeats),
                      confidence=confidence, confidence_reason=reason)


def _confidence(args: str, calls: list) -> tuple[str, str]:
    """High: the same non-empty arguments. Medium when the calls took no arguments (a clock or
    a status check may rightly be asked again) or returned different results (polling)."""
    if args in ("{}", "[]", '""', "null"):
        return "medium", "The calls took no arguments: asking again may have been meant to get a newer answer."
    results = {c.tool_result for c in calls if c.tool_result}
    if len(results) > 1:
        return "medium", "Same arguments, but the calls returned different results: this may be polling."
    return "high", "The same tool was called with the same arguments (order and whitespace aside)."
