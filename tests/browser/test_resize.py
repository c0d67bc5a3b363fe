"""Charts survive window resizes: every Plotly chart of every page with charts keeps a real
height and its traces drawn while the window shrinks, grows and comes back, and after a
full-page screenshot (which resizes the window mid-shot). Issue #27 item 1: each resize used to
collapse every chart to ~12 px, and they stayed collapsed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ingest.models import Device, Release, ResourceSample, Task
from tests.analysis.factories import T0
from tests.browser.conftest import ARTIFACTS, scroll_through, skip_without_chromium
from tests.browser.test_compare_sessions import agent_run, member, workload  # noqa: F401
from tests.browser.test_dashboard import assert_nothing_ran, log_in

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000
SIZES = [(1440, 900), (800, 600), (1920, 1080), (1440, 900)]
MIN_HEIGHT = 100  # the smallest chart any builder asks for: top findings with one row, 108 px

# Each chart: its drawn height, the height its figure asked for, its container's height, and how
# many marks its traces drew (SVG paths of bars, lines and points, or a WebGL canvas).
MEASURE = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
    const svg = gd.querySelector('.main-svg');
    const marks = [...gd.querySelectorAll('.trace path')].filter(p => (p.getAttribute('d') || '').length > 3).length
        + gd.querySelectorAll('.gl-container canvas').length;
    return {id: gd.id, height: svg ? svg.getBoundingClientRect().height : 0,
            asked: (gd.layout || {}).height || null, container: gd.getBoundingClientRect().height,
            marks: marks, traces: (gd.data || []).length};
})"""


@pytest.fixture
def pages(project, workload):  # noqa: F811
    """A workload (25 runs of v3, sessions) plus a few runs of v2 to compare releases, and the
    GPU's telemetry for the devices page and the waterfall's device lane."""
    for i in range(6):
        agent_run(project, f"old-{i}", start=T0 + timedelta(minutes=50 + i), llm2_ms=900.0)
    Task.objects.filter(task_id__startswith="old-").update(release="v2")
    Release.objects.get_or_create(project=project, name="v2", defaults={"first_seen": T0, "last_seen": T0})
    Device.objects.create(project=project, name="gpu-h100-02", vendor="nvidia", hardware="H100",
                          first_seen=T0, last_seen=T0)
    ResourceSample.objects.bulk_create([
        ResourceSample(project=project, device="gpu-h100-02", ts=T0 + timedelta(minutes=m), utilization=0.6,
                       queue_depth=float(m % 5), temperature_c=60.0 + m % 3, throttled=0) for m in range(60)])
    return [("/", "overview"), ("/latency?group_by=kind", "latency"), ("/devices", "devices"),
            ("/tasks/slow-one", "task"), ("/tasks/slow-one/compare?against=run-03", "compare"),
            ("/sessions/sess-2", "session"), ("/releases/compare?a=v2&b=v3", "releases")]


def charts_drawn(page, expected: int) -> None:
    page.wait_for_function(f"""() => {{
        const gds = [...document.querySelectorAll('.js-plotly-plot')];
        return gds.length >= {expected} && gds.every(gd => gd.querySelector('.main-svg'));
    }}""", timeout=WAIT_MS)


def assert_charts_whole(charts, where: str) -> None:
    assert charts, f"no chart on {where}"
    for c in charts:
        label = f"{c['id']} on {where}"
        assert c["height"] >= MIN_HEIGHT, f"{label} collapsed to {c['height']:.0f} px"
        if c["asked"]:
            assert abs(c["height"] - c["asked"]) <= 2, f"{label} is {c['height']:.0f} px, its figure asks {c['asked']}"
        assert c["container"] >= c["height"] - 2, f"{label} overflows its container ({c['container']:.0f} px)"
        if c["traces"]:
            assert c["marks"] > 0, f"{label} drew none of its {c['traces']} traces"


def test_every_chart_keeps_its_height_and_traces_through_resizes(live_server, browser_page, member, pages):  # noqa: F811
    page = browser_page
    log_in(page, live_server)
    for path, name in pages:
        page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
        page.goto(live_server.url + path)
        scroll_through(page)  # the devices page draws its lower charts when they come near
        page.wait_for_load_state("networkidle")
        expected = page.locator(".chart").count()
        charts_drawn(page, 1)
        page.wait_for_timeout(300)  # a page's other charts follow its first
        before = page.evaluate(MEASURE)
        assert len(before) >= min(expected, 1)
        assert_charts_whole(before, f"{name} as drawn")
        for width, height in SIZES[1:]:
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(500)  # Plotly's resize handler is debounced
            assert_charts_whole(page.evaluate(MEASURE), f"{name} at {width}×{height}")
        # A full-page screenshot grows the window to the page's height mid-shot, then restores it.
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"resize-{name}.png"), full_page=True)
        page.wait_for_timeout(500)
        after = page.evaluate(MEASURE)
        assert_charts_whole(after, f"{name} after a full-page screenshot")
        assert len(after) == len(before)
    assert_nothing_ran(page)
