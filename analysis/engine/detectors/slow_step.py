"""slow_step: a step far above its own baseline.

Non-LLM steps: log-scale modified z of the duration against the (kind, name) baseline > 4 (Z_SLOW)
(see detectors.base: latencies are right-skewed) and at least 20 % / 100 ms over the median (see verdicts for why); wasted = duration −
median. A call whose arguments recur, or whose release made its key slower, where those calls
usually take longer than the key does (the baseline's `args` and `releases`: the whole test
suite, not one file; a regressed release), is judged again against them: a bigger job, or a
release's own slowdown, is not a slow call (no finding with 20 runs of them or more, possible
with fewer). LLM steps use the token-aware expectation of `verdicts.llm_slowness`
and carry the hardware verdict; those whose verdict is `queueing`/`throttling` are reported
as hardware findings instead (the cause is known), so the same step is never counted twice.
No baseline with at least MIN_BASELINE_COUNT samples → no finding (cold start is silent). An LLM
step whose own device has too few calls of its model is judged against the model's calls on other
devices, whose hardware may differ: low confidence ("possible"). So is an LLM step whose run was
slow as a whole: when the task's other calls of the same model and device (at least
RUN_SHIFT_MIN_CALLS) ran, by their median, at least 20 % over their usual, and this call is not
slow beyond that shared factor (by the same floors), what slowed it slowed the run (the client,
its network, its host), and the step alone is only possibly the place to look.
Failed steps are skipped: their duration measures the failure, not slowness; so are agent
steps and unclassified (`other`) steps with steps below them (made of their children), framework
steps (overhead is serial_gap's) and the spans of a model call's own request (judged through it).
"""

from __future__ import annotations

from analysis.engine.detectors.base import (
    CONFIDENT_BASELINE_COUNT,
    MIN_BASELINE_COUNT,
    Z_SLOW,
    Finding,
    GroupStats,
    TaskContext,
    baseline_confidence,
    canonical_args,
    log_z,
    register,
)
from analysis.engine.verdicts import MIN_EXCESS_MS, MIN_EXCESS_RATIO, llm_expected_ms
from analysis.units import fmt_ms

HARDWARE_VERDICTS = {"queueing", "throttling", "kv_cache_pressure"}
# An agent step is made of its children; framework time is serial_gap's (one home per ms).
SKIPPED_KINDS = ("agent", "framework")
# The fewest other calls of a model in a run whose median says the run itself was slow: one could
# be a second outlier; two agreeing are a shift.
RUN_SHIFT_MIN_CALLS = 2


def run_shift(ctx: TaskContext, step) -> tuple[float, int] | None:
    """(median of duration / usual, how many) over the task's other ok calls of the step's model
    on its device that have a baseline; None with fewer than RUN_SHIFT_MIN_CALLS of them."""
    ratios = []
    for other in ctx.steps:
        if (other.step_id == step.step_id or other.kind != "llm" or other.status != "ok"
                or other.key != step.key or other.device != step.device):
            continue
        stats = ctx.baseline(other)
        if stats is not None:
            ratios.append(other.duration_ms / llm_expected_ms(other, stats))
    if len(ratios) < RUN_SHIFT_MIN_CALLS:
        return None
    ratios.sort()
    mid = len(ratios) // 2
    return (ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2), len(ratios)


@register("slow_step")
def detect(ctx: TaskContext):
    parents = {s.parent_step_id for s in ctx.steps if s.parent_step_id}
    for step in ctx.steps:
        if step.status != "ok" or step.kind in SKIPPED_KINDS:
            continue
        if step.kind == "other" and step.step_id in parents:
            # An unclassified span with spans below it (a graph node, a loop turn, a plain wrapper the
            # app made) is made of them, as an agent step is: the slow one below is the finding.
            continue
        if step.kind != "llm" and (step.serving is not None or ctx.is_transport(step)):
            # A span of a model call's own request (the server's span, the HTTP client span between):
            # the call is judged once, through the client's step, whose verdict reads its timings.
            continue
        if step.kind == "llm":
            verdict = ctx.verdicts.get(step.step_id)
            if verdict is None or verdict["verdict"] in HARDWARE_VERDICTS:
                continue
            wasted = verdict["excess_ms"]
            seen = "; ".join(verdict.get("evidence") or ())
            why = {"prefill_bound": f"{seen or 'the prompt was unusually long'}; the device was nominal",
                   "decode_bound": f"{seen}; the device was nominal",
                   "nominal": "the device was nominal"}[verdict["verdict"]]
            summary = (f"{step.label} on {step.device or 'its device'} took {fmt_ms(step.duration_ms)}, "
                       f"{fmt_ms(wasted)} over the usual {fmt_ms(verdict['expected_ms'])}: {why}.")
            stats = ctx.baseline(step)
            confidence, reason = baseline_confidence(stats.count if stats else 0, what=f"calls of {step.key}")
            own = ctx.own_device_count(step)
            if own is not None:
                # The same model on other hardware is another normal (an H100's time per token is
                # several times an LPU's): a call judged by those is only possibly slow.
                confidence = "low"
                reason = (f"Possible: {step.device} has served only {own:,} calls of {step.key}, so this one "
                          f"was judged against its calls on other devices, whose hardware may differ.")
            shift = run_shift(ctx, step)
            if shift is not None and shift[0] >= 1 + MIN_EXCESS_RATIO:
                factor, calls = shift
                shared = verdict["expected_ms"] * factor
                beyond = step.duration_ms - shared
                if beyond < max(MIN_EXCESS_MS, MIN_EXCESS_RATIO * shared):
                    confidence = "low"
                    reason = (f"Possible: the run's other {calls} calls of {step.key} were {factor:.1f}× their "
                              f"usual too, and this one is {fmt_ms(max(beyond, 0.0))} over that: what slowed it "
                              f"slowed the whole run (the client, its network or host), not this call alone.")
            yield Finding("slow_step", (step.step_id,), wasted, summary, {**verdict},
                          ((step.end_ms - wasted, step.end_ms),), confidence=confidence, confidence_reason=reason)
            continue
        stats = ctx.baseline(step)
        if stats is None or not _slow(step.duration_ms, stats.median_ms, stats.spread("duration")):
            continue
        z = log_z(step.duration_ms, stats.median_ms, stats.spread("duration"))
        wasted = step.duration_ms - stats.median_ms
        summary = (f"{step.kind} {step.label} took {fmt_ms(step.duration_ms)}, usually "
                   f"{fmt_ms(stats.median_ms)}; {fmt_ms(wasted)} slower than its baseline.")
        evidence = {"duration_ms": round(step.duration_ms, 1), "baseline_median_ms": round(stats.median_ms, 1),
                    "baseline_mad_ms": round(stats.mad_ms, 1), "baseline_p99_ms": stats.p99_ms,
                    "baseline_count": stats.count, "z": round(z, 2)}
        confidence, reason = baseline_confidence(stats.count, what=f"runs of {step.label}")
        group = _group_of(ctx, step, stats)
        if group is not None:
            # Its arguments recur, or its release made the key slower, and those calls usually take
            # longer than the key does (a bigger job, a regression): slow only if slow for them.
            same, whose = group
            evidence.update(group_median_ms=round(same.median_ms, 1), group_runs=same.runs, group=whose)
            if _slow(step.duration_ms, same.median_ms, same.log_mad):
                wasted = step.duration_ms - same.median_ms
                evidence["z"] = round(log_z(step.duration_ms, same.median_ms, same.log_mad), 2)
                summary = (f"{step.kind} {step.label} took {fmt_ms(step.duration_ms)}; {whose} it "
                           f"usually takes {fmt_ms(same.median_ms)}: {fmt_ms(wasted)} slower.")
                if same.runs < MIN_BASELINE_COUNT:
                    # Under 20 runs a median and MAD are too unstable to call anything an outlier
                    # (MIN_BASELINE_COUNT), and the key's own verdict is what the group overrules.
                    confidence = "low"
                    reason = (f"Possible: {whose} {step.label} has only {same.runs} runs (median "
                              f"{fmt_ms(same.median_ms)}), too few to be sure this one is slow for them.")
                elif same.runs < CONFIDENT_BASELINE_COUNT:
                    confidence, reason = baseline_confidence(same.runs, what=f"runs of {step.label} {whose}")
            elif same.runs >= MIN_BASELINE_COUNT:
                continue
            else:
                confidence = "low"
                reason = (f"Possible: {whose} {step.label} took {fmt_ms(same.median_ms)} at the median in "
                          f"{same.runs} runs, so this may be {_WHY[whose]}, not a slow call.")
        yield Finding("slow_step", (step.step_id,), wasted, summary, evidence,
                      ((step.end_ms - wasted, step.end_ms),), confidence=confidence, confidence_reason=reason)


_ARGS, _RELEASE = "with these arguments", "in this release"
_WHY = {_ARGS: "a bigger job", _RELEASE: "the release's own slowdown (see the release comparison)"}


def _group_of(ctx: TaskContext, step, stats) -> tuple[GroupStats, str] | None:
    """The calls a step is judged against instead of its key's, when its key's baseline has
    them: those with the same arguments, else those of its task's release."""
    if stats.args and step.tool_args is not None:
        same = stats.args.get(canonical_args(step.tool_args))
        if same is not None:
            return same, _ARGS
    if stats.releases and ctx.release in stats.releases:
        return stats.releases[ctx.release], _RELEASE
    return None


def _slow(duration_ms: float, usual_ms: float, log_mad: float | None) -> bool:
    """Far above the usual on the log scale (z > Z_SLOW) and by at least 20 % and 100 ms."""
    return (log_z(duration_ms, usual_ms, log_mad) > Z_SLOW
            and duration_ms - usual_ms >= max(MIN_EXCESS_MS, MIN_EXCESS_RATIO * usual_ms))
