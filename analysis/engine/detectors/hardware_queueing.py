"""hardware_queueing: a slow LLM step whose device was saturated (queue depth or utilisation far above its own normal) while it ran. The verdict and its thresholds live in
`analysis.engine.verdicts`; wasted = the step's excess over its token-aware expectation."""

from analysis.engine.detectors.base import register
from analysis.engine.verdicts import hardware_findings


@register("hardware_queueing")
def detect(ctx):
    yield from hardware_findings(ctx, "queueing")
