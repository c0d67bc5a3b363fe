"""Pure statistics for comparing the latency of two releases: percentiles, a bootstrap confidence
interval on the difference of a percentile, the Mann-Whitney U test (on values, or on counts per
ordered bin), and a verdict in words.

No database here: numbers in, numbers out (the percentile is analysis.measures' one definition),
so every figure the Releases page shows can be checked against scipy or by hand.

Choices, and why:
- Percentiles are the one definition of analysis.measures (linear interpolation between order
  statistics, PostgreSQL's `percentile_cont`), so a percentile computed in SQL and one computed
  here agree.
- The confidence interval is a percentile bootstrap of p(B) − p(A), 2,000 resamples per side,
  from a seeded `numpy.random.Generator`: the same data always gives the same interval. Each
  resample's percentile is drawn directly from its exact bootstrap distribution through the
  order statistics of uniforms (see `_bootstrap_deviations`), vectorised over resamples: the
  cost no longer grows with the sample, so a 20,000-task sample costs what a 200-task one does.
  `tests/releases/test_stats.py` checks it against `scipy.stats.bootstrap`.
- Huge inputs: the caller passes a uniform random sample (capped, see compare.SAMPLE_CAP) and
  the true task count. A percentile's spread shrinks like 1/sqrt(n), so deviations from a
  sample of m are scaled by sqrt(m / n): the interval has the width of the full data. Without
  a population the scale is 1 and this is the ordinary bootstrap.
- A release regressed when p50 or p95 grew by at least the threshold (10 % by default) and its
  interval excludes zero. Judging two percentiles at once doubles the chances of a fluke, so
  each interval is at level 1 − alpha/2 (Bonferroni): the false-alarm rate stays at most alpha.
  The Mann-Whitney U p-value is reported next to it: it asks whether one release's tasks tend to
  take longer at all, a question about the whole distribution rather than one percentile.
- Below `MIN_SAMPLES` tasks on either side no verdict is given: a p95 from 15 tasks is the
  second-slowest task, and no interval built from it deserves trust. p99 needs about 100 tasks
  before one task lies above it, hence a separate warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats

from analysis import measures
from analysis.units import fmt_ms

PERCENTILES = (50, 90, 95, 99)
# A regression is judged on the typical task (p50) and the tail users notice (p95); p90 and p99
# are shown. Two percentiles judged at once → Bonferroni: each interval at 1 − alpha/2.
HEADLINE_PERCENTILES = (50, 95)
RESAMPLES = 2000
MIN_SAMPLES = 20
DEFAULT_THRESHOLD_PCT = 10.0
DEFAULT_ALPHA = 0.05


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation; None for no values."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return None
    return float(measures.percentiles(data, q / 100))


def percentiles(values, qs: Sequence[float] = PERCENTILES) -> dict[int, float | None]:
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return {int(q): None for q in qs}
    return {int(q): float(v) for q, v in zip(qs, measures.percentiles(data, [q / 100 for q in qs]), strict=True)}


def _bootstrap_deviations(sample: np.ndarray, qs: Sequence[float], *, rng: np.random.Generator,
                          resamples: int, population: int) -> np.ndarray:
    """Each resample's percentiles minus the sample's own, scaled to a population of
    `population` values. `sample` must be sorted. Shape (len(qs), resamples).

    A resample of n draws with replacement from the sorted sample x is x[floor(U · n)] for n
    uniforms U, so its k-th smallest value is x[floor(U_(k) · n)], where U_(k) ~ Beta(k, n−k+1)
    is the k-th order statistic of n uniforms, and the next one is U_(k) + (1 − U_(k)) · Beta(1, n−k).
    Drawing those two per resample gives each percentile exactly the distribution it has under
    the index-matrix bootstrap, in O(resamples) instead of O(resamples × n)."""
    n = sample.size
    scale = np.sqrt(n / max(population, n))
    out = np.empty((len(qs), resamples))
    for i, q in enumerate(qs):
        j, frac = measures.percentile_rank(q / 100.0, n)
        lower_u = rng.beta(j + 1, n - j, size=resamples)
        lower = sample[np.minimum((lower_u * n).astype(np.int64), n - 1)]
        if frac > 0 and j + 1 < n:
            upper_u = lower_u + (1 - lower_u) * rng.beta(1, n - j - 1, size=resamples)
            upper = sample[np.minimum((upper_u * n).astype(np.int64), n - 1)]
            out[i] = lower + frac * (upper - lower)
        else:
            out[i] = lower
    centre = measures.percentiles(sample, [q / 100 for q in qs])[:, None]
    return (out - centre) * scale


def percentile_difference(a: np.ndarray, b: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """p_q(B) − p_q(A) for each q (0..100)."""
    fractions = [q / 100 for q in qs]
    return measures.percentiles(b, fractions) - measures.percentiles(a, fractions)


def bootstrap_percentile_diff(a, b, *, qs: Sequence[float] = PERCENTILES, level: float = 0.95,
                              resamples: int = RESAMPLES, seed: int = 0,
                              population_a: int | None = None, population_b: int | None = None,
                              estimate: Sequence[float] | None = None) -> np.ndarray:
    """Confidence intervals of p_q(B) − p_q(A) for each q: an array of shape (len(qs), 2).

    `population_a/b` are the true task counts when `a`/`b` are random samples of a larger
    release; `estimate` is the exact difference (e.g. from SQL) to centre the interval on,
    defaulting to the samples' own difference."""
    xa = np.sort(np.asarray(a, dtype=float))
    xb = np.sort(np.asarray(b, dtype=float))
    if xa.size == 0 or xb.size == 0:
        return np.full((len(qs), 2), np.nan)
    rng = np.random.default_rng(seed)
    dev_a = _bootstrap_deviations(xa, qs, rng=rng, resamples=resamples,
                                  population=population_a or xa.size)
    dev_b = _bootstrap_deviations(xb, qs, rng=rng, resamples=resamples,
                                  population=population_b or xb.size)
    centre = (np.asarray(estimate, dtype=float) if estimate is not None
              else percentile_difference(xa, xb, qs))
    tail = (1 - level) / 2 * 100
    spread = measures.percentiles(dev_b - dev_a, [tail / 100, 1 - tail / 100], axis=1).T
    return centre[:, None] + spread


def mann_whitney_p(a, b) -> float | None:
    """Two-sided Mann-Whitney U p-value (scipy, asymptotic with tie correction for large
    samples); None when a side is empty or every value is identical."""
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        return None
    if np.all(xa == xa[0]) and np.all(xb == xa[0]):
        return 1.0
    return float(scipy_stats.mannwhitneyu(xa, xb, alternative="two-sided").pvalue)


def mann_whitney_binned_p(a, b) -> float | None:
    """Two-sided Mann-Whitney U p-value of two samples given as counts per ordered bin (every
    value of a bin tied): the normal approximation with tie and continuity correction, exactly
    what scipy's asymptotic method gives for the bin indices themselves. None when a side is
    empty; 1.0 when every value falls in one bin."""
    ca = np.asarray(a, dtype=float)
    cb = np.asarray(b, dtype=float)
    n1, n2 = ca.sum(), cb.sum()
    if n1 == 0 or n2 == 0:
        return None
    ties = ca + cb
    total = n1 + n2
    mid_ranks = np.cumsum(ties) - (ties - 1) / 2
    u = float((ca * mid_ranks).sum() - n1 * (n1 + 1) / 2)
    variance = n1 * n2 / 12 * ((total + 1) - float((ties ** 3 - ties).sum()) / (total * (total - 1)))
    if variance <= 0:
        return 1.0
    z = max(abs(u - n1 * n2 / 2) - 0.5, 0.0) / variance ** 0.5
    return float(min(1.0, 2 * scipy_stats.norm.sf(z)))


@dataclass(frozen=True)
class Verdict:
    """`label` is one of: regressed, improved, slower (significant, under the threshold),
    faster (likewise), no significant change, insufficient data."""

    label: str
    text: str
    regressed: bool
    improved: bool
    significant: bool
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Change:
    """One percentile of release A and B with the confidence interval of B − A."""

    q: int
    before: float | None
    after: float | None
    ci: tuple[float, float] | None

    @property
    def pct(self) -> float:
        delta = self.after - self.before
        return 100.0 * delta / self.before if self.before > 0 else (0.0 if delta == 0 else float("inf"))

    @property
    def significant(self) -> bool:
        return (self.ci is not None and not np.isnan(self.ci[0])
                and (self.ci[0] > 0 or self.ci[1] < 0))

    def text(self) -> str:
        return f"p{self.q} {fmt_ms(self.before)} → {fmt_ms(self.after)} ({self.pct:+.1f}%)"


def interval_level(alpha: float, tests: int = len(HEADLINE_PERCENTILES)) -> float:
    """Confidence level of each interval so that judging `tests` percentiles at once keeps the
    false-alarm rate at alpha (Bonferroni)."""
    return 1 - alpha / tests


def verdict(*, n_a: int, n_b: int, changes: Sequence[Change], p_value: float | None,
            threshold_pct: float = DEFAULT_THRESHOLD_PCT, alpha: float = DEFAULT_ALPHA,
            min_samples: int = MIN_SAMPLES) -> Verdict:
    """Whether the headline percentiles moved from release A to B, in words. `changes` carry
    intervals at `interval_level(alpha, len(changes))`.

    Regressed = at least `min_samples` tasks on both sides, and some headline percentile grew by
    at least `threshold_pct` percent with its interval above zero. A regression anywhere wins
    over an improvement elsewhere: this verdict exists to catch slowdowns."""
    warnings = []
    if n_a < 100 or n_b < 100:
        warnings.append(f"p99 rests on fewer than 100 tasks ({min(n_a, n_b)}); treat it as rough")
    if (n_a < min_samples or n_b < min_samples
            or any(c.before is None or c.after is None for c in changes)):
        warnings.insert(0, f"too few tasks for a verdict: {n_a} vs {n_b} (need {min_samples} each)")
        return Verdict("insufficient data", "Not enough tasks to tell.", False, False, False, warnings)
    level = f"{100 * (1 - alpha):g}%"
    p_text = f"; Mann-Whitney p = {p_value:.3g}" if p_value is not None else ""
    moved = ", ".join(c.text() for c in changes)
    slower = [c for c in changes if c.significant and c.after > c.before]
    faster = [c for c in changes if c.significant and c.after < c.before]
    if not slower and not faster:
        return Verdict("no significant change",
                       f"No significant change: {moved}; every interval includes zero{p_text}.",
                       False, False, False, warnings)
    if slower:
        beyond = [c for c in slower if c.pct >= threshold_pct]
        label = "regressed" if beyond else "slower"
        shown = beyond or slower
    else:
        beyond = [c for c in faster if -c.pct >= threshold_pct]
        label = "improved" if beyond else "faster"
        shown = beyond or faster
    word = {"regressed": "Regressed", "slower": "Slightly slower", "improved": "Improved",
            "faster": "Slightly faster"}[label]
    qualifier = "" if beyond else f" (under the {threshold_pct:g}% threshold)"
    text = (f"{word}: {', '.join(c.text() for c in shown)}{qualifier}, significant at {level} "
            f"over {' and '.join(f'p{c.q}' for c in changes)}{p_text}.")
    return Verdict(label, text, label == "regressed", label == "improved", True, warnings)
