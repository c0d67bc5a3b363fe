"""When a task is analysed, and by whom.

A task is *due* when it has ended (a task event with an end, or an OTLP root span) and no
event arrived for ANALYSIS_QUIET_SECONDS — or, if its end was never reported, after
ANALYSIS_ABANDON_SECONDS of silence — and it was never analysed or got events after the
last analysis (`TaskAnalysis.analyzed_through` < `Task.last_event_at`).

Claiming: one conditional UPDATE on the TaskAnalysis row sets `claimed_until` and a random
`claim_token` only if nobody holds an unexpired claim; zero rows updated means another
worker has it. Results are written in one transaction that re-checks the token under a row
lock, so a worker whose claim expired (stalled, or SIGKILLed and later resurrected) can never
overwrite the new owner's results, and a killed worker leaves nothing half-written: its
claim simply expires and the sweep hands the task out again.

The sweep (Celery beat, every few seconds) marks due, unclaimed tasks as `queued` with a
short lease in the same kind of conditional statement and enqueues them; the lease stops the
next sweep from enqueuing them again while they wait in the broker. A worker may claim a
task that is `queued` (whoever enqueued it) or whose claim expired.
"""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from analysis.engine import analyse

log = logging.getLogger("agentops.analysis")

QUEUED = "queued"
# A claim outlives any sane analysis (a 50,000-step task takes seconds); a crashed worker's
# task is handed out again after this.
CLAIM_SECONDS = getattr(settings, "ANALYSIS_CLAIM_SECONDS", 300)
# How long a task the sweep enqueued is left to the queue before the sweep enqueues it again.
QUEUED_LEASE_SECONDS = 120
SWEEP_BATCH = 500
# The sweep looks at tasks whose last event is at most this old, so each run reads a recent
# slice of the (project, last_event_at) index instead of every task ever stored. Tasks left
# unanalysed longer (an outage of hours) are picked up by `manage.py analyze --due`.
SWEEP_HORIZON_SECONDS = getattr(settings, "ANALYSIS_SWEEP_HORIZON_SECONDS", 6 * 3600)

_CLAIM = """
INSERT INTO analysis_taskanalysis (task_id, project_id, critical_path, budget, whatif, wasted_ms,
    top_finding, finding_kinds, claim_token, claimed_until)
SELECT t.id, t.project_id, '{}', '{}', '{}', 0, '', '{}', %(token)s, %(until)s FROM ingest_task t WHERE t.id = %(pk)s
ON CONFLICT (task_id) DO UPDATE SET claim_token = EXCLUDED.claim_token, claimed_until = EXCLUDED.claimed_until
WHERE analysis_taskanalysis.claimed_until IS NULL OR analysis_taskanalysis.claimed_until < %(now)s
   OR analysis_taskanalysis.claim_token = %(queued)s
RETURNING task_id
"""


def claim(task_pk: int, *, seconds: int | None = None) -> str | None:
    """Claim a task for analysis in one conditional statement; returns the claim token, or
    None if someone else holds an unexpired claim."""
    token = secrets.token_hex(8)
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM, {"token": token, "until": now + timedelta(seconds=seconds or CLAIM_SECONDS),
                                "pk": task_pk, "now": now, "queued": QUEUED})
        return token if cursor.fetchone() else None


def release(task_pk: int, token: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE analysis_taskanalysis SET claimed_until = NULL, claim_token = '' "
                       "WHERE task_id = %s AND claim_token = %s", [task_pk, token])


def is_due(task_pk: int) -> bool:
    return bool(_due_ids(task_ids=[task_pk], limit=1))


def _due_ids(*, task_ids: list[int] | None = None, project_id: int | None = None, limit: int,
             horizon_seconds: int | None = None) -> list[int]:
    now = timezone.now()
    quiet = now - timedelta(seconds=settings.ANALYSIS_QUIET_SECONDS)
    abandon = now - timedelta(seconds=settings.ANALYSIS_ABANDON_SECONDS)
    where, params = [], [quiet, abandon]
    if horizon_seconds is not None:  # the sweep: recent tasks nobody holds
        where.append("t.last_event_at > %s AND (a.claimed_until IS NULL OR a.claimed_until < %s)")
        params += [now - timedelta(seconds=horizon_seconds), now]
    if task_ids is not None:
        where.append("t.id = ANY(%s)")
        params.append(task_ids)
    if project_id is not None:
        where.append("t.project_id = %s")
        params.append(project_id)
    sql = f"""
        SELECT t.id FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id
        WHERE ((t.reported AND t.ended_at IS NOT NULL AND t.last_event_at < %s) OR t.last_event_at < %s)
          AND (a.task_id IS NULL OR a.analyzed_through IS NULL OR a.analyzed_through < t.last_event_at)
          {''.join(' AND ' + w for w in where)}
        ORDER BY t.last_event_at LIMIT {int(limit)}"""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [r[0] for r in cursor.fetchall()]


def run(task_pk: int, *, force: bool = False) -> str:
    """Analyse a task if it is due (or `force`) and nobody else is on it. Returns what
    happened: analysed, not_due, claimed_elsewhere or claim_lost."""
    if not force and not is_due(task_pk):
        return "not_due"
    token = claim(task_pk)
    if token is None:
        return "claimed_elsewhere"
    if not force and not is_due(task_pk):  # another worker analysed it between the check and the claim
        release(task_pk, token)
        return "not_due"
    try:
        analyse.analyse_task(task_pk, claim_token=token)
    except analyse.ClaimLost:
        log.warning("analysis.claim_lost task=%s", task_pk)
        return "claim_lost"
    except Exception:
        release(task_pk, token)
        raise
    return "analysed"


def sweep(*, limit: int = SWEEP_BATCH) -> list[int]:
    """Mark due, unclaimed tasks as queued and return their ids (the caller enqueues them)."""
    ids = _due_ids(limit=limit, horizon_seconds=SWEEP_HORIZON_SECONDS)
    if not ids:
        return []
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO analysis_taskanalysis (task_id, project_id, critical_path, budget, whatif, wasted_ms,
                top_finding, finding_kinds, claim_token, claimed_until)
            SELECT t.id, t.project_id, '{}', '{}', '{}', 0, '', '{}', %s, %s FROM ingest_task t WHERE t.id = ANY(%s)
            ON CONFLICT (task_id) DO UPDATE SET claim_token = EXCLUDED.claim_token,
                claimed_until = EXCLUDED.claimed_until
            WHERE analysis_taskanalysis.claimed_until IS NULL OR analysis_taskanalysis.claimed_until < %s
            RETURNING task_id
            """,
            [QUEUED, now + timedelta(seconds=QUEUED_LEASE_SECONDS), ids, now])
        return [r[0] for r in cursor.fetchall()]
