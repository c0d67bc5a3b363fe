"""One way to write a duration, a metric value and a timestamp (analysis/units.py). The same
cases are given to the JavaScript twin in static/js/app.js by tests/browser/test_units.py."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from analysis.units import fmt_ms, fmt_signed_ms, fmt_ts, fmt_value, linear_ticks, log_ticks

# (ms, text): ms below 1 s, s from 1 s, up to three significant digits, no trailing zeros.
DURATION_CASES = [
    (None, "–"), (0, "0 ms"), (0.42, "0.42 ms"), (4.2, "4.2 ms"), (9.996, "10 ms"), (12.34, "12.3 ms"),
    (250, "250 ms"), (999.4, "999 ms"), (999.6, "1 s"), (1000, "1 s"), (1234, "1.23 s"), (1500, "1.5 s"),
    (9996, "10 s"), (18_500, "18.5 s"), (20_000, "20 s"), (30_000, "30 s"), (99_960, "100 s"),
    (125_000, "125 s"), (-10_941.9, "-10.9 s"),
]
# (value, unit, text): an alert's value in its unit, never in e-notation.
VALUE_CASES = [
    (30_000.0, "ms", "30 s"), (20_000, "ms", "20 s"), (12.4, "ms/token", "12.4 ms/token"),
    (4.234, "%", "4.2 %"), (12, "% change", "+12.0 % change"), (-3.24, "% change", "-3.2 % change"),
    (1234.5, "calls", "1,234.5 calls"), (None, "ms", "–"),
]


@pytest.mark.parametrize(("ms", "text"), DURATION_CASES)
def test_a_duration_reads_in_ms_below_a_second_and_in_seconds_above(ms, text):
    assert fmt_ms(ms) == text


def test_a_duration_that_is_not_a_number_reads_as_a_dash():
    assert fmt_ms(math.nan) == fmt_ms(math.inf) == "–"


def test_a_difference_carries_its_sign():
    assert [fmt_signed_ms(v) for v in (1200, -340, 0, None)] == ["+1.2 s", "−340 ms", "+0 ms", "–"]


@pytest.mark.parametrize(("value", "unit", "text"), VALUE_CASES)
def test_an_alert_value_reads_in_its_unit_without_e_notation(value, unit, text):
    assert fmt_value(value, unit) == text


def test_log_ticks_step_1_2_5_and_read_like_every_other_duration():
    ticks = log_ticks(120, 30_000)
    assert ticks["tickvals"] == [200, 500, 1000, 2000, 5000, 10_000, 20_000]
    assert ticks["ticktext"] == ["200 ms", "500 ms", "1 s", "2 s", "5 s", "10 s", "20 s"]
    # a narrow range still gets a tick either side; a wide one a tick per decade
    assert log_ticks(900, 1100)["ticktext"] == ["500 ms", "1 s", "2 s"]
    assert log_ticks(0.5, 5e6)["ticktext"] == ["1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s", "1000 s"]


def test_linear_ticks_start_at_zero_at_a_round_step():
    assert linear_ticks(2400)["ticktext"] == ["0 ms", "500 ms", "1 s", "1.5 s", "2 s", "2.5 s"]
    assert linear_ticks(0) == {}


def test_a_timestamp_is_written_in_utc_and_says_so():
    paris = timezone(timedelta(hours=1))
    at = datetime(2026, 11, 30, 15, 2, 7, 123456, tzinfo=paris)
    assert fmt_ts(at) == "2026-11-30 14:02:07 UTC"
    assert fmt_ts(at, "ms") == "2026-11-30 14:02:07.123 UTC"
    assert fmt_ts(at, "minute") == "2026-11-30 14:02 UTC"
    assert fmt_ts(at, "short") == "Nov 30 14:02 UTC"
    assert fmt_ts(datetime(2026, 1, 2, tzinfo=UTC), "time") == "00:00:00 UTC"
    assert fmt_ts(None) == "–"
