"""hardware_throttling: a slow LLM step whose device was throttling (throttled flag, or hot and slow) while it ran. The verdict and its thresholds live in
`analysis.hardware_correlation`; wasted = the step's excess over its token-aware expectation."""

from analysis.detectors.base import register
from analysis.hardware_correlation import hardware_findings


@register("hardware_throttling")
def detect(ctx):
    yield from hardware_findings(ctx, "throttling")
