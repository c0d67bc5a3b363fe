"""One number for one quantity on a page (issue #27, item 2): every percentile the overview, the
latency page and the releases pages show for one filter agrees, a value read from the rollups'
histogram is marked "≈" with its bound (in its tooltip and on the page), and the exact figures
of the release comparison are not marked."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import quote

import numpy as np
import pytest
from django.contrib.auth import get_user_model

from analysis import rollups
from analysis.dashboard.charts import fmt_ms
from tests.analysis.factories import T0, make_task
from tests.browser.conftest import screenshot, skip_without_chromium

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAIT_MS = 30_000
BOUND = "±1.9 %"


@pytest.fixture
def member(project):
    user = get_user_model().objects.create_user("ana", password="secret-pw")
    project.members.add(user)
    return user


@pytest.fixture
def durations(project) -> dict[str, np.ndarray]:
    """Two releases of one agent, every task a turn of its release's one session, rolled up."""
    rng = np.random.default_rng(27)
    out: dict[str, list[float]] = {"v1": [], "v2": []}
    for i in range(300):
        release = "v1" if i % 2 else "v2"
        ms = round(float(rng.lognormal(8.3, 0.8)), 1)
        out[release].append(ms)
        make_task(project, f"t{i}", release=release, duration_ms=ms, session_id=f"s-{release}",
                  start=T0 + timedelta(seconds=20 * i))
    rollups.rollups_rebuild()
    return {release: np.array(values) for release, values in out.items()}


def log_in(page, live_server, next_path: str) -> None:
    page.goto(f"{live_server.url}/login/?next={quote(next_path)}")
    page.fill("#id_username", "ana")
    page.fill("#id_password", "secret-pw")
    page.click("section.login button[type=submit]")
    page.wait_for_url(re.compile(re.escape(live_server.url) + re.escape(next_path.split("?")[0])))


def kpi(page, label: str) -> str:
    return page.locator(f"section.kpis:not(#turn-time) .kpi:has(span:text-is('{label}')) b").text_content().strip()


def cells(row, first: int, last: int) -> list:
    """The row's numeric cells first..last (0-based among its td.num)."""
    return [row.locator("td.num").nth(i) for i in range(first, last + 1)]


def approximate(cell) -> str:
    """The cell's text, checking it is marked approximate with the bound in its tooltip."""
    text = cell.text_content().strip()
    assert text.startswith("≈"), text
    title = cell.evaluate("e => ((e.matches('.approx') ? e : e.querySelector('.approx')) || {}).title || ''")
    assert BOUND in title, text
    return text


def test_the_overview_shows_one_p50_p95_p99_for_one_filter(live_server, browser_page, member, durations):
    page = browser_page
    log_in(page, live_server, "/?project=acme&release=v1")
    page.wait_for_selector("#turn-time:not([hidden])", timeout=WAIT_MS)
    for q in ("p50", "p95", "p99"):
        tile = kpi(page, q)
        turn = page.locator(f"#turn-time b[data-field={q}]").text_content().strip()
        assert tile == turn, (q, tile, turn)  # the same tasks: every task is a turn of a session
        approximate(page.locator(f"section.kpis:not(#turn-time) .kpi:has(span:text-is('{q}')) b"))
        approximate(page.locator(f"#turn-time b[data-field={q}]"))
    agent_p95 = page.locator("#culprit-agents tbody tr td.num").first.text_content().strip()
    assert agent_p95 == kpi(page, "p95")  # one agent: its p95 is the tiles'
    assert BOUND in page.text_content("main")  # the bound is on the page, not only in tooltips
    assert page.errors == [], page.errors
    screenshot(page, "percentiles-overview")


def test_the_latency_page_shows_one_p50_for_one_filter(live_server, browser_page, member, durations):
    page = browser_page
    log_in(page, live_server, "/latency?project=acme&release=v1&group_by=session")
    tasks = [c.text_content().strip() for c in cells(page.locator("#task-percentiles tbody tr").first, 1, 4)]
    session = [c.text_content().strip() for c in cells(page.locator("#group-percentiles tbody tr").first, 1, 4)]
    assert tasks == session, (tasks, session)  # one session holds every task of v1
    for cell in cells(page.locator("#task-percentiles tbody tr").first, 1, 4):
        approximate(cell)
    page.goto(f"{live_server.url}/?project=acme&release=v1")
    assert [kpi(page, q) for q in ("p50", "p95", "p99")] == [tasks[0], tasks[2], tasks[3]]
    assert BOUND in page.text_content("main")
    assert page.errors == [], page.errors


def test_releases_mark_the_bucketed_percentiles_and_compare_shows_the_exact_ones(
        live_server, browser_page, member, durations):
    page = browser_page
    log_in(page, live_server, "/releases?project=acme")
    exact = {r: (float(np.quantile(v, 0.5)), float(np.quantile(v, 0.95))) for r, v in durations.items()}
    for release, (p50, p95) in exact.items():
        row = page.locator(f"table.releases-table tbody tr:has(td b:text-is('{release}'))")
        shown = [approximate(cell) for cell in cells(row, 1, 2)]
        for text, value in zip(shown, (p50, p95), strict=True):
            seconds = float(re.search(r"[\d.]+", text).group()) * 1000
            assert abs(seconds - value) <= 0.0194 * value + 5, (release, text, value)  # ±1.9 % (+ the shown rounding)
    assert BOUND in page.text_content("main")
    page.goto(f"{live_server.url}/releases/compare?project=acme&a=v1&b=v2")
    overall = page.locator("tr.overall td.num").nth(1).text_content()
    assert fmt_ms(exact["v1"][0]) in overall and fmt_ms(exact["v2"][0]) in overall, overall
    assert "≈" not in overall
    assert page.errors == [], page.errors
