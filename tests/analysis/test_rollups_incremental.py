"""The rollup refresh costs in proportion to what changed: an analysis recomputes only the
figures of its (hour, release, environment, task name) slice, late data only its (hour, release,
environment), and either way every rollup row equals a rebuild from raw rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from analysis import rollups
from analysis.models import Finding, TaskAnalysis
from analysis.rollups import refresh
from ingest.models import Step, Task

from .test_rollups import BASE, NOW, fill


def _rounded(value):
    """Floats, and those in a budget's JSON, to 11 significant digits: sums in another order
    differ in the last bits."""
    if isinstance(value, float):
        return float(f"{value:.11g}")
    if isinstance(value, str) and value.startswith("{"):
        return tuple(sorted((k, _rounded(v)) for k, v in json.loads(value).items()))
    return value


def every_row() -> list:
    """Every rollup row of every table, rounded (_rounded)."""
    out = []
    with connection.cursor() as cur:
        for table in rollups.TABLES:
            cur.execute(f"SELECT * FROM {table}")
            columns = [c.name for c in cur.description]
            rows = [tuple(_rounded(v) for v in r) for r in cur.fetchall()]
            out.append((table, columns, sorted(rows, key=repr)))
    return out


def rebuilt(now: datetime | None = None) -> list:
    rollups.rollups_rebuild(now=now)
    return every_row()


def analyse(tasks, *, at):
    TaskAnalysis.objects.bulk_create([
        TaskAnalysis(task=t, project=t.project, analyzed_at=at, analyzed_through=t.last_event_at,
                     budget={"prefill": t.duration_ms * 0.2, "tool": t.duration_ms * 0.5},
                     whatif={"actual_ms": t.duration_ms, "parallel_ms": t.duration_ms * 0.9})
        for t in tasks])
    Finding.objects.bulk_create([
        Finding(project=t.project, task=t, kind="serial_gap", wasted_ms=t.duration_ms * 0.1, summary="gap",
                task_started_at=t.started_at, release=t.release)
        for t in tasks[::2]])


def versions(table: str, hour: datetime, release: str) -> list:
    """The row versions (xmin) of one release's rows of an hour: unchanged if nothing wrote them."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT xmin::text FROM {table} WHERE hour = %s AND release = %s ORDER BY 1", [hour, release])
        return [r[0] for r in cur.fetchall()]


def test_an_analysis_after_its_hour_was_rolled_up_recomputes_its_slice_only(project):
    tasks = fill(project, n=600)
    analyse(tasks[:300], at=NOW - timedelta(hours=1))
    first = datetime.now(tz=UTC)
    rollups.rollups_refresh(now=first)
    late = tasks[400]
    hour = rollups.hour_floor(late.started_at)
    steps_before = versions("analysis_step_rollup", hour, late.release)
    analyse([late], at=first + timedelta(seconds=10))
    out = rollups.rollups_refresh(now=first + timedelta(seconds=20))
    assert (out["hours"], out["groups"], out["slices"]) == (0, 0, 1)
    assert versions("analysis_step_rollup", hour, late.release) == steps_before  # no step was read
    assert every_row() == rebuilt()


def test_late_data_recomputes_only_its_release_and_environment_of_the_hour(project):
    tasks = fill(project, n=600, steps_every=1)
    analyse(tasks[:100], at=NOW - timedelta(hours=1))
    rollups.rollups_refresh()
    late = tasks[401]
    hour = rollups.hour_floor(late.started_at)
    other = "v1" if late.release == "v2" else "v2"
    others_before = {t: versions(t, hour, other) for t in rollups.HOURLY_TABLES}
    Step.objects.create(project=project, task=late, step_id="late", kind="tool", name="notify", tool_name="notify",
                        started_at=late.started_at, ended_at=late.ended_at, duration_ms=late.duration_ms * 0.1)
    Task.objects.filter(pk=late.pk).update(last_event_at=datetime.now(tz=UTC))
    out = rollups.rollups_refresh()
    assert (out["hours"], out["groups"]) == (0, 1)
    assert {t: versions(t, hour, other) for t in rollups.HOURLY_TABLES} == others_before
    assert every_row() == rebuilt()


def test_a_task_that_changes_release_leaves_its_old_release(project):
    tasks = fill(project, n=300)
    rollups.rollups_refresh()
    moved = tasks[10]
    Task.objects.filter(pk=moved.pk).update(release="v3", last_event_at=datetime.now(tz=UTC))
    out = rollups.rollups_refresh()
    assert out["groups"] == 2 and out["hours"] == 0  # v3 gained it, its old release lost it
    assert every_row() == rebuilt()


def test_a_completed_hour_is_rolled_up_whole_once(project):
    fill(project, n=200, hours=2)
    rollups.rollups_refresh(now=BASE + timedelta(minutes=30))  # the first run: a rebuild
    out = rollups.rollups_refresh(now=BASE + timedelta(hours=2, minutes=5))
    assert out["hours"] == 2
    assert rollups.rollups_refresh(now=BASE + timedelta(hours=2, minutes=6))["hours"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_parallel_rebuild_writes_the_rows_of_a_serial_one(project):
    tasks = fill(project, n=400, hours=50, steps_every=1)
    analyse(tasks[:150], at=NOW - timedelta(hours=1))
    with connection.cursor() as cur:  # a stale row beyond the data, from an old rebuild
        old = BASE - timedelta(days=40)
        cur.execute("INSERT INTO analysis_task_rollup (project_id, hour, release, environment, name, tasks, errors,"
                    " sum_ms, max_ms, first_at, last_at, bins, counts, analysed, budget_ms) VALUES"
                    " (%s, %s, 'old', '', '', 1, 0, 1, 1, %s, %s, '{}', '{}', 0, '{}')", [project.pk, old, old, old])
    assert not connection.in_atomic_block
    rollups.rollups_rebuild(workers=2)
    parallel = every_row()
    rollups.rollups_rebuild(workers=1)
    assert parallel == every_row()
    assert not any(r[2] == "old" for r in parallel[0][2])


@pytest.mark.django_db(transaction=True)
def test_hours_completed_since_the_last_refresh_rolled_up_on_several_connections_equal_a_rebuild(project, monkeypatch):
    tasks = fill(project, n=500, hours=20, steps_every=1)
    analyse(tasks[:200], at=NOW - timedelta(hours=1))
    with connection.cursor() as cur:  # as if 19 hours had completed since the last refresh, none rolled up
        cur.execute("TRUNCATE " + ", ".join(rollups.TABLES))
    rollups.watermark_set(BASE + timedelta(hours=1, minutes=1))
    monkeypatch.setattr(refresh, "REBUILD_WORKERS", 2)
    assert not connection.in_atomic_block
    out = rollups.rollups_refresh(now=BASE + timedelta(hours=20, minutes=5))
    assert out["hours"] == 19
    refreshed = every_row()
    assert refreshed == rebuilt(now=BASE + timedelta(hours=20, minutes=5))
