"""release_compare on rows built to a known answer: one tool got slower, and the comparison
must say so, name it first, and leave the unchanged task name alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from analysis import rollups
from analysis.models import Finding, TaskAnalysis
from analysis.releases.attribution import REST_KEY
from analysis.releases.compare import UnknownRelease, release_compare, release_list
from analysis.releases.scope import CompareFilters
from ingest.models import Device, Step, Task
from tests.releases.conftest import T0, make_release

pytestmark = pytest.mark.django_db


def by_name(report):
    return {row["name"]: row for row in report["tasks"]}


def test_the_slower_task_name_is_flagged_and_the_unchanged_one_is_not(two_releases):
    report = release_compare(project=two_releases, a="v1", b="v2").report
    rows = by_name(report)
    assert report["regressed"] is True
    assert rows["checkout"]["regressed"] and rows["checkout"]["label"] == "regressed"
    assert not rows["refund"]["regressed"]
    assert rows["refund"]["label"] in ("no significant change", "slower", "faster")
    assert report["tasks"][0]["name"] == "checkout"
    p95 = next(p for p in rows["checkout"]["percentiles"] if p["q"] == 95)
    assert p95["ci_low_ms"] > 0 and p95["ci_low_ms"] <= p95["delta_ms"] <= p95["ci_high_ms"]
    assert rows["checkout"]["p_value"] < 1e-6


def test_sql_percentiles_equal_numpy_on_the_same_tasks(two_releases):
    report = release_compare(project=two_releases, a="v1", b="v2").report
    durations = np.array(Task.objects.filter(release="v2", name="checkout")
                         .values_list("duration_ms", flat=True))
    for p in by_name(report)["checkout"]["percentiles"]:
        assert p["b_ms"] == pytest.approx(np.percentile(durations, p["q"]))


def test_top_attribution_row_names_the_tool_that_got_slower(two_releases):
    attribution = release_compare(project=two_releases, a="v1", b="v2").report["attribution"]
    top = attribution["steps"][0]
    assert top["key"] == "tool:fetch_invoice"
    # 140 tasks, 80 of which gained ~300 ms in fetch_invoice.
    assert top["contribution_ms"] == pytest.approx(300 * 80 / 140, rel=0.15)
    assert top["share_b"] > top["share_a"]
    assert top["p50_b_ms"] == pytest.approx(2 * top["p50_a_ms"], rel=0.15)
    assert attribution["tools"][0]["key"] == "fetch_invoice"
    assert attribution["kinds"][0]["key"] == "tool"
    # The wrapping agent step is not blamed for its children's time.
    agent = next(r for r in attribution["steps"] if r["key"] == "agent:run")
    assert abs(agent["contribution_ms"]) < 5
    total = sum(r["contribution_ms"] for r in attribution["steps"])
    assert total == pytest.approx(attribution["within_delta_ms"])
    assert total + attribution["mix_ms"] == pytest.approx(attribution["mean_delta_ms"])
    assert any(r["key"] == REST_KEY for r in attribution["steps"])


def test_finding_rates_budget_and_whatif_by_release(two_releases):
    report = release_compare(project=two_releases, a="v1", b="v2").report
    repeated = next(r for r in report["findings"] if r["kind"] == "repeated_tool_call")
    # Only checkout tasks (80 per release) were analysed: 4 of them in v1, 16 in v2.
    assert repeated["rate_a"] == pytest.approx(4 / 80)
    assert repeated["rate_b"] == pytest.approx(16 / 80)
    assert repeated["summary"] == "repeated_tool_call went from 5% to 20% of tasks"
    budget = {r["category"]: r for r in report["budget"]}
    assert report["budget"][0]["category"] == "tool"
    assert budget["tool"]["delta_ms"] == pytest.approx(300, rel=0.15)
    assert budget["framework"]["mean_a_ms"] == pytest.approx(20.0)
    whatif = {r["scenario"]: r for r in report["whatif"]}
    assert report["whatif"][0]["scenario"] in ("hardware groq", "hardware groq + fixes")
    assert whatif["hardware groq"]["tasks_a"] == 80
    assert whatif["hardware groq"]["saved_a_ms"] == pytest.approx(200, rel=0.15)
    assert whatif["cached"]["saved_b_ms"] == 0
    assert "unknown_hardware" not in whatif  # a fact about the path, not a scenario to compare
    summary = {r["metric"]: r for r in report["summary"]}
    assert summary["tool calls per task"]["a"] == pytest.approx(2.0)
    assert summary["tasks"]["a"] == 140


def test_low_confidence_findings_count_in_no_finding_rate_or_wasted_time_rolled_up_or_raw(two_releases):
    v2 = list(Task.objects.filter(project=two_releases, release="v2", name="checkout").order_by("started_at"))
    expected = sum(Finding.objects.filter(task__in=v2, kind="repeated_tool_call").values_list("wasted_ms", flat=True))
    Finding.objects.bulk_create(
        [Finding(project=two_releases, task=t, kind="parallelizable_calls", step_ids=["search", "fetch"],
                 wasted_ms=500.0, summary="search and fetch_invoice ran one after the other",
                 confidence=Finding.CONFIDENCE_LOW, confidence_reason="possible: no call ids or data flow",
                 release="v2", task_started_at=t.started_at) for t in v2]
        + [Finding(project=two_releases, task=t, kind="repeated_tool_call", step_ids=["search"], wasted_ms=90.0,
                   summary="search again?", confidence=Finding.CONFIDENCE_LOW, release="v2",
                   task_started_at=t.started_at) for t in v2[1::5]])  # tasks without a sure repeat
    raw = release_compare(project=two_releases, a="v1", b="v2").report
    rollups.rollups_rebuild()
    cache.clear()
    rolled = release_compare(project=two_releases, a="v1", b="v2").report
    assert_same(_figures(raw), _figures(rolled))
    for report in (raw, rolled):
        assert [r["kind"] for r in report["findings"]] == ["repeated_tool_call"]
        repeated = report["findings"][0]
        assert repeated["rate_b"] == pytest.approx(16 / 80)
        assert repeated["wasted_per_task_b_ms"] == pytest.approx(expected / 80)
    with connection.cursor() as cursor:  # the rolled-up wasted time itself
        cursor.execute("SELECT key, sum(sum_ms) FROM analysis_group_rollup WHERE dimension = 'finding'"
                       " AND release = 'v2' GROUP BY key")
        assert dict(cursor.fetchall()) == {"repeated_tool_call": pytest.approx(expected)}


def test_filters_narrow_both_releases(two_releases):
    make_release(two_releases, "v2", 40, name="checkout", environment="staging", fetch_ms=5000.0, seed=9)
    prod = release_compare(project=two_releases, a="v1", b="v2",
                           filters=CompareFilters(environment="prod", name="checkout")).report
    assert [r["name"] for r in prod["tasks"]] == ["checkout"]
    assert prod["tasks"][0]["n_b"] == 80
    staging = release_compare(project=two_releases, a="v1", b="v2",
                              filters=CompareFilters(environment="staging")).report
    assert staging["overall"]["n_a"] == 0 and staging["overall"]["label"] == "insufficient data"


def test_vendor_filter_keeps_tasks_that_ran_on_that_vendor(project):
    now = datetime(2026, 11, 1, tzinfo=UTC)
    Device.objects.create(project=project, name="groq-lpu-01", vendor="groq", first_seen=now, last_seen=now)
    make_release(project, "v1", 30, seed=1, device="groq-lpu-01")
    make_release(project, "v1", 30, seed=2, name="other", device="h100-01")
    make_release(project, "v2", 30, seed=3, device="groq-lpu-01")
    report = release_compare(project=project, a="v1", b="v2", filters=CompareFilters(vendor="groq")).report
    assert report["overall"]["n_a"] == 30 and [r["name"] for r in report["tasks"]] == ["checkout"]


def test_unknown_or_foreign_release_is_refused(two_releases, other_project):
    with pytest.raises(UnknownRelease) as err:
        release_compare(project=two_releases, a="v1", b="v9")
    assert err.value.param == "b" and "v9" in str(err.value)
    with pytest.raises(UnknownRelease) as err:
        release_compare(project=other_project, a="v1", b="v2")
    assert err.value.param == "a"


def test_release_list_has_volume_p95_and_sparkline(two_releases):
    rows = {r["name"]: r for r in release_list(project=two_releases)}
    assert set(rows) == {"v1", "v2"}
    assert rows["v2"]["tasks"] == 140
    assert rows["v2"]["p95_ms"] > rows["v1"]["p95_ms"]
    assert 1 <= len(rows["v1"]["sparkline"]) <= 20
    assert sum(b["tasks"] for b in rows["v1"]["sparkline"]) == 140



def test_whatif_documents_of_another_shape_are_ignored(two_releases):
    tasks = list(TaskAnalysis.objects.filter(task__release="v2")[:3])
    for analysis, whatif in zip(tasks, ["garbage", [1, 2], {"hardware": 5, "x_ms": "no"}], strict=True):
        analysis.whatif = whatif
        analysis.save()
    rows = {r["scenario"]: r for r in release_compare(project=two_releases, a="v1", b="v2").report["whatif"]}
    assert set(rows) == {"cached", "hardware groq", "hardware groq + fixes"}
    assert rows["hardware groq"]["tasks_b"] == 77


def test_a_repeated_comparison_comes_from_the_cache_until_either_release_changes(two_releases,
                                                                                 django_assert_max_num_queries):
    first = release_compare(project=two_releases, a="v1", b="v2")
    with django_assert_max_num_queries(8):  # the release checks and the data version, not the comparison
        again = release_compare(project=two_releases, a="v1", b="v2")
    assert again.report == first.report
    assert release_compare(project=two_releases, a="v1", b="v2", alpha=0.01).report["alpha"] == 0.01

    # New tasks of v2 (twice as slow again): the next comparison sees them, never the cached one.
    make_release(two_releases, "v2", 40, fetch_ms=1200.0, seed=9, start=T0 + timedelta(days=2),
                 environment="staging", analyze=False)
    fresh = release_compare(project=two_releases, a="v1", b="v2").report
    assert by_name(fresh)["checkout"]["n_b"] == by_name(first.report)["checkout"]["n_b"] + 40
    # A task deleted: the count changes, so the comparison is computed again.
    Task.objects.filter(release="v1", name="refund").first().delete()
    assert by_name(release_compare(project=two_releases, a="v1", b="v2").report)["refund"]["n_a"] == 59


def _figures(report: dict) -> dict:
    """What "where it changed" shows, for comparing two ways of computing it."""
    keep = ("attribution", "budget", "findings", "whatif", "summary", "slower_steps")
    return {k: report[k] for k in keep}


def assert_same(a, b, path="report"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-6), path  # Σx² − n·x̄²: rounding noise
    else:
        assert a == b, path


def rolled_then_raw(project) -> tuple[dict, dict]:
    """v1 vs v2 from the rollups as they stand, then from raw steps only (no watermark)."""
    cache.clear()
    rolled = release_compare(project=project, a="v1", b="v2").report
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM analysis_rollup_state")
    cache.clear()
    return rolled, release_compare(project=project, a="v1", b="v2").report


def test_where_it_changed_from_the_group_rollups_equals_the_raw_steps(two_releases):
    # Tasks after the last refresh (the fresh tail) are read from raw steps beside the rollups.
    raw_first = release_compare(project=two_releases, a="v1", b="v2").report
    assert raw_first["attribution"]["sample"]["sampled"] is False  # 140 tasks: all of them
    rollups.rollups_rebuild()
    cache.clear()
    rolled = release_compare(project=two_releases, a="v1", b="v2").report
    assert_same(_figures(raw_first), _figures(rolled))
    assert rolled["attribution"]["steps"][0]["key"] == "tool:fetch_invoice"

    tail = rollups.hour_floor(rollups.watermark()) + timedelta(minutes=5)
    make_release(two_releases, "v2", 30, fetch_ms=900.0, seed=9, start=tail, repeated_every=2, environment="canary")
    with_tail, raw = rolled_then_raw(two_releases)
    assert with_tail["attribution"]["sample"]["tasks_b"] == 170
    assert_same(_figures(raw), _figures(with_tail))
    assert with_tail["attribution"]["mean_delta_ms"] > rolled["attribution"]["mean_delta_ms"]


def test_a_stale_rollup_hour_is_what_the_comparison_reads_until_the_next_refresh(two_releases):
    # Proof that the comparison reads the rollups and not raw steps: a change to an hour that was
    # already rolled up shows after the refresh, as documented for every rollup reader.
    rollups.rollups_rebuild()
    before = release_compare(project=two_releases, a="v1", b="v2").report
    Step.objects.filter(task__release="v2", name="fetch_invoice").update(duration_ms=10.0)
    Task.objects.filter(release="v2").update(last_event_at=timezone.now())
    cache.clear()
    stale = release_compare(project=two_releases, a="v1", b="v2").report
    assert stale["attribution"]["steps"][0]["key"] == "tool:fetch_invoice"
    assert_same(before["attribution"]["steps"], stale["attribution"]["steps"])
    rollups.rollups_refresh()
    cache.clear()
    fresh = release_compare(project=two_releases, a="v1", b="v2").report
    fetch = next(r for r in fresh["attribution"]["steps"] if r["key"] == "tool:fetch_invoice")
    assert fetch["contribution_ms"] < 0 and fetch["p50_b_ms"] == pytest.approx(10.0, rel=0.02)


def test_a_vendor_filter_samples_raw_steps_and_still_names_the_slower_tool(two_releases):
    rollups.rollups_rebuild()
    Device.objects.create(project=two_releases, name="gpu-0", vendor="nvidia", first_seen=T0, last_seen=T0)
    Step.objects.filter(kind="llm").update(device="gpu-0")
    report = release_compare(project=two_releases, a="v1", b="v2",
                             filters=CompareFilters(vendor="nvidia")).report
    assert report["attribution"]["steps"][0]["key"] == "tool:fetch_invoice"
    assert report["attribution"]["sample"]["tasks_a"] == 140


def test_a_time_range_reads_rolled_up_hours_and_raw_edges_like_raw_steps(two_releases):
    # A range starting mid-hour: whole hours and days from the rollups, the partial hour raw.
    filters = CompareFilters(since=T0 + timedelta(minutes=30))
    raw = release_compare(project=two_releases, a="v1", b="v2", filters=filters).report
    rollups.rollups_rebuild()
    cache.clear()
    rolled = release_compare(project=two_releases, a="v1", b="v2", filters=filters).report
    assert rolled["attribution"]["sample"]["tasks_a"] < 140
    assert_same(_figures(raw), _figures(rolled))


def test_late_tasks_of_an_old_hour_reach_the_release_totals_at_the_next_refresh(two_releases):
    rollups.rollups_rebuild()
    make_release(two_releases, "v1", 40, fetch_ms=50.0, seed=11, environment="canary", start=T0)
    Task.objects.filter(environment="canary").update(last_event_at=timezone.now())  # as ingest stamps it
    rollups.rollups_refresh()
    rolled, raw = rolled_then_raw(two_releases)
    assert rolled["attribution"]["sample"]["tasks_a"] == 180
    assert_same(_figures(raw), _figures(rolled))


def test_an_hour_that_completes_joins_the_release_totals(two_releases):
    # Tasks of the hour in progress are read raw; once the hour is over, the next refresh adds
    # them to the totals even though nothing about them changed.
    now = datetime.now(tz=UTC)
    start = rollups.hour_floor(now)
    make_release(two_releases, "v2", 20, fetch_ms=900.0, seed=12, environment="canary", start=start)
    Task.objects.update(last_event_at=now - timedelta(days=1))  # nothing new for the refresh to see
    TaskAnalysis.objects.update(analyzed_at=now - timedelta(days=1))
    rollups.rollups_rebuild()
    cache.clear()
    live = release_compare(project=two_releases, a="v1", b="v2").report
    rollups.rollups_refresh(now=now + timedelta(hours=1, minutes=1))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT sum(tasks) FROM {rollups.RELEASE_TABLE} WHERE release = 'v2' AND dimension = 'task'")
        assert cursor.fetchone()[0] == 160
    cache.clear()
    later = release_compare(project=two_releases, a="v1", b="v2").report
    assert later["attribution"]["sample"]["tasks_b"] == live["attribution"]["sample"]["tasks_b"] == 160
    assert_same(_figures(live), _figures(later))


def test_release_totals_newer_than_the_watermark_are_not_read(two_releases):
    # A watermark that went back (a refresh run with an earlier clock) must not make the totals'
    # last hour count twice, once from them and once from the raw rows after the watermark.
    now = datetime.now(tz=UTC)
    make_release(two_releases, "v2", 20, fetch_ms=900.0, seed=13, environment="canary",
                 start=rollups.hour_floor(now) - timedelta(hours=1))
    rollups.rollups_rebuild(now=now)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE analysis_rollup_state SET watermark = %s", [now - timedelta(hours=2)])
    rolled, raw = rolled_then_raw(two_releases)
    assert rolled["attribution"]["sample"]["tasks_b"] == 160
    assert_same(_figures(raw), _figures(rolled))
