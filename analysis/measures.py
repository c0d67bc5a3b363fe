"""One definition of each quantity several rooms compute: time per output token, a failed
status, a step's baseline key and the percentile (SQL, ORM and Python forms). Where a quantity is needed both in
SQL and in Python, both are built here from one statement of it (docs/analysis.md, "TPOT").

The bottom of analysis/: nothing here imports another analysis module."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from django.contrib.postgres.fields import ArrayField
from django.db.models import Aggregate, F, FloatField, Func

from ingest.records import FAILED_STATUSES

# --- time per output token -------------------------------------------------------------------


def _tpot(duration: str, ttft: str, output_tokens: str) -> str:
    """TPOT in SQL over three column expressions: decode time (duration − TTFT, at least 0) over
    the intervals between output tokens; NULL without a TTFT or with fewer than two tokens."""
    return (f"CASE WHEN {ttft} IS NOT NULL AND {output_tokens} > 1"
            f" THEN greatest({duration} - {ttft}, 0) / ({output_tokens} - 1)::float8 END")


def tpot_expr(duration: str, ttft: str, output_tokens: str) -> str:
    """TPOT in SQL over any three expressions (e.g. a server's decode time with a TTFT of 0)."""
    return _tpot(duration, ttft, output_tokens)


def tpot_sql(alias: str) -> str:
    """TPOT of the step rows aliased `alias` (columns duration_ms, ttft_ms, output_tokens)."""
    return _tpot(f"{alias}.duration_ms", f"{alias}.ttft_ms", f"{alias}.output_tokens")


class Tpot(Func):
    """TPOT of a Step queryset's rows, as an ORM expression: the SQL of tpot_sql."""

    output_field = FloatField()

    def __init__(self):
        super().__init__(F("duration_ms"), F("ttft_ms"), F("output_tokens"))

    def as_sql(self, compiler, connection, **extra_context):
        # The sources are plain columns: their SQL has no parameters to repeat.
        columns = [compiler.compile(expression)[0] for expression in self.get_source_expressions()]
        return _tpot(*columns), []


def tpot_ms(*, duration_ms: float, ttft_ms: float | None, output_tokens: int | None) -> float | None:
    """TPOT of one step in Python, as _tpot computes it in SQL."""
    if ttft_ms is None or output_tokens is None or output_tokens <= 1:
        return None
    return max(duration_ms - ttft_ms, 0.0) / (output_tokens - 1)


# --- prefill tokens --------------------------------------------------------------------------
#
# The prompt tokens a server had to prefill: its input tokens less those it read from its prompt
# cache (a cached prefix is not computed again), never below zero; NULL without input tokens.


def prefill_tokens_sql(alias: str) -> str:
    """Prefill tokens of the step rows aliased `alias` (columns input_tokens, cached_tokens)."""
    return f"greatest({alias}.input_tokens - coalesce({alias}.cached_tokens, 0), 0)::float8"


def prefill_tokens(*, input_tokens: int | None, cached_tokens: int | None) -> int | None:
    """Prefill tokens of one step in Python, as prefill_tokens_sql computes them."""
    if input_tokens is None:
        return None
    return max(input_tokens - (cached_tokens or 0), 0)


# --- failed ----------------------------------------------------------------------------------

# `<status column> IN ('error', 'timeout')`: the statuses are our constants, not input.
FAILED_SQL = "IN (" + ", ".join(f"'{status}'" for status in FAILED_STATUSES) + ")"


# --- baseline key ----------------------------------------------------------------------------

# A step's baseline is that of (kind, key): the key is the field named here for its kind, or
# its name when the kind has none or the field is empty (an LLM step without a model).
BASELINE_KEY_FIELDS = {"llm": "model", "tool": "tool_name"}


def baseline_key(step) -> str:
    """The baseline key of one step (anything with kind, name, model and tool_name) in Python,
    as baseline_key_sql computes it in SQL."""
    field = BASELINE_KEY_FIELDS.get(step.kind)
    return (getattr(step, field) if field else "") or step.name


def baseline_key_sql(alias: str) -> str:
    """The baseline key of the step rows aliased `alias`."""
    cases = " ".join(f"WHEN {alias}.kind = '{kind}' THEN coalesce(nullif({alias}.{field}, ''), {alias}.name)"
                     for kind, field in BASELINE_KEY_FIELDS.items())
    return f"CASE {cases} ELSE {alias}.name END"


# --- percentiles -----------------------------------------------------------------------------
#
# One definition, PostgreSQL's percentile_cont: the q-quantile (0 ≤ q ≤ 1) of n sorted values
# x[0] ≤ … ≤ x[n−1] sits at rank h = q·(n − 1) and is x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])
# (linear interpolation between the order statistics around h: Hyndman & Fan's type 7, numpy's
# "linear"). Its forms, side by side: `percentile_cont_sql` (SQL text), `PercentileCont` (the ORM
# aggregate of the same SQL), `percentiles` (numpy, Python) and `percentile_rank` (the rank and
# weight, for a reader that holds order statistics some other way: the rollups' histogram,
# analysis/rollups/histograms.py, whose order statistics are bucket middles, so its percentiles are
# within RELATIVE_ERROR of this definition; the pages mark them "≈" with that bound).


def percentile_rank(q: float, n: int) -> tuple[int, float]:
    """(k, t): the q-quantile of n sorted values is x[k] + t·(x[k+1] − x[k]) (x[k] when t is 0)."""
    h = q * (n - 1)
    k = int(math.floor(h))
    return k, h - k


def percentiles(values, fractions: Sequence[float] | float, *, axis=None):
    """The Python form: numpy's linear quantiles (exactly percentile_cont) at each fraction (0..1)."""
    return np.quantile(np.asarray(values, dtype=float), fractions, axis=axis, method="linear")


def _fractions_sql(fractions: Sequence[float] | float) -> str:
    if isinstance(fractions, (int, float)):
        return repr(float(fractions))
    return "ARRAY[" + ",".join(repr(float(f)) for f in fractions) + "]::float8[]"


def percentile_cont_sql(expression: str, fractions: Sequence[float] | float) -> str:
    """The SQL form over an expression: a float for one fraction, an array of floats for a
    sequence. The fractions are our own constants, formatted as numbers, never user input."""
    return f"percentile_cont({_fractions_sql(fractions)}) WITHIN GROUP (ORDER BY {expression})"


class PercentileCont(Aggregate):
    """The ORM form: percentile_cont_sql over a queryset's expression → an array of floats (NULL
    values are left out)."""

    function = "percentile_cont"
    template = "%(function)s(%(fractions)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, fractions: Sequence[float], **extra):
        super().__init__(expression, fractions=_fractions_sql(list(fractions)),
                         output_field=ArrayField(FloatField()), **extra)
