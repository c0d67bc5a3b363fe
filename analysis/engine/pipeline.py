"""When a task is analysed, and by whom, beyond the ingest trigger: the one-task entry ("analyse
this one now") and the sweep. Both are the batch path's (analysis/engine/batch.py: the due rule,
the claim, the loading and the storing); one task is a batch of one.

The sweep (Celery beat, every few seconds) marks due, unclaimed tasks as `queued` with a short
lease, in the claim statement every worker uses, and returns them to be enqueued; the lease stops
the next sweep from enqueuing them again while they wait in the broker. A worker may claim a task
that is `queued` (whoever enqueued it) or whose claim expired.
"""

from __future__ import annotations

from analysis.engine import batch

# How long a task the sweep enqueued is left to the queue before the sweep enqueues it again.
QUEUED_LEASE_SECONDS = 120
SWEEP_BATCH = 500


def run(task_pk: int, *, project_id: int | None = None, force: bool = False) -> str:
    """Analyse a task if it is due (or `force`) and nobody else is on it. Returns what happened:
    analysed, not_due, claimed_elsewhere, claim_lost or failed (logged; the claim then runs out
    and the sweep hands the task out again). `project_id`: the task's, when known (its claim
    then reads one shard on Citus)."""
    projects = None if project_id is None else [project_id]
    token, claimed = batch.claim_ids([task_pk], projects=projects, force=force)
    if not claimed:
        return "claimed_elsewhere" if force or batch.is_due(task_pk, project_id=project_id) else "not_due"
    outcome = batch.analyse_claimed(claimed, token=token)
    return next((k for k in ("analysed", "failed") if outcome[k]), "claim_lost")


def sweep(*, limit: int = SWEEP_BATCH) -> batch.Claimed:
    """Mark due, unclaimed tasks as queued and return them, {id: project} (the caller enqueues
    them, a message per project)."""
    return batch.claim_due(limit=limit, token=batch.QUEUED, seconds=QUEUED_LEASE_SECONDS, bounded=False)[1]
