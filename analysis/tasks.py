"""Celery tasks: thin wrappers that take ids and call the plain functions. acks_late and
prefetch 1 come from settings, so a task whose worker dies is delivered again; running one
twice is safe (claims, replace-not-append)."""

from __future__ import annotations

import logging

from celery import shared_task

from analysis import baselines, pipeline

log = logging.getLogger("agentops.analysis")


@shared_task(name="analysis.analyse_task")
def analyse_task(task_pk: int) -> str:
    return pipeline.run(task_pk)


@shared_task(name="analysis.sweep")
def sweep() -> int:
    """Enqueue every due task nobody is analysing (catches up after a broker outage, a
    crashed worker, a task whose end was never reported)."""
    ids = pipeline.sweep()
    for pk in ids:
        analyse_task.delay(pk)
    if ids:
        log.info("analysis.sweep enqueued=%d", len(ids))
    return len(ids)


@shared_task(name="analysis.refresh_baselines")
def refresh_baselines() -> None:
    baselines.all_projects_refresh()
