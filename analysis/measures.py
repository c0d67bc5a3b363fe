"""One definition of each quantity several rooms compute: time per output token, a failed
status, a step's baseline key and the percentile aggregate. Where a quantity is needed both in
SQL and in Python, both are built here from one statement of it (docs/analysis.md, "TPOT").

The bottom of analysis/: nothing here imports another analysis module."""

from __future__ import annotations

from collections.abc import Sequence

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


class PercentileCont(Aggregate):
    """percentile_cont(ARRAY[fractions]) WITHIN GROUP (ORDER BY expr) → an array of floats, the
    interpolated percentiles (numpy's default definition); NULL values are left out. The
    fractions are our own constants, formatted as numbers, never user input."""

    function = "percentile_cont"
    template = "%(function)s(ARRAY[%(fractions)s]::float8[]) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, fractions: Sequence[float], **extra):
        text = ",".join(repr(float(f)) for f in fractions)
        super().__init__(expression, fractions=text, output_field=ArrayField(FloatField()), **extra)
