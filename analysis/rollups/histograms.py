"""The rollups' histogram: fixed log buckets (BINS_PER_DECADE per decade from 0.01 ms to 10^9 ms),
stored sparse, merged by addition, read as percentiles within RELATIVE_ERROR of the exact
percentile_cont (docs/rollups.md, "What is stored": the histogram and its error bound). Pure maths and one SQL
expression: no database access."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from analysis.measures import percentile_rank

BINS_PER_DECADE = 60
LOW_EXP = -2  # 0.01 ms
HIGH_EXP = 9  # 10^9 ms ≈ 11.6 days
TOP_BIN = BINS_PER_DECADE * (HIGH_EXP - LOW_EXP) + 1  # the overflow bucket
NBINS = TOP_BIN + 1
RELATIVE_ERROR = 10 ** (1 / (2 * BINS_PER_DECADE)) - 1  # 1.93 %: half a bucket, which is 3.9 % wide
# How the pages say a percentile came from these buckets (analysis/templatetags/dashboard.py: approx_ms).
APPROXIMATE_BOUND = f"±{RELATIVE_ERROR * 100:.1f} %"
APPROXIMATE_NOTE = (f"approximate: read from the latency histogram (log buckets {(10 ** (1 / BINS_PER_DECADE) - 1) * 100:.1f} %"
                    f" wide), within {APPROXIMATE_BOUND} of the exact percentile")

def bin_sql(column: str) -> str:
    """The bucket of a duration column, in SQL (NULL stays NULL). log() of float8 is base 10."""
    return (f"CASE WHEN {column} IS NULL THEN NULL WHEN {column} < {10.0 ** LOW_EXP!r} THEN 0"
            f" ELSE least({TOP_BIN}, floor({BINS_PER_DECADE} * log({column}) + {-LOW_EXP * BINS_PER_DECADE})::int + 1)"
            f" END")




MIDDLES = np.array([0.0] + [10.0 ** (LOW_EXP + (i - 0.5) / BINS_PER_DECADE) for i in range(1, NBINS)])


@dataclass
class Summary:
    """Merged figures of a set of rows: counts, sum, max, time bounds and the histogram."""

    count: int = 0
    errors: int = 0
    sum_ms: float = 0.0
    max_ms: float | None = None
    first_at: datetime | None = None
    last_at: datetime | None = None
    bins: np.ndarray = field(default_factory=lambda: np.zeros(NBINS, dtype=np.int64))

    def add(self, *, count=0, errors=0, sum_ms=0.0, max_ms=None, first_at=None, last_at=None) -> None:
        self.count += int(count or 0)
        self.errors += int(errors or 0)
        self.sum_ms += float(sum_ms or 0.0)
        if max_ms is not None and (self.max_ms is None or max_ms > self.max_ms):
            self.max_ms = float(max_ms)
        if first_at is not None and (self.first_at is None or first_at < self.first_at):
            self.first_at = first_at
        if last_at is not None and (self.last_at is None or last_at > self.last_at):
            self.last_at = last_at

    def merge(self, other: Summary) -> None:
        self.add(count=other.count, errors=other.errors, sum_ms=other.sum_ms, max_ms=other.max_ms,
                 first_at=other.first_at, last_at=other.last_at)
        self.bins += other.bins

    @property
    def timed(self) -> int:
        """Rows with a duration (the histogram's total)."""
        return int(self.bins.sum())

    def quantiles(self, fractions: Sequence[float]) -> list[float | None] | None:
        """The percentile (analysis.measures: percentile_rank) at each fraction, each order statistic
        replaced by its bucket's middle: within RELATIVE_ERROR; None when nothing is timed."""
        cumulative = np.cumsum(self.bins)
        n = int(cumulative[-1])
        if n == 0:
            return None
        middles = MIDDLES.copy()
        if self.max_ms is not None:
            middles[TOP_BIN] = self.max_ms
        out = []
        for q in fractions:
            k, t = percentile_rank(q, n)
            below = middles[np.searchsorted(cumulative, k, side="right")]
            above = middles[np.searchsorted(cumulative, min(k + 1, n - 1), side="right")]
            value = float(below + t * (above - below))
            out.append(min(value, self.max_ms) if self.max_ms is not None else value)
        return out

    def chart_buckets(self, *, per_decade: int = 10, low_exp: int = -1, high_exp: int = 7) -> dict[int, int]:
        """Counts per bucket of charts.log_edges(per_decade, low_exp, high_exp), numbered like
        SQL width_bucket over those edges (0 below the first edge, len(edges) from the last)."""
        group = BINS_PER_DECADE // per_decade
        last = per_decade * (high_exp - low_exp) + 1
        out: dict[int, int] = defaultdict(int)
        for index in np.nonzero(self.bins)[0]:
            if index == 0:
                chart = 0
            else:
                chart = min(last, max(0, (int(index) - 1 - BINS_PER_DECADE * (low_exp - LOW_EXP)) // group + 1))
            out[chart] += int(self.bins[index])
        return dict(out)
