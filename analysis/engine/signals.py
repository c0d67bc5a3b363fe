"""The receiver of `ingest.services.tasks_ended`: enqueue the analysis of tasks that ended,
after the quiet period. Publishing must never break ingest: if the broker is down the error
is logged and the sweep picks the tasks up later.

A publish to a broker that is down costs ~6 s (redis-py retries the connection with backoff),
so after a failure this process stops trying for BROKER_PAUSE_SECONDS: one slow ingest request
per process and pause instead of every request (measured by tests/reliability/test_faults.py:
with Redis stopped, 60 batches went from over 60 s to a few seconds).

One message per project per TRIGGER_WINDOW_SECONDS, not one per ingest batch: a message's worker
claims every due task (the top-up), so the others were redundant, and under sustained load they
piled up behind a draining worker (one per batch, 6 a second at 3,000 spans/s): each cost ~15 ms to
find nothing to claim, and the tasks that came due meanwhile waited behind the pile (the soak's
"wait" stage, docs/scaling.md, 2-4 s over the quiet period). The window's message is due when the
window's last task is, so it finds all of them due; which process publishes it is decided in the
shared cache."""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger("agentops.analysis")

BROKER_PAUSE_SECONDS = 30
_paused_until = 0.0
# At most one analysis message per project per window; a task waits at most this long more.
TRIGGER_WINDOW_SECONDS = 1.0


def on_tasks_ended(sender, *, project_id: int, task_ids: list[int], **kwargs) -> None:
    global _paused_until
    from analysis.engine.tasks import enqueue

    if time.monotonic() < _paused_until:
        return  # the broker failed moments ago: the sweep catches these tasks up
    now = time.time()
    window_end = math.floor(now / TRIGGER_WINDOW_SECONDS + 1) * TRIGGER_WINDOW_SECONDS
    if not cache.add(f"analysis:trigger:{project_id}:{window_end}", 1, timeout=60):
        return  # this window's message is out: it is due after these tasks are and claims them too
    try:
        enqueue(list(task_ids), project_id=project_id, countdown=settings.ANALYSIS_QUIET_SECONDS + window_end - now)
    except Exception as exc:  # broker down or unreachable: the sweep catches up
        _paused_until = time.monotonic() + BROKER_PAUSE_SECONDS
        log.warning("analysis.enqueue_failed project=%s tasks=%d error=%s", project_id, len(task_ids), exc)
