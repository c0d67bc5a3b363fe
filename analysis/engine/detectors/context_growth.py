"""context_growth: input tokens and TTFT climbing turn after turn in one task.

Every agent loop appends a little to its context; this finding is for a prompt that keeps
growing by large amounts (raw tool output appended verbatim, no summarising) and makes
prefill slower turn after turn. Over the task's LLM turns (in start order, at least 4 with
token counts and TTFT):
- the prompt climbs consistently: Kendall's τ between turn number and input tokens ≥ 0.7
  (rank-based: one odd turn neither makes nor breaks a trend) and the last prompt is ≥ 3×
  the first — far beyond the few hundred tokens per turn a conversation normally adds;
- TTFT climbs with it — "first turns fast, later ones slow": the median TTFT of the later
  half of the turns is ≥ 1.25× the fastest of the first two turns (beyond the ±10 % TTFT
  jitter of a steady device; medians and minimum so that one queued turn neither hides nor
  fakes the climb), and the TTFT trend is upward overall (τ > 0). Fast-prefill hardware
  shows a smaller rise for the same growth; the growth is still there, its cost is what it
  is;
- wasted = Σ over turns of the TTFT the growth explains: the tokens a turn's prompt carries
  beyond the first turn's × the task's own TTFT per prompt token (Theil–Sen: the median of
  its turn pairs' rates, so that a stalled, queued or jittery turn moves the rate by one rank
  and adds none of its stall), and never more than that turn's TTFT above the reference. Σ of
  the raw TTFT above the reference would count every stall of a later turn as growth.
For calls without TTFT (not streamed), the time the output does not explain stands in for it:
duration − the baseline's per-output-token cost × output tokens.

The turns are one model's calls. A task that calls several models (a small router or classifier
before the answer model, a summariser beside the planner) holds one conversation per model, each
with its own prompt and its own prefill rate: read as one series, a 640-token routing call becomes
"turn 1" of the answer model's flat 3k-token prompts, a threefold "growth" that never happened, and
TTFT per token mixes two machines. So each model's calls are a series of their own, judged by the
rules above, and each model whose prompt grew is a finding of its own (its turns and its waste;
the task's total counts each moment once). Calls that name no model are one series, as before.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import Counter
from statistics import median

from analysis.engine.detectors.base import Finding, StepData, TaskContext, register
from analysis.units import fmt_ms

MIN_TURNS = 4
# Kendall's tau over 4 points reaches significance only at its extreme; from 6 turns a rising
# trend is unlikely to be chance (p < 0.01 for tau = 1).
CONFIDENT_TURNS = 6
MIN_TOKEN_TAU = 0.7
MIN_TTFT_TAU = 0.0
MIN_TOKEN_RATIO = 3.0
MIN_TTFT_RATIO = 1.25
MIN_WASTED_MS = 10.0
# The per-token rate is a median over turn pairs (quadratic): past this many turns, it is taken
# over this many turns spread evenly across the task.
RATE_TURNS = 120


def kendall_tau(values: list[float]) -> float:
    """Kendall's τ-b between position and value: scipy's kendalltau, bit for bit. Up to a few
    thousand turns it is counted here (positions never tie, so τ-b = (pairs − value ties −
    2 × discordant) / √pairs / √(pairs − value ties), scipy's own expression); scipy's call costs
    ~1 ms of argument checking, which was a third of a whole task's analysis."""
    n = len(values)
    if n < 2 or len(set(values)) < 2:
        return 0.0
    if n > 5000:
        # Imported here: scipy.stats takes seconds to import, and no usual task needs it.
        from scipy.stats import kendalltau

        return float(kendalltau(range(n), values).statistic)
    seen: list[float] = []
    discordant = 0
    for value in reversed(values):  # later values smaller than this one
        discordant += bisect_left(seen, value)
        insort(seen, value)
    pairs = n * (n - 1) // 2
    ties = sum(c * (c - 1) // 2 for c in Counter(values).values())
    tau = (pairs - ties - 2 * discordant) / math.sqrt(pairs) / math.sqrt(pairs - ties)
    return min(1.0, max(-1.0, tau))


def first_token_ms(ctx: TaskContext, step: StepData) -> float | None:
    """TTFT, or for a non-streamed call the time its output does not explain: duration minus
    the baseline's per-token cost × output tokens (its prefill plus fixed overhead)."""
    if step.ttft_ms is not None:
        return step.ttft_ms
    stats = ctx.baseline(step)
    if stats is None or stats.line_b is None or step.output_tokens is None:
        return None
    return max(step.duration_ms - stats.line_b * max(step.output_tokens - 1, 0), 0.0)


def ms_per_token(tokens: list[float], ttfts: list[float]) -> float:
    """TTFT per prompt token over these turns: the median of the pairwise rates (Theil–Sen)."""
    if len(tokens) > RATE_TURNS:
        picked = [round(i * (len(tokens) - 1) / (RATE_TURNS - 1)) for i in range(RATE_TURNS)]
        tokens, ttfts = [tokens[i] for i in picked], [ttfts[i] for i in picked]
    rates = [(ttfts[j] - ttfts[i]) / (tokens[j] - tokens[i])
             for i in range(len(tokens)) for j in range(i + 1, len(tokens)) if tokens[j] != tokens[i]]
    return median(rates) if rates else 0.0


@register("context_growth")
def detect(ctx: TaskContext):
    series: dict[str, list[tuple[StepData, float]]] = {}
    for s in ctx.steps:
        if s.kind == "llm" and s.input_tokens and (t := first_token_ms(ctx, s)) is not None:
            series.setdefault(s.model, []).append((s, t))
    for model, timed in series.items():
        if len(timed) >= MIN_TURNS:
            timed.sort(key=lambda x: (x[0].start_ms, x[0].step_id))
            yield from _growth(timed, model if len(series) > 1 else "")


def _growth(timed: list[tuple[StepData, float]], model: str):
    """The finding for one model's turns (`model` named in the summary when the task has others)."""
    turns = [s for s, _ in timed]
    tokens = [float(s.input_tokens) for s in turns]
    ttfts = [float(t) for _, t in timed]
    token_tau, ttft_tau = kendall_tau(tokens), kendall_tau(ttfts)
    reference = min(ttfts[:2])
    later = median(ttfts[len(ttfts) // 2:])
    if (token_tau < MIN_TOKEN_TAU or ttft_tau <= MIN_TTFT_TAU or tokens[-1] < MIN_TOKEN_RATIO * tokens[0]
            or reference <= 0 or later < MIN_TTFT_RATIO * reference):
        return
    rate = ms_per_token(tokens, ttfts)
    excess = [(s, e) for s, n, t in zip(turns, tokens, ttfts, strict=True)
              if (e := min(rate * (n - tokens[0]), t - reference)) > 0]
    wasted = sum(e for _, e in excess)
    if wasted < MIN_WASTED_MS:
        return
    whose = f"{model}'s prompt" if model else "Prompt"
    summary = (f"{whose} grew from {int(tokens[0]):,} to {int(tokens[-1]):,} tokens over {len(turns)} LLM turns "
               f"and TTFT from {fmt_ms(reference)} to {fmt_ms(ttfts[-1])}; {fmt_ms(wasted)} spent on the growth.")
    evidence = {"turns": len(turns), "input_tokens": [int(t) for t in tokens], "ttft_ms": [round(t, 1) for t in ttfts],
                "token_tau": round(token_tau, 2), "ttft_tau": round(ttft_tau, 2), "reference_ttft_ms": round(reference, 1),
                "ms_per_1k_tokens": round(rate * 1000, 2), "model": turns[0].model}
    confidence, reason = (("high", f"Prompt size and TTFT both rose steadily over {len(turns)} turns.")
                          if len(timed) >= CONFIDENT_TURNS else
                          ("medium", f"A trend over only {len(timed)} timed turns: it may be chance."))
    yield Finding("context_growth", tuple(s.step_id for s in turns), wasted, summary, evidence,
                  tuple((s.start_ms + reference, s.start_ms + reference + e) for s, e in excess),
                  confidence=confidence, confidence_reason=reason)
