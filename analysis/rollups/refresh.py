"""Keeping the rollups true: the periodic refresh of the hours that changed, the rebuild, and
retention (docs/rollups.md, "Maintenance"). Whole (project, hour) buckets are recomputed from raw
rows in one transaction, never incremented on ingest."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from analysis.rollups.sql import (
    DAY,
    GROUP_COLUMNS,
    GROUP_DAYS_SQL,
    HOUR,
    HOURLY_TABLES,
    ORIGIN,
    RELEASE_TABLE,
    RELEASE_TOTALS_SQL,
    STEP_DAYS_SQL,
    TABLES,
    TASK_DAYS_SQL,
    budget_rollup_sql,
    day_floor,
    group_rows_sql,
    hour_floor,
    step_rollup_sql,
    task_rollup_sql,
    utc_now,
)
from ingest.models import Project

log = logging.getLogger("agentops.analysis")

REFRESH_SECONDS = 60
# A batch stamps last_event_at when it starts and commits a little later; a run looks back this
# far past its previous start so such a batch is never skipped (recomputing twice is harmless).
OVERLAP = timedelta(minutes=5)
RECONCILE_HOURS = 48
_LOCK = 7_201_100  # pg advisory lock key: one refresh at a time


def hours_recompute(cursor, *, project_id: int, hours: Iterable[datetime]) -> int:
    """Replace the rollup rows of these hours of a project with figures from the raw rows.
    Contiguous hours go as one range. Returns the number of hours."""
    hours = sorted(set(hours))
    runs: list[list[datetime]] = []
    for hour in hours:
        if runs and hour - runs[-1][1] == HOUR:
            runs[-1][1] = hour
        else:
            runs.append([hour, hour])
    for first, last in runs:
        _range_recompute(cursor, project_id=project_id, lo=first, hi=last + HOUR)
    return len(hours)


def days_recompute(cursor, *, project_id: int, lo: datetime, hi: datetime) -> None:
    """Rebuild the daily rows of the days [lo, hi) touches from their hourly rows."""
    first, last = day_floor(lo), day_floor(hi - timedelta(microseconds=1)) + DAY
    for table, sql in (("analysis_task_rollup", TASK_DAYS_SQL), ("analysis_step_rollup", STEP_DAYS_SQL),
                       ("analysis_group_rollup", GROUP_DAYS_SQL)):
        cursor.execute(f"DELETE FROM {table}_day WHERE project_id = %s AND hour >= %s AND hour < %s",
                       [project_id, first, last])
        cursor.execute(sql, [project_id, first, last, project_id])


def _range_recompute(cursor, *, project_id: int, lo: datetime, hi: datetime) -> None:
    """Recompute the whole hours [lo, hi) of a project, then the days they touch."""
    for table in HOURLY_TABLES:
        cursor.execute(f"DELETE FROM {table} WHERE project_id = %s AND hour >= %s AND hour < %s",
                       [project_id, lo, hi])
    where = "t.project_id = %s AND t.started_at >= %s AND t.started_at < %s"
    raw_params = [project_id, lo, hi]
    cursor.execute(task_rollup_sql(where), raw_params)
    cursor.execute(step_rollup_sql(where), raw_params)
    cursor.execute(budget_rollup_sql(where), [*raw_params, project_id])
    cursor.execute(f"INSERT INTO analysis_group_rollup ({', '.join(GROUP_COLUMNS)}) {group_rows_sql(where)}",
                   raw_params)
    days_recompute(cursor, project_id=project_id, lo=lo, hi=hi)


def release_totals_recompute(cursor, *, project_id: int, hi: datetime, releases: Iterable[str] | None = None) -> None:
    """Replace the release totals of these releases (all of the project's when None) with the
    merge of their group rollup rows of every hour before `hi` (the watermark's hour): whole days
    from the daily table, the hours of hi's own day from the hourly table. `hour` of a total
    row is that `hi`. A release's totals stay right until an hour of it is recomputed or becomes
    complete, which is when the refresh recomputes them."""
    if releases is not None:
        releases = sorted(set(releases))
        if not releases:
            return
    clause, extra = ("AND release = ANY(%s)", [releases]) if releases is not None else ("", [])
    cursor.execute(f"DELETE FROM {RELEASE_TABLE} WHERE project_id = %s {clause}", [project_id, *extra])
    day = day_floor(hi)
    cursor.execute(RELEASE_TOTALS_SQL.format(releases=clause),
                   [project_id, day, *extra, project_id, day, hi, *extra, hi])


def _releases_in(cursor, *, project_id: int, hours: Iterable[datetime], lo: datetime, hi: datetime) -> set[str]:
    """Releases with group rollup rows in any of `hours` or in [lo, hi)."""
    cursor.execute("SELECT DISTINCT release FROM analysis_group_rollup WHERE project_id = %s"
                   " AND (hour = ANY(%s) OR (hour >= %s AND hour < %s))", [project_id, sorted(hours), lo, hi])
    return {row[0] for row in cursor.fetchall()}


def project_rebuild(*, project: Project, progress: Callable[[str], None] | None = None,
                    until: datetime | None = None) -> int:
    """Recompute every hour of a project, a week at a time (bounded sorts), in one transaction
    so readers keep the old figures until the new ones are complete, then its release totals up
    to the hour of `until` (the watermark about to be set; default: the current one). Returns
    the hours written."""
    with transaction.atomic(), connection.cursor() as cursor:
        # the refresh's lock (re-entrant within a session): two recomputes of one hour at once
        # would each delete only the rows they can see and both insert
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
        cursor.execute("SET LOCAL work_mem = '64MB'")
        cursor.execute("SELECT min(started_at), max(started_at) FROM ingest_task WHERE project_id = %s",
                       [project.pk])
        first, last = cursor.fetchone()
        for table in TABLES:
            cursor.execute(f"DELETE FROM {table} WHERE project_id = %s", [project.pk])
        if first is None:
            return 0
        lo = day_floor(first)
        while lo <= last:
            hi = lo + timedelta(days=7)
            _range_recompute(cursor, project_id=project.pk, lo=lo, hi=hi)
            if progress:
                progress(f"{project.name}: {lo:%Y-%m-%d} … {min(hi, last):%Y-%m-%d}")
            lo = hi
        until = until or watermark()
        if until is not None:
            release_totals_recompute(cursor, project_id=project.pk, hi=hour_floor(until))
        cursor.execute("SELECT count(DISTINCT hour) FROM analysis_task_rollup WHERE project_id = %s",
                       [project.pk])
        return cursor.fetchone()[0]


def rollups_rebuild(*, project: Project | None = None, progress=None, now: datetime | None = None) -> dict[str, int]:
    """Recompute the rollups of one project, or of all projects and then set the watermark to
    the start of the rebuild (so the next refresh only looks at what arrived since). `now`: the
    time the rebuild stands for (default: the clock), e.g. the newest task of a loaded dataset."""
    if project is not None:
        return {project.name: project_rebuild(project=project, progress=progress)}
    started = now or utc_now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
        out = {p.name: project_rebuild(project=p, progress=progress, until=started)
               for p in Project.objects.order_by("pk")}
        _watermark_set(started)
    return out


def rollups_refresh(*, now: datetime | None = None) -> dict[str, int]:
    """The periodic job: recompute the hours that changed since the last run. Skips (returns
    {"skipped": 1}) when another refresh holds the lock; the first run rebuilds everything."""
    started = now or utc_now()
    clock = time.monotonic()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_LOCK])
        if not cursor.fetchone()[0]:
            return {"skipped": 1}
        cursor.execute("SELECT watermark FROM analysis_rollup_state WHERE name = 'rollups'")
        row = cursor.fetchone()
        if row is None or row[0] is None:
            hours = sum(project_rebuild(project=p, until=started) for p in Project.objects.order_by("pk"))
            _watermark_set(started)
            log.info("analysis.rollups_rebuilt hours=%d ms=%.0f", hours, 1000 * (time.monotonic() - clock))
            return {"hours": hours, "rebuilt": 1}
        # Only complete hours are rolled up: readers read the hour in progress raw (see
        # covered_hours), so recomputing it every run would be wasted. Each hour is computed when
        # it completes, and again when late data or an analysis changes it.
        prev_hi, hi = hour_floor(row[0]), hour_floor(started)
        hour = f"date_bin(INTERVAL '1 hour', started_at, {ORIGIN})"
        cursor.execute(f"SELECT project_id, {hour} FROM ingest_task WHERE last_event_at > %s AND started_at < %s"
                       " GROUP BY 1, 2", [row[0] - OVERLAP, hi])
        changed: dict[int, set[datetime]] = defaultdict(set)
        for project_id, at in cursor.fetchall():
            changed[project_id].add(at)
        projects = list(Project.objects.values_list("pk", flat=True))
        for project_id in projects if prev_hi < hi else ():  # hours completed since the last run
            cursor.execute(f"SELECT DISTINCT {hour} FROM ingest_task WHERE project_id = %s AND started_at >= %s"
                           " AND started_at < %s", [project_id, prev_hi, hi])
            changed[project_id] |= {at for at, in cursor.fetchall()}
        cursor.execute(
            f"SELECT t.project_id, date_bin(INTERVAL '1 hour', t.started_at, {ORIGIN}) FROM analysis_taskanalysis a"
            " JOIN ingest_task t ON t.id = a.task_id WHERE a.analyzed_at > %s AND t.started_at < %s"
            " GROUP BY 1, 2", [row[0] - OVERLAP, hi])
        for project_id, at in cursor.fetchall():
            changed[project_id].add(at)
        for project_id in projects:
            changed[project_id] |= _mismatched_hours(cursor, project_id=project_id, since=started)
        cursor.execute("SET LOCAL work_mem = '64MB'")
        # Release totals to redo: releases in a recomputed hour (before and after: a task can
        # leave a release's hour) or in an hour that became complete since the last run.
        touched = {p: _releases_in(cursor, project_id=p, hours=h, lo=prev_hi, hi=hi) for p, h in changed.items()}
        hours = sum(hours_recompute(cursor, project_id=p, hours=h) for p, h in changed.items() if h)
        retained = _retention_delete(cursor, now=started)
        for project_id, h in changed.items():
            releases = None if retained else touched[project_id] | _releases_in(
                cursor, project_id=project_id, hours=h, lo=prev_hi, hi=hi)
            release_totals_recompute(cursor, project_id=project_id, hi=hi, releases=releases)
        deleted = retained + _orphans_delete(cursor)
        _watermark_set(started)
    log.info("analysis.rollups_refreshed hours=%d deleted=%d ms=%.0f", hours, deleted,
             1000 * (time.monotonic() - clock))
    return {"hours": hours, "deleted": deleted}


def _mismatched_hours(cursor, *, project_id: int, since: datetime) -> set[datetime]:
    """Recent complete hours whose rolled-up task count differs from the raw rows' (a task that
    moved to another hour, deleted tasks)."""
    hi = hour_floor(since)
    lo = hi - timedelta(hours=RECONCILE_HOURS)
    cursor.execute(f"""
        SELECT coalesce(a.hour, b.hour) FROM
            (SELECT date_bin(INTERVAL '1 hour', started_at, {ORIGIN}) AS hour, count(*) AS n
             FROM ingest_task WHERE project_id = %s AND started_at >= %s AND started_at < %s GROUP BY 1) a
        FULL JOIN
            (SELECT hour, sum(tasks) AS n FROM analysis_task_rollup
             WHERE project_id = %s AND hour >= %s AND hour < %s GROUP BY 1) b ON a.hour = b.hour
        WHERE a.n IS DISTINCT FROM b.n""", [project_id, lo, hi, project_id, lo, hi])
    return {row[0] for row in cursor.fetchall()}


def _orphans_delete(cursor) -> int:
    """Rows of deleted projects (the tables have no foreign key: see migration 0005). Looks at the
    small daily task table first, so a run with nothing to delete costs one short scan."""
    cursor.execute("SELECT DISTINCT r.project_id FROM analysis_task_rollup_day r"
                   " WHERE NOT EXISTS (SELECT 1 FROM ingest_project p WHERE p.id = r.project_id)")
    gone = [row[0] for row in cursor.fetchall()]
    deleted = 0
    for table in TABLES if gone else ():
        cursor.execute(f"DELETE FROM {table} WHERE project_id = ANY(%s)", [gone])
        deleted += cursor.rowcount
    return deleted


def _retention_delete(cursor, *, now: datetime) -> int:
    days = getattr(settings, "AGENTOPS_RETENTION_DAYS", 0)
    if not days:
        return 0
    cutoff = hour_floor(now - timedelta(days=days))
    deleted = 0
    for table in TABLES:
        cursor.execute(f"DELETE FROM {table} WHERE hour < %s", [cutoff])
        deleted += cursor.rowcount
    if deleted:
        # The day of the cut-off lost its daily row but keeps its later hours: merge them again,
        # or readers of whole days (and the release totals) would miss those hours.
        cursor.execute("SELECT DISTINCT project_id FROM analysis_task_rollup WHERE hour >= %s AND hour < %s",
                       [cutoff, day_floor(cutoff) + DAY])
        for (project_id,) in cursor.fetchall():
            days_recompute(cursor, project_id=project_id, lo=cutoff, hi=cutoff + HOUR)
    return deleted


def _watermark_set(value: datetime) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO analysis_rollup_state (name, watermark) VALUES ('rollups', %s)"
                       " ON CONFLICT (name) DO UPDATE SET watermark = EXCLUDED.watermark", [value])


def watermark() -> datetime | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT watermark FROM analysis_rollup_state WHERE name = 'rollups'")
        row = cursor.fetchone()
    return row[0] if row else None


def on_project_deleted(sender, *, instance, **kwargs) -> None:
    """Derived rows kept in plain SQL tables (no foreign key) go with their project."""
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"DELETE FROM {table} WHERE project_id = %s", [instance.pk])
