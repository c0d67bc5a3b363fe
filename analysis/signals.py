"""The receiver of `ingest.services.tasks_ended`: enqueue the analysis of tasks that ended,
after the quiet period. Publishing must never break ingest: if the broker is down the error
is logged and the sweep picks the tasks up later."""

from __future__ import annotations

import logging

from django.conf import settings

log = logging.getLogger("agentops.analysis")


def on_tasks_ended(sender, *, project_id: int, task_ids: list[int], **kwargs) -> None:
    from analysis.tasks import enqueue

    try:
        enqueue(list(task_ids), countdown=settings.ANALYSIS_QUIET_SECONDS)
    except Exception as exc:  # broker down or unreachable: the sweep catches up
        log.warning("analysis.enqueue_failed project=%s tasks=%d error=%s", project_id, len(task_ids), exc)
