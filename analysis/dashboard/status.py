"""Pipeline health, as a user sees it: how far findings are behind ingest, how far the rollups
are behind the clock, and how many analysis messages wait in the broker.

- Analysis lag: the age of the oldest task that is due (ended and quiet, analysis/engine/batch.py)
  and not analysed since its last event, counted from the moment it became due. 0 when every
  due task is analysed. Nothing is dropped while it grows: due tasks wait in the database and
  the sweep hands them out as workers free up.
- Rollup lag: the clock minus the project's rollup watermark (the last refresh that completed
  for it); `hours_behind` counts complete hours the dashboard still reads raw.
- Jobs: the periodic jobs whose part for this project is failing (analysis/jobs.py), each with
  its failures in a row, first and last error time, the error and when it is retried.
- Queue depth: messages waiting on the analysis queue of the broker (None when it cannot be
  asked).

One query per figure, over the sweep's horizon of recent tasks (index on last_event_at).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from agentops.db import read_connection
from analysis import jobs, rollups
from analysis.engine import batch
from ingest.models import Project

log = logging.getLogger("agentops.analysis")

# Below this the UI says nothing: a task is analysed a few seconds after its quiet period.
BEHIND_SECONDS = 60
# Counting pending tasks stops here (the figure says "at least").
COUNT_CAP = 100_000
# How long the pages' notice may reuse a project's lag (a stored batch drops it sooner).
LAG_CACHE_SECONDS = 5


def cached_analysis_lag(*, project: Project) -> dict:
    """`analysis_lag` as every page's notice reads it: computed at most once per LAG_CACHE_SECONDS
    per project, and again as soon as a batch stores results of the project (it drops the entry).
    The count reads every task of the sweep's horizon: ~1 s with 500,000 tasks in 6 hours."""
    key = batch.analysis_lag_key(project.pk)
    try:
        found = cache.get(key)
    except Exception:  # no cache: read it live
        return analysis_lag(project=project)
    if found is None:
        found = analysis_lag(project=project)
        try:
            cache.set(key, found, LAG_CACHE_SECONDS)
        except Exception as exc:
            log.info("analysis.lag_cache_unavailable error=%s", exc)
    return found


def analysis_lag(*, project: Project, now: datetime | None = None) -> dict:
    """{"lag_seconds", "pending_tasks", "oldest_due_at"} for one project."""
    now = now or timezone.now()
    quiet = timedelta(seconds=settings.ANALYSIS_QUIET_SECONDS)
    abandon = timedelta(seconds=settings.ANALYSIS_ABANDON_SECONDS)
    with read_connection().cursor() as cursor:
        cursor.execute(f"""
            SELECT count(*), min(due) FROM (
                SELECT CASE WHEN t.reported AND t.ended_at IS NOT NULL THEN t.last_event_at + %(quiet_for)s
                            ELSE t.last_event_at + %(abandon_after)s END AS due
                FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id AND a.project_id = t.project_id
                WHERE t.project_id = %(project)s AND t.last_event_at > %(horizon)s AND {batch.DUE_SQL}
                LIMIT {COUNT_CAP}) due""",
                       {"quiet_for": quiet, "abandon_after": abandon, "project": project.pk, **batch.due_params(now),
                        "horizon": now - timedelta(seconds=batch.SWEEP_HORIZON_SECONDS)})
        pending, oldest = cursor.fetchone()
    lag = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
    return {"lag_seconds": round(lag, 1), "pending_tasks": pending,
            "oldest_due_at": oldest.isoformat() if oldest else None}


def rollup_lag(*, project_id: int | None = None, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    mark = rollups.watermark(project_id=project_id)
    if mark is None:
        return {"watermark": None, "lag_seconds": None, "hours_behind": None}
    behind = (rollups.hour_floor(now) - rollups.hour_floor(mark)) // timedelta(hours=1)
    return {"watermark": mark.isoformat(), "lag_seconds": round(max(0.0, (now - mark).total_seconds()), 1),
            "hours_behind": max(0, behind)}


def queue_depth() -> int | None:
    """Messages waiting on the analysis queue (not yet taken by a worker)."""
    from agentops.celery import app

    name = app.conf.task_default_queue
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=1)
            channel = conn.default_channel
            client = getattr(channel, "client", None)
            if client is not None:  # Redis: the queue is a list, absent when empty
                return int(client.llen(name))
            return channel.queue_declare(name, passive=True).message_count
    except Exception as exc:  # broker down or the queue never declared: unknown, not an error page
        log.info("analysis.queue_depth_unknown error=%s", exc)
        return None


def pipeline_status(*, project: Project, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    analysis = analysis_lag(project=project, now=now)
    return {"project": project.name, "now": now.isoformat(), "analysis": analysis,
            "rollups": rollup_lag(project_id=project.pk, now=now),
            "queue_depth": queue_depth(), "behind": behind_text(analysis["lag_seconds"]),
            "jobs": jobs.failures_of(project_id=project.pk)}


def behind_text(lag_seconds: float) -> str:
    """What the UI says when findings lag: "" under BEHIND_SECONDS."""
    if lag_seconds < BEHIND_SECONDS:
        return ""
    minutes = int(lag_seconds // 60)
    return f"findings are {minutes} minute{'s' if minutes != 1 else ''} behind"
