"""The servers and devices page in Chromium: the grouped verdicts read as sentences, the small
multiples draw a line per device in each chart, the server-side breakdown and the ECDFs draw,
hostile device names stay text, and a hardware finding on the task page opens its server's charts
at that moment with the call's window shaded. Screenshots in test-artifacts/."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from analysis.models import Finding
from ingest.models import Device, ResourceSample
from tests.analysis.factories import T0, analyse, make_step, make_task
from tests.browser.conftest import ARTIFACTS, screenshot, scroll_through, skip_without_chromium
from tests.browser.test_dashboard import assert_nothing_ran, log_in, member  # noqa: F401

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000
SERVER, GPUS = "vllm-2:8000", ("GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-1111-2222-3333-444444444444")
XSS_SERVER = '<img src=x onerror="window.pwned=1">:8000'
SPIKE = T0 + timedelta(minutes=90)


@pytest.fixture
def fleet(project):
    """Two hosts over three hours of one-minute samples: vllm-2 (a server, two GPUs) whose queue
    floods at 90 min, and a server with a hostile name. Three calls queued during the flood, one
    of them with the server's own request span."""
    Device.objects.create(project=project, name=SERVER, host="vllm-2", role="server", first_seen=T0, last_seen=T0)
    Device.objects.create(project=project, name=XSS_SERVER, host="evil", role="server", first_seen=T0, last_seen=T0)
    for g in GPUS:
        Device.objects.create(project=project, name=g, host="vllm-2", role="gpu", vendor="nvidia", hardware="H100",
                              first_seen=T0, last_seen=T0)
    rows = []
    for m in range(180):
        ts = T0 + timedelta(minutes=m)
        flood = 90 <= m < 97
        rows.append(ResourceSample(project=project, device=SERVER, ts=ts, queue_depth=40.0 if flood else 1.0,
                                   batch_size=16.0 if flood else 6.0, kv_cache_usage=0.9 if flood else 0.4))
        rows.append(ResourceSample(project=project, device=XSS_SERVER, ts=ts, queue_depth=2.0, batch_size=3.0))
        for g in GPUS:
            rows.append(ResourceSample(project=project, device=g, ts=ts, sm_clock_mhz=1900.0, sm_clock_max_mhz=1980.0,
                                       power_w=500.0 + m % 7, temperature_c=60.0, extra={"power_limit_w": 700.0}))
    ResourceSample.objects.bulk_create(rows)
    for i in range(3):
        task = make_task(project, f"q{i}", start=SPIKE + timedelta(minutes=2 * i), duration_ms=3000.0)
        make_step(task, "chat", kind="llm", device=SERVER, duration_ms=2500.0, ttft_ms=1900.0, output_tokens=61)
        make_step(task, "srv", parent="chat", kind="other", name="llm_request", device=SERVER, offset_ms=10.0,
                  duration_ms=2480.0, attributes={"agentops.serving": {
                      "queue_ms": 1700.0, "prefill_ms": 150.0, "ttft_ms": 1850.0, "decode_ms": 630.0, "e2e_ms": 2480.0}})
        Finding.objects.create(project=project, task=task, kind="hardware_queueing", step_ids=["chat"], wasted_ms=1600.0,
                               summary="chat took 2.5 s because its server was saturated", task_started_at=task.started_at,
                               release=task.release, evidence={"device": SERVER, "verdict": "queueing",
                                                               "evidence": ["40 requests waiting vs a usual 1"]})
        analyse(task, kinds=["hardware_queueing"], wasted_ms=1600.0)
    other = make_task(project, "calm", start=T0 + timedelta(minutes=10))
    make_step(other, "chat", kind="llm", device=XSS_SERVER, duration_ms=800.0, ttft_ms=200.0, output_tokens=31)


def drawn_lines(page, chart: str) -> int:
    return page.evaluate(f"""() => [...document.querySelectorAll('{chart} .scatterlayer .trace path.js-line')]
        .filter(p => (p.getAttribute('d') || '').length > 10).length""")


def test_the_page_reads_as_incidents_and_draws_every_device(live_server, browser_page, member, fleet):  # noqa: F811
    page = browser_page
    log_in(page, live_server)
    started = time.perf_counter()
    page.goto(f"{live_server.url}/devices")
    scroll_through(page)
    page.wait_for_selector("body[data-charts-ready='1']", timeout=WAIT_MS)
    ready_s = time.perf_counter() - started
    incident = page.inner_text("#verdict-groups tbody tr")
    assert f"3 calls queued on {SERVER} between {SPIKE:%b %d %H:%M} and" in incident
    assert "40 requests waiting vs a usual 1" in incident
    # server: waiting, running, KV cache; each GPU: clock + max, power + limit, temperature;
    # the other server: waiting, running
    assert drawn_lines(page, "#chart-telemetry") == 3 + 2 * 5 + 2
    legend = page.evaluate("() => [...document.querySelectorAll('#chart-telemetry .legendtext')].map(t => t.textContent)")
    assert SERVER in legend and "GPU-aaaaaaaa…" in legend
    assert any(t.startswith('<img src=x onerror="window.pwned=1">') for t in legend)  # the hostile name as text
    assert page.locator("#chart-serving .trace.bars .point path").count() >= 3
    assert drawn_lines(page, "#chart-ttft") == 2
    assert "1.7 s" in page.inner_text("#serving-table")  # the server's queue, next to the client's TTFT
    # The time zone is said once per column, under the lowest host's row: captioned under every
    # chart it sat between the next host's heading and its charts, as the title of the row below.
    captions = page.evaluate("""() => { const l = document.getElementById('chart-telemetry').layout;
        return Object.keys(l).filter(k => /^xaxis\\d*$/.test(k)).map(k => [k, (l[k].title || {}).text || '',
            l[(l[k].anchor || 'y').replace(/^y/, 'yaxis')].domain[0]]); }""")
    lowest = min(bottom for _, _, bottom in captions)
    assert [k for k, text, _ in captions if text] == [k for k, _, bottom in captions if bottom == lowest]
    assert all(text == "(UTC)" for _, text, bottom in captions if bottom == lowest), captions
    screenshot(page, "devices-page")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "devices-timing.json").write_text(json.dumps({"navigation_to_charts_drawn_s": round(ready_s, 3)}))

    with page.expect_navigation():
        page.click("#verdict-groups a.chart-link")
    scroll_through(page)
    page.wait_for_selector("body[data-charts-ready='1']", timeout=WAIT_MS)
    assert "device=vllm-2" in page.url and "mark_from=" in page.url
    assert page.locator("#chart-telemetry .shapelayer path").count() >= 1  # the incident, shaded
    assert page.locator("#device-table tbody.host").count() == 1  # only its host
    screenshot(page, "devices-incident")
    assert_nothing_ran(page)


def test_charts_below_the_fold_are_drawn_when_the_reader_comes_near_them(live_server, browser_page, member, fleet):  # noqa: F811
    """The 36 small multiples took a browser ~0.8 s to lay out before anyone could see them: the
    page draws them (and the charts under them) once the reader scrolls near, not at load."""
    page = browser_page
    log_in(page, live_server)
    page.set_viewport_size({"width": 1440, "height": 300})
    page.goto(f"{live_server.url}/devices")
    page.wait_for_load_state("networkidle")  # the telemetry has arrived, and waits
    assert page.locator("#chart-telemetry .main-svg").count() == 0
    assert page.get_attribute("body", "data-charts-ready") is None
    page.locator("#telemetry h2").scroll_into_view_if_needed()
    page.mouse.wheel(0, 200)
    page.wait_for_selector("#chart-telemetry[data-drawn='1'] .main-svg", timeout=WAIT_MS)
    assert drawn_lines(page, "#chart-telemetry") == 3 + 2 * 5 + 2
    scroll_through(page)
    page.wait_for_selector("body[data-charts-ready='1']", timeout=WAIT_MS)
    assert drawn_lines(page, "#chart-ttft") == 2
    assert_nothing_ran(page)


def test_a_hardware_finding_opens_its_server_at_that_moment(live_server, browser_page, member, fleet):  # noqa: F811
    page = browser_page
    log_in(page, live_server)
    page.goto(f"{live_server.url}/tasks/q1")
    with page.expect_navigation():  # the devices page's own scripts listen for the scroll
        page.click("#findings-table a.device-link")
    scroll_through(page)
    page.wait_for_selector("body[data-charts-ready='1']", timeout=WAIT_MS)
    assert page.url.split("?")[0].endswith("/devices")
    assert drawn_lines(page, "#chart-telemetry") == 3 + 2 * 5
    assert page.locator("#chart-telemetry .shapelayer path").count() >= 1
    assert "queued on vllm-2:8000" in page.inner_text("#verdict-groups")
    assert_nothing_ran(page)
