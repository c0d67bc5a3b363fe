"""Numbers and units in Chromium (issue #27 item 5): the JavaScript duration and value formats
give exactly what analysis/units.py gives; log axes tick at 1-2-5 steps in that format (no
"2 5 10k"); alerts read "30 s", never "3.000e+4 ms" or "30000.0"; every timestamp says its zone
and the top bar's switch shows them in local time, remembered across pages."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from analysis.alerts.models import AlertEvent, AlertRule
from analysis.units import fmt_ms, fmt_value
from tests.analysis.factories import T0, make_step, make_task
from tests.analysis.test_units import DURATION_CASES, VALUE_CASES
from tests.browser.conftest import screenshot, skip_without_chromium
from tests.browser.test_dashboard import assert_nothing_ran, log_in, member  # noqa: F401

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000
E_NOTATION = re.compile(r"\de[+-]?\d|\d\.\d{3}e")


@pytest.fixture
def tasks(project):
    for i in range(30):
        t = make_task(project, f"t{i:02d}", duration_ms=150.0 * 1.25 ** i, start=T0 + timedelta(minutes=i))
        make_step(t, "root", kind="agent", duration_ms=t.duration_ms)
    return project


def test_javascript_formats_durations_and_values_as_python_does(live_server, browser_page, member, tasks):  # noqa: F811
    page = browser_page
    log_in(page, live_server, "/tasks")
    durations = page.evaluate("cases => cases.map(ms => window.agentops.fmtMs(ms))", [ms for ms, _ in DURATION_CASES])
    assert durations == [text for _, text in DURATION_CASES] == [fmt_ms(ms) for ms, _ in DURATION_CASES]
    values = page.evaluate("cases => cases.map(c => window.agentops.fmtValue(c[0], c[1]))",
                           [[v, u] for v, u, _ in VALUE_CASES])
    assert values == [text for _, _, text in VALUE_CASES] == [fmt_value(v, u) for v, u, _ in VALUE_CASES]


def tick_labels(page, chart: str, axis: str) -> list[str]:
    return page.eval_on_selector_all(f"{chart} .{axis}tick text", "els => els.map(e => e.textContent)")


def test_log_axes_tick_at_1_2_5_steps_in_the_duration_format(live_server, browser_page, member, tasks):  # noqa: F811
    page = browser_page
    log_in(page, live_server, "/latency")
    page.wait_for_selector("body[data-charts-ready='1']", timeout=WAIT_MS)
    labels = tick_labels(page, "#chart-task_ecdf", "x")
    assert labels and all(re.fullmatch(r"\d+ (ms|s)", t) for t in labels), labels
    assert "500 ms" in labels and "1 s" in labels and "10 s" in labels
    histogram = tick_labels(page, "#chart-task_histogram", "x")
    assert "1 s" in histogram and not any("k" in t for t in histogram), histogram
    page.goto(f"{live_server.url}/")
    page.wait_for_selector("#chart-percentiles .ytick text", timeout=WAIT_MS)
    percentiles = tick_labels(page, "#chart-percentiles", "y")
    assert percentiles and all(re.fullmatch(r"\d+ (ms|s)", t) for t in percentiles), percentiles
    assert_nothing_ran(page)


def test_alerts_write_durations_like_every_page(live_server, browser_page, member, tasks):  # noqa: F811
    now = datetime.now(tz=UTC)
    rule = AlertRule.objects.create(project=tasks, name="checkout p95", metric="task_duration_p95", threshold=30_000.0,
                                    min_samples=1, state=AlertRule.FIRING, last_value=20_000.0, last_sample_count=30,
                                    last_evaluated_at=now)
    AlertEvent.objects.create(rule=rule, state="firing", previous_state="ok", value=20_000.0, threshold=30_000.0,
                              sample_count=30, window_start=now - timedelta(minutes=10), window_end=now, at=now)
    page = browser_page
    log_in(page, live_server, "/alerts/")
    listing = page.inner_text("main")
    assert "30 s" in listing and "20 s" in listing
    assert not E_NOTATION.search(listing) and "30000" not in listing and "20000.0" not in listing
    page.goto(f"{live_server.url}/alerts/{rule.pk}/")
    page.wait_for_selector("#alert-chart .main-svg", timeout=WAIT_MS)
    detail = page.inner_text("main")
    assert "above 30 s" in detail and "20 s" in detail
    assert not E_NOTATION.search(detail) and "30000" not in detail
    legend = page.text_content("#alert-chart .legend")
    assert "threshold 30 s" in legend and not E_NOTATION.search(legend)
    assert all(re.fullmatch(r"\d+(\.\d+)? (ms|s)", t) for t in tick_labels(page, "#alert-chart", "y"))
    # the form's live preview too
    page.goto(f"{live_server.url}/alerts/{rule.pk}/edit")
    page.wait_for_function("document.getElementById('preview-status').textContent.startsWith('Now')", timeout=WAIT_MS)
    status = page.inner_text("#preview-status")
    assert not E_NOTATION.search(status), status
    assert_nothing_ran(page)


def test_timestamps_say_their_zone_and_switch_to_local_time(live_server, chromium, member, tasks):  # noqa: F811
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True,
                                   timezone_id="Asia/Kolkata")  # UTC+05:30, no daylight saving
    page = context.new_page()
    page.dialogs, page.errors = [], []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    try:
        log_in(page, live_server, "/tasks")
        first = page.inner_text("#task-table tbody tr:last-child time")
        assert first == "2026-11-01 10:00:00 UTC" or first.endswith(" UTC"), first
        started = {el for el in page.eval_on_selector_all("#task-table time", "els => els.map(e => e.textContent)")}
        assert all(t.endswith(" UTC") for t in started)
        page.click("#tz-switch")
        local = page.inner_text("#task-table tbody tr:last-child time")
        assert local.endswith("GMT+5:30"), local
        assert page.inner_text("#tz-switch") == "times: local (GMT+5:30)"
        # remembered: another page opens in local time, its charts' date axes say so
        page.goto(f"{live_server.url}/tasks/t00")
        assert page.inner_text(".facts time").endswith("GMT+5:30")
        page.goto(f"{live_server.url}/")
        page.wait_for_selector("#chart-volume .main-svg", timeout=WAIT_MS)
        title = page.evaluate("document.getElementById('chart-volume').layout.xaxis.title.text")
        assert "GMT+5:30" in title
        x0 = page.evaluate("document.getElementById('chart-volume').data[0].x[0]")
        assert x0.startswith("2026-11-01 15:30"), x0  # T0 = 10:00 UTC
        screenshot(page, "units-local-time")
        page.click("#tz-switch")
        page.wait_for_load_state("load")
        page.goto(f"{live_server.url}/tasks")
        assert page.inner_text("#task-table tbody tr:last-child time").endswith(" UTC")
        assert page.errors == []
    finally:
        context.close()


def test_the_waterfall_time_axis_ticks_in_the_duration_format_as_it_zooms(live_server, browser_page, member, tasks):  # noqa: F811
    page = browser_page
    log_in(page, live_server, "/tasks/t29")  # a 97 s task
    page.wait_for_selector("body[data-waterfall-ready='1']", timeout=WAIT_MS)
    page.wait_for_function("document.getElementById('chart-waterfall').layout.xaxis.tickmode === 'array'", timeout=WAIT_MS)
    labels = tick_labels(page, "#chart-waterfall", "x")
    assert labels and all(re.fullmatch(r"\d+ (ms|s)", t) for t in labels) and "20 s" in labels, labels
    page.evaluate("Plotly.relayout('chart-waterfall', {'xaxis.range': [0, 1000]})")  # zoom to the first second
    page.wait_for_function("document.getElementById('chart-waterfall').layout.xaxis.ticktext.includes('200 ms')",
                           timeout=WAIT_MS)
    labels = tick_labels(page, "#chart-waterfall", "x")
    assert "200 ms" in labels and "1 s" in labels, labels
    assert_nothing_ran(page)
