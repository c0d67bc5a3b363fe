"""The analysis' Celery tasks: thin wrappers that take ids and call the plain functions. acks_late and
prefetch 1 come from settings, so a task whose worker dies is delivered again; running one
twice is safe (claims, replace-not-append)."""

from __future__ import annotations

import logging
import time

from celery import shared_task

from analysis.engine import baselines, batch, learned, pipeline

log = logging.getLogger("agentops.analysis")


# Tasks per message: one message per ingest batch or sweep chunk instead of one per task keeps
# publishing off the ingest hot path (a publish costs a few milliseconds), while a chunk (well
# under a second of analysis) stays small enough to spread over the workers.
ENQUEUE_CHUNK = 100


@shared_task(name="analysis.analyse_task")
def analyse_task(task_pk: int, project_id: int | None = None) -> str:
    return pipeline.run(task_pk, project_id=project_id)


@shared_task(name="analysis.analyse_tasks")
def analyse_tasks(task_pks: list[int], project_id: int | None = None) -> dict[str, int]:
    """The batch path (analysis/engine/batch.py): claim these tasks if due, fill the batch up with other
    due tasks and keep going while tasks are due (bounded in time). A task whose analysis fails
    is logged and left to the sweep; it never stops the rest of the batch. A drain whose time ran
    out while tasks were still due sends itself on as a new message (behind the worker's other
    messages), so a backlog is worked off without waiting for the sweep. `project_id`: the
    tasks' project (every message sent now names it; one without it claims by task id alone)."""
    outcome = batch.run_ids(list(task_pks), projects=None if project_id is None else [project_id])
    if outcome.get("more_due"):
        try:
            analyse_tasks.apply_async(args=[[]])
        except Exception as exc:  # broker down: the sweep catches up
            log.warning("analysis.drain_continue_failed error=%s", exc)
    return outcome


def enqueue(task_pks: list[int], *, project_id: int, countdown: float = 0) -> None:
    """Messages for these tasks of one project (the project keeps each claim on its shards)."""
    for first in range(0, len(task_pks), ENQUEUE_CHUNK):
        analyse_tasks.apply_async(args=[task_pks[first:first + ENQUEUE_CHUNK]], kwargs={"project_id": project_id},
                                  countdown=countdown)


@shared_task(name="analysis.sweep")
def sweep() -> int:
    """Enqueue every due task nobody is analysing (catches up after a broker outage, a
    crashed worker, a task whose end was never reported)."""
    ids = pipeline.sweep()
    by_project: dict[int, list[int]] = {}
    for pk, project_id in ids.items():
        by_project.setdefault(project_id, []).append(pk)
    for project_id, pks in by_project.items():
        enqueue(pks, project_id=project_id)
    if ids:
        log.info("analysis.sweep enqueued=%d", len(ids))
    return len(ids)


@shared_task(name="analysis.refresh_baselines")
def refresh_baselines() -> None:
    baselines.all_projects_refresh()




@shared_task(name="analysis.learn_dependencies", ignore_result=True)
def learn_dependencies() -> int:
    """Learn again, from their recent runs, the call dependencies of the agents that ran since the
    last time (analysis/engine/learned.py). On the analysis queue: it reads steps, as analysis does."""
    started = time.perf_counter()
    refreshed = learned.refresh_due()
    if refreshed:
        log.info("analysis.learned agents=%d ms=%.0f", refreshed, 1000 * (time.perf_counter() - started))
    return refreshed
