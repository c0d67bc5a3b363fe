"""How durations and timestamps read, everywhere: pages, chart ticks and hover text, finding
summaries, alert messages, the command line. One definition here and its twin in
static/js/app.js (`agentops.fmtMs`); tests/analysis/test_units.py holds the cases both must
give (docs/ui.md, "Numbers and units")."""

from __future__ import annotations

import math
from datetime import UTC, datetime

DASH = "–"
MINUS = "−"


def fmt_ms(ms: float | None) -> str:
    """A duration given in ms: ms below 1 s, seconds from 1 s, up to three significant digits
    without trailing zeros ("0.42 ms", "4.2 ms", "250 ms", "1 s", "1.23 s", "18.5 s", "125 s")."""
    if ms is None or (isinstance(ms, float) and not math.isfinite(ms)):
        return DASH
    if ms == 0:
        return "0 ms"
    sign, ms = ("-" if ms < 0 else ""), abs(ms)
    # Round first, then pick the unit: 999.7 ms is "1.00 s", not "1000 ms".
    if round(ms) < 1000:
        value, unit = ms, "ms"
    else:
        value, unit = ms / 1000, "s"
    # Three significant digits (at most two decimals), counted after rounding: 9.996 is "10".
    digits = 2 if round(value, 2) < 10 else 1 if round(value, 1) < 100 else 0
    text = f"{value:.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{sign}{text} {unit}"


def fmt_signed_ms(ms: float | None) -> str:
    """A difference: "+1.20 s", "−340 ms" (a true minus sign)."""
    if ms is None:
        return DASH
    return ("+" if ms >= 0 else MINUS) + fmt_ms(abs(ms))


def fmt_value(value: float | None, unit: str) -> str:
    """A metric's value with its unit, never in e-notation: durations through fmt_ms
    ("20.0 s"), "ms/token" likewise ("12.5 ms/token"), percentages with one decimal ("4.2 %",
    "+12.0 % change"), anything else with up to three decimals ("1,234.5")."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return DASH
    if unit == "ms":
        return fmt_ms(value)
    if unit == "ms/token":
        return fmt_ms(value) + "/token"
    if unit == "% change":
        return f"{value:+.1f} % change"
    if unit == "%":
        return f"{value:.1f} %"
    text = f"{value:,.3f}".rstrip("0").rstrip(".")
    return f"{text} {unit}".strip()


def linear_ticks(high: float, *, count: int = 6) -> dict:
    """Ticks for a linear axis of durations in ms from 0 to `high`: about `count` of them at a
    1-2-5 step, labelled by fmt_ms. A Plotly axis dict fragment."""
    high = float(high or 0)
    if high <= 0:
        return {}
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    values = [i * step for i in range(int(high // step) + 2)]
    return {"tickmode": "array", "tickvals": values, "ticktext": [fmt_ms(v) for v in values]}


def log_ticks(low: float, high: float) -> dict:
    """Ticks for a log axis of durations in ms from `low` to `high`: 1-2-5 steps, labelled by
    fmt_ms ("10 ms 20 ms 50 ms 100 ms … 1.00 s 2.00 s"); every decade when the range spans
    more than six of them. A Plotly axis dict fragment: tickvals, ticktext, tickmode."""
    low, high = max(float(low or 0), 0.01), max(float(high or 0), 0.01)
    if high < low:
        low, high = high, low
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1,) if last - first > 6 else (1, 2, 5)
    values = [m * 10 ** e for e in range(first, last + 1) for m in steps]
    inside = [v for v in values if low / 1.001 <= v <= high * 1.001]
    if len(inside) < 2:  # a narrow range: the ticks either side of it
        below = [v for v in values if v < low] or [values[0]]
        above = [v for v in values if v > high] or [values[-1]]
        inside = [below[-1], *inside, above[0]]
    return {"tickmode": "array", "tickvals": inside, "ticktext": [fmt_ms(v) for v in inside]}


# How much of the instant a timestamp shows; static/js/app.js writes the same in local time.
TS_FORMATS = {"second": "%Y-%m-%d %H:%M:%S", "minute": "%Y-%m-%d %H:%M", "ms": "%Y-%m-%d %H:%M:%S.%f",
              "time": "%H:%M:%S", "short": "%b %d %H:%M"}


def fmt_ts(value: datetime | None, precision: str = "second") -> str:
    """A timestamp in UTC, saying so: "2026-11-30 14:02:07 UTC" (`precision`: second, minute,
    ms, time, short). Pages mark it up with the instant (templatetags `ts`) so the UTC/local
    switch can show it in local time."""
    if value is None:
        return DASH
    text = value.astimezone(UTC).strftime(TS_FORMATS.get(precision, TS_FORMATS["second"]))
    return (text[:-3] if precision == "ms" else text) + " UTC"
