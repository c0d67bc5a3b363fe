"""hardware_kv_cache_pressure: a slow LLM step whose server ran out of KV cache while it ran
(requests preempted, or the cache nearly full far above its own normal). The verdict and its
thresholds live in `analysis.engine.verdicts`; wasted = the step's excess over its token-aware
expectation."""

from analysis.engine.detectors.base import register
from analysis.engine.verdicts import hardware_findings


@register("hardware_kv_cache_pressure")
def detect(ctx):
    yield from hardware_findings(ctx, "kv_cache_pressure")
