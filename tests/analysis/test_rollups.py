"""Latency rollups: percentiles within the documented error of percentile_cont, idempotent
maintenance, late and moved data, project isolation, and dashboard figures that match the exact
raw queries."""

from __future__ import annotations

import math
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection

from analysis import rollups
from analysis.dashboard import aggregates
from analysis.dashboard.charts import log_edges
from analysis.filters import TaskFilters
from analysis.releases.compare import release_list
from analysis.rollups import histograms
from ingest.models import Device, Release, Step, Task
from ingest.records import Batch, TaskRecord
from ingest.services import batch_store

NOW = datetime.now(tz=UTC)
# Well inside the reconcile window, in whole hours that are over before the test runs.
BASE = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=30)
BOUND = rollups.RELATIVE_ERROR + 1e-9
FRACTIONS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)


def fill(project, *, n=1500, hours=24, seed=0, releases=("v1", "v2"), steps_every=3) -> list[Task]:
    """n tasks spread over `hours` hours from BASE, log-normal durations; every `steps_every`-th
    task gets an LLM and a tool step."""
    rng = np.random.default_rng(seed)
    durations = np.exp(rng.normal(7.0, 1.2, n))
    for r in releases:
        Release.objects.get_or_create(project=project, name=r, defaults={"first_seen": BASE, "last_seen": BASE})
    tasks = Task.objects.bulk_create([
        Task(project=project, task_id=f"t{seed}-{i}", name=("checkout", "support")[i % 2],
             release=releases[i % len(releases)], environment="prod",
             status="error" if i % 40 == 0 else "ok",
             started_at=BASE + timedelta(seconds=float(i) * hours * 3600 / n),
             ended_at=BASE + timedelta(seconds=float(i) * hours * 3600 / n, milliseconds=float(d)),
             duration_ms=float(d), reported=True, last_event_at=NOW - timedelta(hours=1))
        for i, d in enumerate(durations)])
    steps = []
    for i, t in enumerate(tasks[::steps_every]):
        steps.append(Step(project=project, task=t, step_id="llm", kind="llm", name="chat", model=("m1", "m2")[i % 2],
                          device=("gpu-0", "groq-0")[i % 3 == 0], started_at=t.started_at, ended_at=t.ended_at,
                          duration_ms=t.duration_ms * 0.6, ttft_ms=t.duration_ms * 0.6 * (0.1 + (i % 7) / 10),
                          output_tokens=i % 400))
        steps.append(Step(project=project, task=t, step_id="tool", kind="tool", name="search", tool_name="search",
                          started_at=t.started_at, ended_at=t.ended_at, duration_ms=t.duration_ms * 0.3,
                          status="error" if i % 10 == 0 else "ok"))
    Step.objects.bulk_create(steps)
    return tasks


def exact(sql: str, params) -> list[float]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0]


def rollup_rows() -> list[tuple]:
    with connection.cursor() as cur:
        # Sums of floats to the µs: their last bits depend on the order Postgres adds the rows in.
        task_columns = ("project_id, hour, release, environment, name, tasks, errors, round(sum_ms::numeric, 3),"
                        " max_ms, bins, counts, turns, round(turn_sum_ms::numeric, 3), turn_max_ms, turn_bins,"
                        " turn_counts")
        cur.execute(f"SELECT {task_columns} FROM analysis_task_rollup ORDER BY 1, 2, 3, 4, 5")
        tasks = cur.fetchall()
        cur.execute("SELECT project_id, hour, release, environment, kind, name, tool_name, model, device, steps,"
                    " errors, round(sum_ms::numeric, 3), max_ms, bins, counts, ttft_bins, ttft_counts, tpot_bins,"
                    " tpot_counts FROM analysis_step_rollup ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9")
        steps = cur.fetchall()
        cur.execute(f"SELECT {task_columns} FROM analysis_task_rollup_day ORDER BY 1, 2, 3, 4, 5")
        days = cur.fetchall()
        cur.execute("SELECT project_id, hour, release, kind, name, model, device, steps, bins, counts, ttft_bins,"
                    " ttft_counts, tpot_bins, tpot_counts FROM analysis_step_rollup_day ORDER BY 1, 2, 3, 4, 5, 6, 7")
        step_days = cur.fetchall()
        groups = []
        for table in ("analysis_group_rollup", "analysis_group_rollup_day"):
            cur.execute("SELECT project_id, hour, release, environment, task_name, dimension, kind, key, tasks, calls,"
                        " round(sum_ms::numeric, 3), round(sum_sq::numeric, 0), errors, tokens,"
                        f" round(other_ms::numeric, 3), analysed, bins, counts FROM {table} ORDER BY 1, 2, 3, 4, 5, 6, 7, 8")
            groups += cur.fetchall()
        return tasks + steps + days + step_days + groups


def close(estimate, truth) -> bool:
    return abs(estimate - truth) <= BOUND * abs(truth) + 1e-9

def bin_bounds(index: int) -> tuple[float, float]:
    """[low, high) in ms of bucket `index`, from the histogram's definition (docs/rollups.md)."""
    if index <= 0:
        return 0.0, 10.0 ** histograms.LOW_EXP
    low = 10.0 ** (histograms.LOW_EXP + (index - 1) / histograms.BINS_PER_DECADE)
    high = 10.0 ** (histograms.LOW_EXP + index / histograms.BINS_PER_DECADE)
    return low, (math.inf if index >= histograms.TOP_BIN else high)



def same(a, b):
    """`b` (from rollups) has the shape of `a` (raw), every float within the documented error."""
    assert type(a) is type(b)
    if is_dataclass(a):
        a, b = asdict(a), asdict(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, float):
        assert close(b, a), (a, b)
    else:
        assert a == b


@pytest.mark.django_db
def test_every_duration_lands_in_the_bucket_whose_bounds_hold_it():
    values = [0.0, 0.004, 0.01, 0.0123, 1.0, 1.2589, 99.99, 100.0, 1234.5, 86_400_000.0, 999_999_999.0, 5e9]
    with connection.cursor() as cur:
        cur.execute(f"SELECT v, {rollups.bin_sql('v')} FROM unnest(%s::float8[]) v", [values])
        for value, index in cur.fetchall():
            low, high = bin_bounds(index)
            assert low <= value < high, (value, index, low, high)
            assert high == float("inf") or high / max(low, 1e-2) <= 1 + 2.1 * rollups.RELATIVE_ERROR


def test_percentiles_are_within_the_documented_error_of_percentile_cont(project):
    fill(project, n=3000)
    rollups.rollups_refresh()
    summary = rollups.Summary()
    for s in rollups.task_summaries(project=project, filters=TaskFilters()).values():
        summary.merge(s)
    truth = exact("SELECT percentile_cont(%s::float8[]) WITHIN GROUP (ORDER BY duration_ms) FROM ingest_task"
                  " WHERE project_id = %s", [list(FRACTIONS), project.pk])
    estimates = summary.quantiles(FRACTIONS)
    assert summary.count == summary.timed == 3000
    assert all(close(e, t) for e, t in zip(estimates, truth, strict=True)), list(zip(estimates, truth, strict=True))
    # the bound is tight enough to matter: a 5 % regression is not lost in it
    assert rollups.RELATIVE_ERROR < 0.02


def test_a_range_reads_rollups_for_whole_hours_and_exact_rows_at_its_edges(project):
    fill(project, n=2000, hours=20)
    rollups.rollups_refresh()
    since, until = BASE + timedelta(hours=3, minutes=17), BASE + timedelta(hours=11, minutes=41)
    filters = TaskFilters(since=since, until=until, release="v2")
    summaries = rollups.task_summaries(project=project, filters=filters)
    merged = rollups.Summary()
    for s in summaries.values():
        merged.merge(s)
    raw = Task.objects.filter(project=project, release="v2", started_at__gte=since, started_at__lt=until)
    assert merged.count == raw.count()
    assert merged.errors == raw.filter(status__in=["error", "timeout"]).count()
    truth = exact("SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY duration_ms) FROM ingest_task"
                  " WHERE project_id = %s AND release = 'v2' AND started_at >= %s AND started_at < %s",
                  [project.pk, since, until])
    assert all(close(e, t) for e, t in zip(merged.quantiles((0.5, 0.99)), truth, strict=True))


def test_refreshing_twice_or_recomputing_gives_the_same_rows(project):
    fill(project, n=600)
    first = rollups.rollups_refresh()
    assert first["hours"] == 24
    rows = rollup_rows()
    assert rows
    rollups.rollups_refresh()
    assert rollup_rows() == rows
    with connection.cursor() as cur:
        rollups.hours_recompute(cur, project_id=project.pk, hours=[BASE + timedelta(hours=h) for h in range(24)])
    assert rollup_rows() == rows
    call_command("rollups_rebuild", "--project", project.name, verbosity=0)
    assert rollup_rows() == rows


def test_a_day_row_is_the_merge_of_its_hours(project):
    fill(project, n=900, hours=30)
    rollups.rollups_refresh()
    day = rollups.day_floor(BASE) + rollups.DAY
    with connection.cursor() as cur:
        cur.execute("SELECT sum(tasks), max(max_ms) FROM analysis_task_rollup WHERE hour >= %s AND hour < %s",
                    [day, day + rollups.DAY])
        hours = cur.fetchone()
        cur.execute("SELECT sum(tasks), max(max_ms), sum((SELECT sum(c) FROM unnest(counts) c))"
                    " FROM analysis_task_rollup_day WHERE hour = %s", [day])
        days = cur.fetchone()
    assert hours[0] == days[0] == days[2] > 0 and hours[1] == days[1]


def test_the_time_per_turn_from_rollups_is_the_raw_turns_binned_over_any_range(project):
    """The task rollups keep the turns' (tasks with a session) own histogram: whole hours and days
    read from it, the edges from raw rows, the same buckets as binning every turn."""
    from analysis.dashboard.sessions import _binned, _turns

    tasks = fill(project, n=1800, hours=54)
    sessions = [t for i, t in enumerate(tasks) if i % 3]
    for i, t in enumerate(sessions):
        t.session_id = f"s{i % 40}"
    Task.objects.bulk_update(sessions, ["session_id"])
    Task.objects.filter(pk=sessions[5].pk).update(duration_ms=None)  # a turn still running: not timed
    rollups.rollups_refresh()
    with connection.cursor() as cur:
        cur.execute("SELECT sum(turns) FROM analysis_task_rollup_day")
        assert cur.fetchone()[0] > 0  # whole days are read from the daily rows
    for filters in (TaskFilters(), TaskFilters(release="v2"),
                    TaskFilters(since=BASE + timedelta(hours=3, minutes=17), until=BASE + timedelta(hours=49, minutes=5)),
                    TaskFilters(q="checkout")):  # a filter the rollups have no dimension for: raw rows
        summary = rollups.turn_summary(project=project, filters=filters)
        raw = _binned(_turns(project=project, filters=filters))[""]
        assert summary.count == summary.timed == raw.timed > 0, filters
        assert (summary.bins == raw.bins).all() and summary.max_ms == raw.max_ms, filters
        assert summary.sum_ms == pytest.approx(raw.sum_ms), filters
    assert rollups.turn_summary(project=project, filters=TaskFilters()).timed == len(sessions) - 1


def test_a_resent_batch_does_not_count_twice(project):
    fill(project, n=100)
    rollups.rollups_refresh()
    old = BASE + timedelta(hours=2, minutes=5)
    record = TaskRecord(task_id="late", name="checkout", release="v1", environment="prod",
                        started_at=old, ended_at=old + timedelta(seconds=3), status="ok")
    for _ in range(2):
        batch_store(project=project, batch=Batch(tasks=[record]))
        rollups.rollups_refresh()
    total = sum(s.count for s in rollups.task_summaries(project=project, filters=TaskFilters()).values())
    assert total == 101


def test_late_data_for_an_hour_already_rolled_up_is_counted_after_the_next_run(project):
    fill(project, n=240)
    rollups.rollups_refresh()
    hour = TaskFilters(since=BASE + timedelta(hours=5), until=BASE + timedelta(hours=6))
    before = rollups.task_summaries(project=project, filters=hour)[(None, "")]
    old = BASE + timedelta(hours=5, minutes=30)
    batch_store(project=project, batch=Batch(tasks=[TaskRecord(
        task_id="late", name="checkout", release="v1", environment="prod", started_at=old,
        ended_at=old + timedelta(hours=2), status="error")]))
    rollups.rollups_refresh()
    after = rollups.task_summaries(project=project, filters=hour)[(None, "")]
    assert after.count == before.count + 1 and after.errors == before.errors + 1
    assert after.max_ms == pytest.approx(7_200_000)


def test_a_task_that_moves_to_another_hour_leaves_its_old_hour(project):
    tasks = fill(project, n=48)
    rollups.rollups_refresh()
    moved = tasks[0]  # hour 0
    Task.objects.filter(pk=moved.pk).update(started_at=BASE + timedelta(hours=7, minutes=1),
                                            last_event_at=datetime.now(tz=UTC))
    rollups.rollups_refresh()

    def count(h):
        f = TaskFilters(since=BASE + timedelta(hours=h), until=BASE + timedelta(hours=h + 1))
        return sum(s.count for s in rollups.task_summaries(project=project, filters=f).values())

    assert (count(0), count(7)) == (1, 3)


def test_new_tasks_show_before_the_job_runs(project):
    fill(project, n=100)
    rollups.rollups_refresh()
    now = datetime.now(tz=UTC)  # not NOW: the hour in progress, even when the suite began in the previous one
    batch_store(project=project, batch=Batch(tasks=[TaskRecord(
        task_id="fresh", name="checkout", release="v1", environment="prod", started_at=now,
        ended_at=now + timedelta(seconds=1), status="ok")]))
    totals = aggregates.overview_totals(project=project, filters=TaskFilters())
    assert totals["count"] == 101


def test_the_hour_in_progress_is_rolled_up_once_it_is_over(project):
    # Readers read the hour in progress raw, so the job leaves it alone until it completes and
    # then rolls it up even if nothing about its tasks changed since.
    fill(project, n=100)
    rollups.rollups_refresh(now=NOW)
    current = rollups.hour_floor(NOW)
    batch_store(project=project, batch=Batch(tasks=[TaskRecord(
        task_id="now", name="checkout", release="v1", environment="prod", started_at=current,
        ended_at=current + timedelta(seconds=2), status="ok")]))

    def rolled_up() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT coalesce(sum(tasks), 0) FROM analysis_task_rollup WHERE project_id = %s AND hour = %s",
                        [project.pk, current])
            return cur.fetchone()[0]

    rollups.rollups_refresh(now=NOW + timedelta(seconds=1))
    assert rolled_up() == 0
    assert aggregates.overview_totals(project=project, filters=TaskFilters())["count"] == 101
    Task.objects.filter(project=project).update(last_event_at=NOW - timedelta(days=1))
    rollups.rollups_refresh(now=current + timedelta(hours=1, minutes=1))
    assert rolled_up() == 1
    assert aggregates.overview_totals(project=project, filters=TaskFilters())["count"] == 101


def test_projects_are_isolated(project, other_project):
    fill(project, n=300, releases=("v1",))
    fill(other_project, n=300, seed=9, releases=("v1",))
    rollups.rollups_refresh()
    other_rows = [r for r in rollup_rows() if r[0] == other_project.pk]
    Task.objects.filter(project=project).delete()
    rollups.rollups_rebuild(project=project)
    assert rollups.task_summaries(project=project, filters=TaskFilters()) == {}
    assert [r for r in rollup_rows() if r[0] == other_project.pk] == other_rows
    ours = rollups.step_summaries(project=other_project, filters=TaskFilters(), group_by="kind")
    assert sum(s.count for s in ours.values()) == Step.objects.filter(project=other_project).count()


def test_a_deleted_projects_rows_go_with_the_next_run(project, other_project):
    fill(project, n=100)
    fill(other_project, n=100, seed=3)
    rollups.rollups_refresh()
    gone = project.pk
    project.delete()
    rollups.rollups_refresh()
    assert {r[0] for r in rollup_rows()} == {other_project.pk} and gone != other_project.pk


@pytest.mark.django_db(transaction=True)
def test_rollup_rows_do_not_block_the_test_flush(project):
    """A transactional test's teardown truncates the Django tables; rollup rows must not stop it."""
    fill(project, n=20)
    try:
        rollups.rollups_refresh()
        assert rollup_rows()
    finally:  # nothing rolls this test back: leave no watermark for the tests after it
        with connection.cursor() as cur:
            cur.execute("TRUNCATE analysis_rollup_state, " + ", ".join(rollups.TABLES))


def test_filters_the_rollups_lack_fall_back_to_raw_rows(project):
    fill(project, n=100)
    rollups.rollups_refresh()
    assert rollups.task_summaries(project=project, filters=TaskFilters(status="error")) is None
    assert rollups.step_summaries(project=project, filters=TaskFilters(name="checkout"), group_by="kind") is None
    # and the page still answers, exactly
    assert aggregates.overview_totals(project=project, filters=TaskFilters(status="error"))["count"] == 3


def _raw(fn):
    """What a selector answers from raw rows: with no watermark the rollups are not read."""
    with connection.cursor() as cur:
        cur.execute("SELECT watermark FROM analysis_rollup_state")
        saved = cur.fetchall()
        cur.execute("DELETE FROM analysis_rollup_state")
    try:
        return fn()
    finally:
        with connection.cursor() as cur:
            for (mark,) in saved:
                cur.execute("INSERT INTO analysis_rollup_state VALUES ('rollups', %s)", [mark])


def test_overview_and_latency_pages_show_the_same_numbers_as_the_raw_queries(project):
    fill(project, n=1200, hours=72 - 30 + 28)
    rollups.rollups_refresh()
    f = TaskFilters()
    for fn in (
        lambda: aggregates.overview_totals(project=project, filters=f),
        lambda: aggregates.overview_series(project=project, filters=f),
        lambda: aggregates.duration_percentiles(project=project, filters=f),
        lambda: aggregates.duration_percentiles(project=project, filters=TaskFilters(release="v1"), group_by="model"),
        lambda: aggregates.duration_percentiles(project=project, filters=f, group_by="tool"),
        lambda: aggregates.duration_quantiles(project=project, filters=f, group_by="kind", groups=["llm", "tool"]),
    ):
        same(_raw(fn), fn())
    # the histogram: the same bars, counts equal but for durations within 0.01 % of an edge
    raw, rolled = _raw(lambda: aggregates.duration_histogram(project=project, filters=f)), \
        aggregates.duration_histogram(project=project, filters=f)
    assert sum(n for *_, n in raw) == sum(n for *_, n in rolled) == 1200
    edges = log_edges()
    near = Task.objects.filter(project=project).extra(
        where=["EXISTS (SELECT 1 FROM unnest(%s::float8[]) e WHERE abs(duration_ms / e - 1) < 5e-4)"],
        params=[edges]).count()
    assert sum(abs(a[2] - b[2]) for a, b in zip(raw, rolled, strict=True)) <= 2 * near
    assert [a[:2] for a in raw] == [b[:2] for b in rolled]


def test_devices_page_figures_from_rollups_match_the_raw_queries(project):
    fill(project, n=1500, hours=70)
    for name, vendor in (("gpu-0", "nvidia"), ("groq-0", "groq"), ("idle-0", "dmatrix")):
        Device.objects.create(project=project, name=name, vendor=vendor, first_seen=BASE, last_seen=BASE)
    rollups.rollups_refresh()
    rolled = rollups.step_summaries(project=project, filters=TaskFilters(), group_by="device", metric="tpot")
    assert set(rolled) == {"gpu-0", "groq-0"} and rolled["gpu-0"].timed > 100  # the rollups answer
    for f in (TaskFilters(), TaskFilters(release="v2"), TaskFilters(since=BASE + timedelta(minutes=90))):
        raw = _raw(lambda f=f: aggregates.device_table(project=project, filters=f))
        same(raw, aggregates.device_table(project=project, filters=f))
        assert [r["device"] for r in raw] == ["gpu-0", "groq-0", "idle-0"] and raw[0]["tpot_p95"] is not None
        for metric in ("ttft", "tpot"):
            query = lambda f=f, metric=metric: aggregates.device_quantiles(  # noqa: E731
                project=project, filters=f, metric=metric, devices=["gpu-0", "groq-0", "idle-0"])
            same(_raw(query), query())
    # Filters the rollups have no dimension for still answer exactly from raw rows.
    f = TaskFilters(name="checkout")
    assert _raw(lambda: aggregates.device_table(project=project, filters=f)) == \
        aggregates.device_table(project=project, filters=f)


def test_releases_list_from_rollups_matches_the_raw_list(project):
    fill(project, n=900)
    rollups.rollups_refresh()
    raw = {r["name"]: r for r in _raw(lambda: release_list(project=project))}
    rolled = {r["name"]: r for r in release_list(project=project)}
    assert raw.keys() == rolled.keys() == {"v1", "v2"}
    for name in raw:
        assert rolled[name]["tasks"] == raw[name]["tasks"] == 450
        assert close(rolled[name]["p95_ms"], raw[name]["p95_ms"])
        assert rolled[name]["first_seen"] == raw[name]["first_seen"]
        assert sum(b["tasks"] for b in rolled[name]["sparkline"]) == 450
        assert 10 <= len(rolled[name]["sparkline"]) <= 20


def test_retention_drops_old_rollup_hours(project, settings):
    fill(project, n=100)
    rollups.rollups_refresh()
    settings.AGENTOPS_RETENTION_DAYS = 1
    result = rollups.rollups_refresh()
    assert result["deleted"] > 0
    cutoff = rollups.hour_floor(datetime.now(tz=UTC) - timedelta(days=1))
    assert all(r[1] >= rollups.day_floor(cutoff) for r in rollup_rows())  # daily rows: the day's start
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM analysis_task_rollup WHERE hour < %s", [cutoff])
        assert cur.fetchone()[0] == 0
    # the day of the cut-off keeps the hours after it, in its daily row too
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(sum(tasks), 0) FROM analysis_task_rollup WHERE hour >= %s AND hour < %s",
                    [cutoff, rollups.day_floor(cutoff) + timedelta(days=1)])
        hours = cur.fetchone()[0]
        cur.execute("SELECT coalesce(sum(tasks), 0) FROM analysis_task_rollup_day WHERE hour = %s",
                    [rollups.day_floor(cutoff)])
        assert cur.fetchone()[0] == hours


def test_rebuild_command_reports_hours_and_names_a_missing_project(project):
    from io import StringIO

    from django.core.management.base import CommandError

    fill(project, n=50, hours=5)
    out = StringIO()
    call_command("rollups_rebuild", stdout=out)
    assert "acme: 5 hours rolled up" in out.getvalue()
    assert rollups.watermark() is not None
    with pytest.raises(CommandError, match="no project named 'nope'"):
        call_command("rollups_rebuild", "--project", "nope")


def test_budget_by_release_from_rollups_matches_and_follows_new_analyses(project):
    from analysis.models import TaskAnalysis

    tasks = fill(project, n=300)
    TaskAnalysis.objects.bulk_create([
        TaskAnalysis(task=t, project=project, analyzed_at=NOW - timedelta(hours=1),
                     budget={"prefill": t.duration_ms * 0.2, "tool": t.duration_ms * 0.5} if i % 7 else {})
        for i, t in enumerate(tasks[:200])])
    rollups.rollups_refresh()
    f = TaskFilters()
    raw = _raw(lambda: aggregates.budget_by_release(project=project, filters=f))
    rolled = aggregates.budget_by_release(project=project, filters=f)
    assert [r for r, _ in raw] == [r for r, _ in rolled] == ["v1", "v2"]
    for (_, a), (_, b) in zip(raw, rolled, strict=True):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-9) for k in a)
    # a task analysed after its hour was rolled up counts after the next run
    late = tasks[250]
    TaskAnalysis.objects.create(task=late, project=project, analyzed_at=datetime.now(tz=UTC),
                                budget={"prefill": 1e6})
    rollups.rollups_refresh()
    rolled = dict(aggregates.budget_by_release(project=project, filters=f))
    raw = dict(_raw(lambda: aggregates.budget_by_release(project=project, filters=f)))
    assert rolled["v1"]["prefill"] == pytest.approx(raw["v1"]["prefill"]) and rolled["v1"]["prefill"] > 5000
    # a task of the fresh tail (after the last run) counts at once, from raw rows
    now = datetime.now(tz=UTC)  # not NOW: the hour in progress, even when the suite began in the previous one
    fresh = Task.objects.create(project=project, task_id="fresh", release="v2", started_at=now, duration_ms=5.0,
                                last_event_at=now)
    TaskAnalysis.objects.create(task=fresh, project=project, analyzed_at=now, budget={"tool": 2e6})
    rolled = dict(aggregates.budget_by_release(project=project, filters=f))
    raw = dict(_raw(lambda: aggregates.budget_by_release(project=project, filters=f)))
    assert rolled["v2"]["tool"] == pytest.approx(raw["v2"]["tool"]) and rolled["v2"]["tool"] > 10000


def test_a_mid_hour_range_series_matches_the_raw_query(project):
    fill(project, n=1500, hours=30)
    rollups.rollups_refresh()
    filters = TaskFilters(since=BASE + timedelta(hours=1, minutes=20), until=BASE + timedelta(hours=29, minutes=7),
                          release="v1")
    raw = _raw(lambda: aggregates.overview_series(project=project, filters=filters))
    rolled = aggregates.overview_series(project=project, filters=filters)
    assert [(p.bucket, p.release, p.count, p.errors) for p in raw] == \
        [(p.bucket, p.release, p.count, p.errors) for p in rolled]
    assert all(close(b.p95, a.p95) for a, b in zip(raw, rolled, strict=True) if a.p95 is not None)


def test_pages_render_from_rollups_and_keep_other_projects_out(client, project, other_project):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client.force_login(user)
    fill(project, n=300)
    fill(other_project, n=300, seed=5)
    Task.objects.filter(project=other_project).update(duration_ms=9e6)
    rollups.rollups_refresh()
    for url in ("/", "/latency?group_by=kind", "/releases"):
        response = client.get(url)
        assert response.status_code == 200, url
    latency = client.get("/api/v1/latency", {"group_by": "task"}).json()
    rows = latency["results"] if isinstance(latency, dict) and "results" in latency else latency
    assert rows and all(r["max"] < 9e6 for r in rows)
    figs = client.get("/charts/overview.json").json()
    assert sum(sum(trace.get("y", [])) for trace in figs["volume"]["data"]) == 300


def test_alert_baselines_from_rollups_match_the_raw_measure(project):
    from analysis.alerts.metrics import MetricSpec, measure, measure_rolled_up

    fill(project, n=1500, hours=60)
    rollups.rollups_refresh()
    start, end = BASE - timedelta(days=2), NOW
    for metric, filters in (("task_duration_p95", {"release": "v1"}), ("task_duration_p50", {"task_name": "support"}),
                            ("step_duration_p99", {"release": "v2", "step_name": "chat"}),
                            ("step_duration_p95", {}), ("ttft_p95", {"device": "groq-0"}),
                            ("step_duration_p95", {"step_kind": "tool", "environment": "prod"})):
        spec = MetricSpec(metric=metric, filters=filters)
        rolled, raw = measure_rolled_up(project=project, spec=spec, start=start, end=end), \
            measure(project=project, spec=spec, start=start, end=end)
        assert rolled is not None and raw.sample_count > 50, (metric, filters)
        assert rolled.sample_count == raw.sample_count and close(rolled.value, raw.value), (metric, filters, rolled, raw)
    # What the rollups cannot answer is left to the raw query.
    for metric, filters in (("tpot_p95", {}), ("error_rate", {}), ("step_duration_p95", {"task_name": "support"}),
                            ("step_duration_p95", {"model": "m1", "step_name": "chat"}),
                            ("task_duration_p95", {"step_name": "chat"})):
        assert measure_rolled_up(project=project, spec=MetricSpec(metric=metric, filters=filters),
                                 start=start, end=end) is None, (metric, filters)
