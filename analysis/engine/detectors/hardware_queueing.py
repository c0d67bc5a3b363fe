"""hardware_queueing: a slow LLM step whose server was saturated (the server span's queue time, waiting requests or utilisation far above their own normal) while it ran. The verdict and its thresholds live in
`analysis.engine.verdicts`; wasted = the step's excess over its token-aware expectation."""

from analysis.engine.detectors.base import register
from analysis.engine.verdicts import hardware_findings


@register("hardware_queueing")
def detect(ctx):
    yield from hardware_findings(ctx, "queueing")
