"""Keeping the rollups true: the periodic refresh of what changed, the rebuild, and retention
(docs/rollups.md, "Maintenance"). Rows are recomputed from raw rows in one transaction, in the
narrowest unit that holds a change (an hour, an (hour, release, environment) group, or an
analysis' slice), never incremented on ingest."""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from analysis import jobs
from analysis.rollups import samples
from analysis.rollups.sql import (
    ANALYSIS_DIMENSIONS,
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
    analysis_rows_sql,
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
# analysis_rollup_state rows of the projects whose refresh failed: `rollups:<project id>`.
_HELD_LIKE = "rollups:%"


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


_DAYS_SQL = {"analysis_task_rollup": TASK_DAYS_SQL, "analysis_step_rollup": STEP_DAYS_SQL,
             "analysis_group_rollup": GROUP_DAYS_SQL}
# (hour, release, environment) and (hour, release, environment, task name) keys, given as arrays.
_IN_GROUPS = " IN (SELECT * FROM unnest(%s::timestamptz[], %s::text[], %s::text[]))"
_IN_SLICES = " IN (SELECT * FROM unnest(%s::timestamptz[], %s::text[], %s::text[], %s::text[]))"
_TASK_HOUR = f"date_bin(INTERVAL '1 hour', t.started_at, {ORIGIN})"


def _columns(keys: Iterable[tuple]) -> list[list]:
    """Keys as one array per position (the parameters of an unnest)."""
    keys = sorted(set(keys))
    return [list(column) for column in zip(*keys, strict=True)] if keys else []


def days_recompute(cursor, *, project_id: int, lo: datetime, hi: datetime, day_groups: Iterable[tuple] | None = None,
                   tables: Sequence[str] = HOURLY_TABLES, dimensions: Sequence[str] | None = None) -> None:
    """Rebuild the daily rows of the days [lo, hi) touches from their hourly rows: all of them, or
    only those of these (day, release, environment) `day_groups` (and, of the group rollup, of
    these `dimensions`)."""
    first, last = day_floor(lo), day_floor(hi - timedelta(microseconds=1)) + DAY
    for table in tables:
        clause, extra = "", []
        if day_groups is not None:
            clause = f" AND (date_bin(INTERVAL '1 day', hour, {ORIGIN}), release, environment){_IN_GROUPS}"
            extra = _columns(day_groups)
        if dimensions is not None and table == "analysis_group_rollup":
            clause += " AND dimension = ANY(%s)"
            extra.append(list(dimensions))
        cursor.execute(f"DELETE FROM {table}_day WHERE project_id = %s AND hour >= %s AND hour < %s {clause}",
                       [project_id, first, last, *extra])
        cursor.execute(_DAYS_SQL[table].replace("/*filter*/", clause), [project_id, first, last, *extra, project_id])


def _range_recompute(cursor, *, project_id: int, lo: datetime, hi: datetime, days: bool = True) -> None:
    """Recompute the whole hours [lo, hi) of a project, then (with `days`) the days they touch."""
    for table in HOURLY_TABLES:
        cursor.execute(f"DELETE FROM {table} WHERE project_id = %s AND hour >= %s AND hour < %s",
                       [project_id, lo, hi])
    _rows_insert(cursor, project_id=project_id, where="t.project_id = %s AND t.started_at >= %s AND t.started_at < %s",
                 params=[project_id, lo, hi])
    if days:
        days_recompute(cursor, project_id=project_id, lo=lo, hi=hi)


def _rows_insert(cursor, *, project_id: int, where: str, params: list) -> None:
    """Insert the hourly rows (task, step, group) of the tasks matching `where` (alias t)."""
    cursor.execute(task_rollup_sql(where), params)
    cursor.execute(step_rollup_sql(where, project_id=project_id), params)
    cursor.execute(budget_rollup_sql(where, project_id=project_id), [*params, project_id])
    rows = group_rows_sql(where, project_id=project_id, lookup=True)
    cursor.execute(f"INSERT INTO analysis_group_rollup ({', '.join(GROUP_COLUMNS)}) {rows}", params)


def _groups_recompute(cursor, *, project_id: int, groups: set[tuple[datetime, str, str]]) -> int:
    """Recompute every row of these (hour, release, environment) groups, all in one set of
    statements (late data scattered over many hours costs one pass, not one per hour), then the
    daily rows of their (day, release, environment). Returns the number of groups."""
    if not groups:
        return 0
    arrays = _columns(groups)
    lo, hi = min(arrays[0]), max(arrays[0]) + HOUR
    for table in HOURLY_TABLES:
        cursor.execute(f"DELETE FROM {table} WHERE project_id = %s AND hour >= %s AND hour < %s"
                       f" AND (hour, release, environment){_IN_GROUPS}", [project_id, lo, hi, *arrays])
    where = (f"t.project_id = %s AND t.started_at >= %s AND t.started_at < %s"
             f" AND ({_TASK_HOUR}, t.release, t.environment){_IN_GROUPS}")
    _rows_insert(cursor, project_id=project_id, where=where, params=[project_id, lo, hi, *arrays])
    days_recompute(cursor, project_id=project_id, lo=lo, hi=hi, day_groups={(day_floor(g[0]), g[1], g[2]) for g in groups})
    return len(groups)


def _analysis_recompute(cursor, *, project_id: int, slices: set[tuple[datetime, str, str, str]]) -> int:
    """Recompute the figures analyses make (the task rows' analysed count and budget sums; the
    group rollup's finding, budget and what-if rows and its task rows' analysed count) of these
    (hour, release, environment, task name) slices from the slices' tasks and their analyses:
    no step is read. Returns the number of slices."""
    if not slices:
        return 0
    arrays = _columns(slices)
    lo, hi = min(arrays[0]), max(arrays[0]) + HOUR
    where = (f"t.project_id = %s AND t.started_at >= %s AND t.started_at < %s"
             f" AND ({_TASK_HOUR}, t.release, t.environment, t.name){_IN_SLICES}")
    params = [project_id, lo, hi, *arrays]
    cursor.execute("UPDATE analysis_task_rollup SET analysed = 0, budget_ms = '{}'::jsonb WHERE project_id = %s"
                   f" AND (hour, release, environment, name){_IN_SLICES}", [project_id, *arrays])
    cursor.execute(budget_rollup_sql(where, project_id=project_id), [*params, project_id])
    cursor.execute("DELETE FROM analysis_group_rollup WHERE project_id = %s AND dimension = ANY(%s)"
                   f" AND (hour, release, environment, task_name){_IN_SLICES}",
                   [project_id, list(ANALYSIS_DIMENSIONS), *arrays])
    rows = analysis_rows_sql(where, project_id=project_id)
    cursor.execute(f"INSERT INTO analysis_group_rollup ({', '.join(GROUP_COLUMNS)}) {rows}", params)
    cursor.execute(f"""
        UPDATE analysis_group_rollup r SET analysed = coalesce(n.analysed, 0)
        FROM (SELECT h.hour, h.release, h.environment, h.task_name, n.analysed
              FROM unnest(%s::timestamptz[], %s::text[], %s::text[], %s::text[]) h(hour, release, environment, task_name)
              LEFT JOIN (SELECT {_TASK_HOUR} AS hour, t.release, t.environment, t.name AS task_name, count(*) AS analysed
                         FROM ingest_task t JOIN analysis_taskanalysis ta
                              ON ta.task_id = t.id AND ta.project_id = t.project_id
                         WHERE {where} AND ta.analyzed_at IS NOT NULL AND t.duration_ms IS NOT NULL
                         GROUP BY 1, 2, 3, 4) n USING (hour, release, environment, task_name)) n
        WHERE r.project_id = %s AND r.dimension = 'task' AND r.hour = n.hour AND r.release = n.release
          AND r.environment = n.environment AND r.task_name = n.task_name""", [*arrays, *params, project_id])
    days_recompute(cursor, project_id=project_id, lo=lo, hi=hi, day_groups={(day_floor(x[0]), x[1], x[2]) for x in slices},
                   tables=("analysis_task_rollup", "analysis_group_rollup"), dimensions=("task", *ANALYSIS_DIMENSIONS))
    return len(slices)


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
        samples.hours_recompute(cursor, project_id=project.pk)
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


# Connections a rebuild outside a transaction uses at once (one per core, at most 4): a day each.
REBUILD_WORKERS = max(1, min(4, os.cpu_count() or 1))


def _spans_recompute(spans: list[tuple[datetime, datetime]], *, project_id: int, workers: int, days: bool,
                     done: Callable[[datetime], None] | None = None) -> None:
    """_range_recompute of each [lo, hi) span of a project in a transaction of its own, on
    `workers` connections at once (each thread's own; closed after)."""
    def one(lo: datetime, hi: datetime) -> datetime:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL work_mem = '64MB'")
                _range_recompute(cursor, project_id=project_id, lo=lo, hi=hi, days=days)
            return lo
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for finished in as_completed([pool.submit(one, lo, hi) for lo, hi in spans]):
            lo = finished.result()
            if done:
                done(lo)


def _project_rebuild_parallel(*, project: Project, progress: Callable[[str], None] | None, until: datetime | None,
                              workers: int) -> int:
    """project_rebuild on `workers` connections at once, a day per transaction: each day's rows
    are replaced atomically (readers see a day's old figures or its new ones), rows beyond the
    project's data are deleted at the end, then the release totals. The caller holds _LOCK."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(started_at), max(started_at) FROM ingest_task WHERE project_id = %s", [project.pk])
        first, last = cursor.fetchone()
    days: list[datetime] = []
    if first is not None:
        day = day_floor(first)
        while day <= last:
            days.append(day)
            day += DAY

    _spans_recompute([(day, day + DAY) for day in days], project_id=project.pk, workers=workers, days=True,
                     done=(lambda day: progress(f"{project.name}: {day:%Y-%m-%d}")) if progress else None)
    with transaction.atomic(), connection.cursor() as cursor:
        for table in TABLES:
            if days and table != RELEASE_TABLE:
                cursor.execute(f"DELETE FROM {table} WHERE project_id = %s AND (hour < %s OR hour >= %s)",
                               [project.pk, days[0], days[-1] + DAY])
            else:
                cursor.execute(f"DELETE FROM {table} WHERE project_id = %s", [project.pk])
        cursor.execute("SET LOCAL work_mem = '64MB'")
        samples.hours_recompute(cursor, project_id=project.pk)  # the samples' hours are their own
        until = until or watermark()
        if until is not None and days:
            release_totals_recompute(cursor, project_id=project.pk, hi=hour_floor(until))
        cursor.execute("SELECT count(DISTINCT hour) FROM analysis_task_rollup WHERE project_id = %s", [project.pk])
        return cursor.fetchone()[0]


def rollups_rebuild(*, project: Project | None = None, progress=None, now: datetime | None = None,
                    workers: int | None = None) -> dict[str, int]:
    """Recompute the rollups of one project, or of all projects and then set the watermark to
    the start of the rebuild (so the next refresh only looks at what arrived since). `now`: the
    time the rebuild stands for (default: the clock), e.g. the newest task of a loaded dataset.
    Outside a transaction the days are recomputed on `workers` connections in parallel
    (default REBUILD_WORKERS; 1: one transaction per project, as inside a transaction)."""
    workers = REBUILD_WORKERS if workers is None else workers
    if workers > 1 and not connection.in_atomic_block:
        started = now or utc_now()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [_LOCK])  # for the whole rebuild: no refresh meanwhile
        try:
            projects = [project] if project is not None else list(Project.objects.order_by("pk"))
            out = {p.name: _project_rebuild_parallel(project=p, progress=progress, workers=workers,
                                                     until=None if project is not None else started)
                   for p in projects}
            if project is None:
                watermark_set(started)
            for p in projects:
                _watermark_release(p.pk)  # rebuilt through the watermark: no longer behind it
            return out
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [_LOCK])
    if project is not None:
        with transaction.atomic():
            out = {project.name: project_rebuild(project=project, progress=progress)}
            _watermark_release(project.pk)
        return out
    started = now or utc_now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
        out = {p.name: project_rebuild(project=p, progress=progress, until=started)
               for p in Project.objects.order_by("pk")}
        watermark_set(started)
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM analysis_rollup_state WHERE name LIKE %s", [_HELD_LIKE])
    return out


def rollups_refresh(*, now: datetime | None = None) -> dict[str, int]:
    """The periodic job: recompute the hours that changed since the last run, one project at a
    time (docs/reliability.md, "One tenant's data cannot stall the others"). Skips (returns
    {"skipped": 1}) when another refresh holds the lock; a project never rolled up is rebuilt.

    Each project's refresh, and then its retention, is a transaction of its own (`analysis.jobs`):
    one that fails is rolled back, counted and retried with back-off, and its own watermark stays
    where its last success left it (`rollups:<project id>`, see `watermark`) while the others'
    moves on."""
    started = now or utc_now()
    clock = time.monotonic()
    # Completed hours go on several connections when this is not inside a caller's transaction
    # (their rows are new, and no reader looks past the watermark, which moves at the run's end).
    workers = 1 if connection.in_atomic_block else REBUILD_WORKERS
    with connection.cursor() as cursor:
        # A session lock: the run is many transactions (project_rebuild's transaction lock on the
        # same key is re-entrant within the session).
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [_LOCK])
        if not cursor.fetchone()[0]:
            return {"skipped": 1}
    try:
        mark = watermark()
        held = _held_watermarks()
        refresh_job = jobs.ProjectJob(jobs.ROLLUPS, now=started)
        retention_job = jobs.ProjectJob(jobs.RETENTION, now=started)
        totals: dict[str, int] = defaultdict(int)
        failed = 0
        for project_id in Project.objects.order_by("pk").values_list("pk", flat=True):
            # A rebuild of everything (no watermark: the first run, or a migration cleared it)
            # rebuilds the held projects too.
            prev = held[project_id] if project_id in held and mark is not None else mark
            done = (refresh_job.run(project_id, lambda p=project_id, v=prev: _project_refresh(
                project_id=p, prev=v, started=started, workers=workers))
                    if refresh_job.due(project_id) else jobs.FAILED)
            if isinstance(done, jobs.Failed):
                failed += 1
                _watermark_hold(project_id, prev)  # its readers keep to what it rolled up
                current = prev
            else:
                for key, value in done.items():
                    totals[key] += value
                if project_id in held:
                    _watermark_release(project_id)
                current = started
            if retention_job.due(project_id):
                deleted = retention_job.run(project_id, lambda p=project_id, c=current: _retention_delete(
                    project_id=p, now=started, hi=c))
                totals["deleted"] += 0 if isinstance(deleted, jobs.Failed) else deleted
        with transaction.atomic(), connection.cursor() as cursor:
            totals["deleted"] += _orphans_delete(cursor)
            watermark_set(started)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_LOCK])
    out = {key: totals[key] for key in ("hours", "groups", "slices", "sample_hours", "deleted")}
    if totals["rebuilt"]:
        out["rebuilt"] = totals["rebuilt"]
    if failed:
        out["failed"] = failed
    # Every minute: a refresh that found nothing to do is routine (DEBUG), one that did work is news.
    log.log(logging.INFO if any(out.values()) else logging.DEBUG,
            "analysis.rollups_refreshed hours=%d groups=%d slices=%d sample_hours=%d deleted=%d failed=%d ms=%.0f",
            out["hours"], out["groups"], out["slices"], out["sample_hours"], out["deleted"], failed,
            1000 * (time.monotonic() - clock))
    return out


def _project_refresh(*, project_id: int, prev: datetime | None, started: datetime, workers: int) -> dict[str, int]:
    """One project's part of the refresh, from its watermark `prev` (None: never rolled up, so
    rebuilt) to `started`. Every statement names the project (Citus routes it to one shard)."""
    with connection.cursor() as cursor:
        if prev is None:
            hours = project_rebuild(project=Project.objects.get(pk=project_id), until=started)
            return {"hours": hours, "rebuilt": 1}
        # Only complete hours are rolled up: readers read the hour in progress raw (see
        # covered_hours), so recomputing it every run would be wasted. What changed is recomputed
        # in the narrowest unit that holds it (docs/rollups.md, "Maintenance"):
        # - whole hours: those completed since the last run (every row is new);
        # - (hour, release, environment) groups holding a task with a new event (late data), or
        #   whose task count no longer matches the raw rows: every row of their tasks;
        # - (hour, release, environment, task name) slices holding a task analysed since the last
        #   run and nothing else: only the figures analyses make, no step read.
        prev_hi, hi = hour_floor(prev), hour_floor(started)
        since = prev - OVERLAP
        hour = f"date_bin(INTERVAL '1 hour', started_at, {ORIGIN})"
        whole: set[datetime] = set()
        if prev_hi < hi:
            cursor.execute(f"SELECT DISTINCT {hour} FROM ingest_task WHERE project_id = %s AND started_at >= %s"
                           " AND started_at < %s", [project_id, prev_hi, hi])
            whole = {at for at, in cursor.fetchall()}
        cursor.execute(f"SELECT {hour}, release, environment FROM ingest_task WHERE project_id = %s"
                       " AND last_event_at > %s AND started_at < %s GROUP BY 1, 2, 3", [project_id, since, hi])
        groups = set(cursor.fetchall()) | _mismatched_groups(cursor, project_id=project_id, since=started)
        groups = {g for g in groups if g[0] not in whole}
        cursor.execute(
            f"SELECT {_TASK_HOUR}, t.release, t.environment, t.name FROM analysis_taskanalysis a"
            " JOIN ingest_task t ON t.id = a.task_id AND t.project_id = a.project_id"
            " WHERE a.project_id = %s AND t.project_id = %s AND a.analyzed_at > %s AND t.started_at < %s"
            " GROUP BY 1, 2, 3, 4", [project_id, project_id, since, hi])
        slices = {key for key in cursor.fetchall() if key[0] not in whole and key[:3] not in groups}
        cursor.execute("SET LOCAL work_mem = '64MB'")
        # Release totals to redo: releases in a recomputed hour (before and after: a task can
        # leave a release's hour), of a recomputed group or slice, or in an hour that became
        # complete since the last run.
        changed = bool(whole or groups or slices)
        touched = (_releases_in(cursor, project_id=project_id, hours=whole, lo=prev_hi, hi=hi)
                   | {g[1] for g in groups} | {x[1] for x in slices}) if changed else set()
        hours = _completed_recompute(cursor, project_id=project_id, hours=whole, workers=workers) if changed else 0
        # Device telemetry: the hours that completed (by the samples' own time) and late ones.
        sample_hours = samples.refresh(cursor, project_id=project_id, prev_hi=prev_hi, hi=hi)
        partial = _groups_recompute(cursor, project_id=project_id, groups=groups)
        analysed = _analysis_recompute(cursor, project_id=project_id, slices=slices)
        if changed:
            touched |= _releases_in(cursor, project_id=project_id, hours=whole, lo=prev_hi, hi=hi)
            release_totals_recompute(cursor, project_id=project_id, hi=hi, releases=touched)
    return {"hours": hours, "groups": partial, "slices": analysed, "sample_hours": sample_hours}


def _completed_recompute(cursor, *, project_id: int, hours: set[datetime], workers: int) -> int:
    """Roll up hours that completed since the last refresh: with several `workers`, each hour's
    rows in a transaction of its own on one of that many connections, then their days in the
    caller's transaction (which moves the watermark: until it commits no reader looks at these
    hours' rows; if it fails, the next refresh recomputes them). Returns the number of hours."""
    if workers < 2 or len(hours) < 2:
        return hours_recompute(cursor, project_id=project_id, hours=hours)
    ordered = sorted(hours)
    _spans_recompute([(hour, hour + HOUR) for hour in ordered], project_id=project_id, workers=workers, days=False)
    days_recompute(cursor, project_id=project_id, lo=ordered[0], hi=ordered[-1] + HOUR)
    return len(ordered)


def _mismatched_groups(cursor, *, project_id: int, since: datetime) -> set[tuple[datetime, str, str]]:
    """(hour, release, environment) of recent complete hours whose rolled-up task count differs
    from the raw rows' (a task that moved to another hour or release, deleted tasks)."""
    hi = hour_floor(since)
    lo = hi - timedelta(hours=RECONCILE_HOURS)
    cursor.execute(f"""
        SELECT coalesce(a.hour, b.hour), coalesce(a.release, b.release), coalesce(a.environment, b.environment) FROM
            (SELECT date_bin(INTERVAL '1 hour', started_at, {ORIGIN}) AS hour, release, environment, count(*) AS n
             FROM ingest_task WHERE project_id = %s AND started_at >= %s AND started_at < %s GROUP BY 1, 2, 3) a
        FULL JOIN
            (SELECT hour, release, environment, sum(tasks) AS n FROM analysis_task_rollup
             WHERE project_id = %s AND hour >= %s AND hour < %s GROUP BY 1, 2, 3) b
            ON a.hour = b.hour AND a.release = b.release AND a.environment = b.environment
        WHERE a.n IS DISTINCT FROM b.n""", [project_id, lo, hi, project_id, lo, hi])
    return set(cursor.fetchall())


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


def _retention_delete(*, project_id: int, now: datetime, hi: datetime | None) -> int:
    """Delete a project's rollup rows older than AGENTOPS_RETENTION_DAYS; `hi`: the project's
    watermark, the hour its release totals are merged up to. Returns the rows deleted."""
    days = getattr(settings, "AGENTOPS_RETENTION_DAYS", 0)
    if not days:
        return 0
    cutoff = hour_floor(now - timedelta(days=days))
    deleted = 0
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"DELETE FROM {table} WHERE project_id = %s AND hour < %s", [project_id, cutoff])
            deleted += cursor.rowcount
        if deleted:
            # The day of the cut-off lost its daily row but keeps its later hours: merge them again,
            # or readers of whole days (and the release totals) would miss those hours.
            days_recompute(cursor, project_id=project_id, lo=cutoff, hi=cutoff + HOUR)
            if hi is not None:
                release_totals_recompute(cursor, project_id=project_id, hi=hour_floor(hi))
    return deleted


def watermark_set(value: datetime) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO analysis_rollup_state (name, watermark) VALUES ('rollups', %s)"
                       " ON CONFLICT (name) DO UPDATE SET watermark = EXCLUDED.watermark", [value])


def _held_name(project_id: int) -> str:
    return f"rollups:{int(project_id)}"


def _held_watermarks() -> dict[int, datetime | None]:
    """The projects whose refresh failed, and the watermark each is held at (None: never rolled up)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, watermark FROM analysis_rollup_state WHERE name LIKE %s", [_HELD_LIKE])
        return {int(name.split(":", 1)[1]): mark for name, mark in cursor.fetchall()}


def _watermark_hold(project_id: int, value: datetime | None) -> None:
    """Keep a project's watermark at `value` while the others' moves (the first hold stays)."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO analysis_rollup_state (name, watermark) VALUES (%s, %s)"
                       " ON CONFLICT (name) DO NOTHING", [_held_name(project_id), value])


def _watermark_release(project_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM analysis_rollup_state WHERE name = %s", [_held_name(project_id)])


def watermark(*, project_id: int | None = None) -> datetime | None:
    """Where the rollups are complete: the last refresh's start, or, for a project whose refresh
    failed since, where its own last success left it (`rollups_refresh`)."""
    names = ["rollups"] if project_id is None else ["rollups", _held_name(project_id)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, watermark FROM analysis_rollup_state WHERE name = ANY(%s)", [names])
        rows = dict(cursor.fetchall())
    return rows[names[-1]] if names[-1] in rows else rows.get("rollups")


def on_project_deleted(sender, *, instance, **kwargs) -> None:
    """Derived rows kept in plain SQL tables (no foreign key) go with their project."""
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"DELETE FROM {table} WHERE project_id = %s", [instance.pk])
    _watermark_release(instance.pk)
    jobs.forget(project_id=instance.pk)
