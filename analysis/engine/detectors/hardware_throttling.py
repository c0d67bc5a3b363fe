"""hardware_throttling: a slow LLM step whose GPU was throttling (DCGM clock-event reasons, SM clock far under its normal, the native throttle flag, or hot and slow) while it ran. The verdict and its thresholds live in
`analysis.engine.verdicts`; wasted = the step's excess over its token-aware expectation."""

from analysis.engine.detectors.base import register
from analysis.engine.verdicts import hardware_findings


@register("hardware_throttling")
def detect(ctx):
    yield from hardware_findings(ctx, "throttling")
