"""The receiver of `ingest.services.tasks_ended`: enqueue the analysis of tasks that ended,
after the quiet period. Publishing must never break ingest: if the broker is down the error
is logged and the sweep picks the tasks up later.

A publish to a broker that is down costs ~6 s (redis-py retries the connection with backoff),
so after a failure this process stops trying for BROKER_PAUSE_SECONDS: one slow ingest request
per process and pause instead of every request (measured by tests/reliability/test_faults.py:
with Redis stopped, 60 batches went from over 60 s to a few seconds)."""

from __future__ import annotations

import logging
import time

from django.conf import settings

log = logging.getLogger("agentops.analysis")

BROKER_PAUSE_SECONDS = 30
_paused_until = 0.0


def on_tasks_ended(sender, *, project_id: int, task_ids: list[int], **kwargs) -> None:
    global _paused_until
    from analysis.engine.tasks import enqueue

    if time.monotonic() < _paused_until:
        return  # the broker failed moments ago: the sweep catches these tasks up
    try:
        enqueue(list(task_ids), countdown=settings.ANALYSIS_QUIET_SECONDS)
    except Exception as exc:  # broker down or unreachable: the sweep catches up
        _paused_until = time.monotonic() + BROKER_PAUSE_SECONDS
        log.warning("analysis.enqueue_failed project=%s tasks=%d error=%s", project_id, len(task_ids), exc)
