"""What-if: the task's projected duration under changes, replayed along its critical path.

Scenarios, alone and combined:
- `hardware[family]`: every LLM step on the critical path takes what `analysis.hardware`'s
  model of that family predicts for its input/output tokens (model size parsed from the model
  name, e.g. "llama-3-70b" → 70 B; 70 B when absent), idle queue (the ideal device);
- `parallel`: the waste of `parallelizable_calls` findings is removed;
- `cached`: repeated tool calls return instantly (`repeated_tool_call` waste removed);
- `parallel_cached` and `hardware[family].with_fixes_ms`: the combinations.

A call that already ran on a family keeps its time in that family's projection (no saving is
claimed for moving it where it is); `unknown_hardware_ms` is the path time of calls whose
hardware no device named (a hosted API): a projection of those is hypothetical.

First-order: only time on the current critical path, run by the steps a finding names, is
replaced or removed, and the path is
not recomputed afterwards (another branch may become critical), so savings are an upper
bound of what that change alone buys. Removed intervals are unioned before subtracting, so a
call that is both repeated and serialised is not removed twice.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache

from analysis.engine.critical_path import Segment
from analysis.engine.detectors.base import Finding, TaskContext, union_length
from analysis.hardware import PROFILES

_PARAMS = re.compile(r"(\d+(?:\.\d+)?)\s*b\b", re.IGNORECASE)
_FIX_KINDS = {"parallel": ("parallelizable_calls",), "cached": ("repeated_tool_call",),
              "parallel_cached": ("parallelizable_calls", "repeated_tool_call")}


@lru_cache(maxsize=4096)
def model_params_b(model: str, default: float = 70.0) -> float:
    match = _PARAMS.search(model.replace("-", " ").replace("_", " ") if model else "")
    return float(match.group(1)) if match else default


@lru_cache(maxsize=65536)
def _step_ms(family: str, input_tokens: int, output_tokens: int, params_b: float) -> float:
    """PROFILES[family].step_ms, remembered: a batch asks the same few shapes again and again."""
    return PROFILES[family].step_ms(input_tokens, output_tokens, model_params_b=params_b)


def _removed_on_path(segments: list[Segment], findings: list[Finding], kinds: tuple[str, ...]) -> float:
    """Milliseconds of the critical path the findings of `kinds` would save: the part of each
    path segment, run by one of a finding's steps, that the finding's waste covers."""
    by_step: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for f in findings:
        if f.kind in kinds:
            for step_id in f.step_ids:
                by_step[step_id].extend(f.intervals)
    total = 0.0
    for seg in segments:
        if seg.step is None or seg.step.step_id not in by_step:
            continue
        clipped = [(max(a, seg.start_ms), min(b, seg.end_ms)) for a, b in by_step[seg.step.step_id]]
        total += union_length(clipped)
    return total


def projections(ctx: TaskContext, segments: list[Segment], findings: list[Finding]) -> dict:
    """The task's what-if document: its actual critical-path time, that time with each kind of fix
    applied, and on each hardware family (docs/analysis.md, "Critical path, budget, what-if")."""
    actual = sum(seg.length for seg in segments)
    result = {"actual_ms": round(actual, 1)}
    for name, kinds in _FIX_KINDS.items():
        result[f"{name}_ms"] = round(actual - _removed_on_path(segments, findings, kinds), 1)
    fixes_saved = actual - result["parallel_cached_ms"]
    llm_path = [(seg, seg.step) for seg in segments if seg.step is not None and seg.step.kind == "llm"]
    llm_ms = sum(seg.length for seg, _ in llm_path)
    result["llm_path_ms"] = round(llm_ms, 1)
    # Per path step, once for all families: (its path time, None) when the model cannot project
    # it, else (the share of the step on the path, its shape for _step_ms); and the family that
    # served it (None: not known).
    shapes = []
    for seg, step in llm_path:
        duration = step.duration_ms
        family = ctx.family(step)
        if step.input_tokens is None or step.output_tokens is None or duration <= 0:
            shapes.append((seg.length, None, family))
        else:
            shapes.append((seg.length / duration, (step.input_tokens, step.output_tokens, model_params_b(step.model)),
                           family))
    # Path time of calls whose hardware nobody named (a hosted API): moving them is hypothetical.
    result["unknown_hardware_ms"] = round(sum(seg.length for (seg, _), (_, _, f) in zip(llm_path, shapes, strict=True)
                                              if f is None), 1)
    hardware = {}
    for family in PROFILES:
        projected = already = 0.0
        for (seg, _), (part, shape, served) in zip(llm_path, shapes, strict=True):
            if served == family:  # already on this family: it stays as it ran
                projected += seg.length
                already += seg.length
            else:
                projected += part if shape is None else part * _step_ms(family, *shape)
        ms = actual - llm_ms + projected
        hardware[family] = {"ms": round(ms, 1), "llm_ms": round(projected, 1), "already_ms": round(already, 1),
                            "with_fixes_ms": round(max(ms - fixes_saved, 0.0), 1)}
    result["hardware"] = hardware
    return result
