"""The latency budget: where every millisecond of the task went, by category.

Each instant of the task is attributed to what was on the critical path then, so the
categories sum exactly to the task's duration (the seed articles' "TTFT + TPOT × tokens +
tool latency + framework overhead"):
- `prefill`: an LLM step before its first token (TTFT), minus any estimated queue wait;
- `decode`: an LLM step after its first token (all of it when TTFT is unknown);
- `tool`, `retrieval`: those steps;
- `queue`: `queue` steps, plus the queue wait the hardware correlation estimated inside TTFT;
- `framework`: framework/agent/other steps and idle time when nothing ran.
Linear in the number of path segments.
"""

from __future__ import annotations

from analysis.engine.critical_path import Segment

CATEGORIES = ("prefill", "decode", "tool", "retrieval", "queue", "framework")
_KIND_CATEGORY = {"tool": "tool", "retrieval": "retrieval", "queue": "queue"}


def latency_budget(segments: list[Segment], *, queue_wait_ms: dict[str, float] | None = None) -> dict[str, float]:
    budget = dict.fromkeys(CATEGORIES, 0.0)
    queue_wait_ms = queue_wait_ms or {}
    for seg in segments:
        step = seg.step
        if step is None:
            budget["framework"] += seg.length
        elif step.kind == "llm":
            if step.ttft_ms is None:
                budget["decode"] += seg.length
                continue
            first_token = step.start_ms + min(step.ttft_ms, step.duration_ms)
            prefill = max(0.0, min(seg.end_ms, first_token) - seg.start_ms)
            wait = min(prefill, queue_wait_ms.get(step.step_id, 0.0))
            budget["queue"] += wait
            budget["prefill"] += prefill - wait
            budget["decode"] += seg.length - prefill
        else:
            budget[_KIND_CATEGORY.get(step.kind, "framework")] += seg.length
    return {k: round(v, 3) for k, v in budget.items()}
