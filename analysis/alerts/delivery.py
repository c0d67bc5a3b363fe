"""Delivering alert events: an outbox of Notifications worked by tasks on a queue of their own.

Evaluation only records: the transaction that stores a firing or resolved event also stores one
Notification per channel of the rule. After it commits, one `analysis.alerts.deliver` task per
notification goes to the alerts queue (`agentops.celery.alerts_queue`), which its own worker
serves, so no endpoint can hold up evaluation, the sweep or the rollups on the periodic queue.

One task run is one attempt. A retryable failure (network error, timeout, 5xx, 429) schedules the
next attempt with exponential back-off (RETRY_BASE_SECONDS doubling, capped at RETRY_MAX_SECONDS)
until the notification expires (EXPIRE_HOURS after the event): its state says so on the rule page
and in the events API. A 4xx or a refused target fails at once (the receiver, or our address
rules, will say the same again). A newer event of the same rule supersedes a notification still
pending for the same channel, so a receiver never hears "firing" after "resolved".

Per project, at most PROJECT_SLOTS attempts run at once (PostgreSQL advisory locks, released if
the worker dies) and their attempts may take at most PROJECT_SECONDS_PER_MINUTE of wall time over
the last minute. An attempt that finds its project over either budget waits, without counting as
an attempt, so one project's dead endpoints use its own share of the delivery workers, never
another project's. The event is `notified` once one of its channels accepted it.

Messages can be lost (a broker restart) or doubled (acks_late redelivery): the notification row is
the truth. A claim (`claimed_until`) makes a doubled message a no-op, and `redeliver_due`, run by
every alert evaluation, re-sends the message of any notification overdue by more than a minute.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q, Sum

from analysis.alerts import channels
from analysis.alerts.models import AlertEvent, Delivery, Notification

log = logging.getLogger(__name__)

RETRY_BASE_SECONDS = 5.0
RETRY_MAX_SECONDS = 300.0
EXPIRE_HOURS = 6
PROJECT_SLOTS = 2
PROJECT_SECONDS_PER_MINUTE = 60.0
# How long a project over its budget waits before its attempt asks again.
BUDGET_WAIT_SECONDS = 2.0
# A claimed notification is another task's until then (the attempt timeout with room to spare).
CLAIM_SECONDS = 60
OVERDUE_SECONDS = 60
# Advisory lock keys: (LOCK_NAMESPACE + slot, project id); ingest's locks use the one-bigint form,
# which PostgreSQL keeps apart from the two-int form.
LOCK_NAMESPACE = 0x0A1E0000


@dataclass(frozen=True)
class Outcome:
    """What one call of `attempt` did: `sent` (an attempt was made), `wait` seconds until the
    notification should be tried again (None: settled or not ours to try)."""

    sent: bool
    wait: float | None
    state: str


def _now() -> datetime:
    return datetime.now(tz=UTC)


def _target(channel: dict) -> str:
    if channel.get("type") == "email":
        to = channel.get("to")
        return ", ".join(to) if isinstance(to, list) else str(to or "")
    return str(channel.get("url") or "")[:2000]


def notifications_create(event: AlertEvent, *, now: datetime) -> list[Notification]:
    """The outbox rows for a notifiable event, in the caller's transaction; a newer event of the
    rule supersedes what is still pending for it."""
    rule = event.rule
    Notification.objects.filter(event__rule=rule, state=Notification.PENDING).exclude(event=event).update(
        state=Notification.SUPERSEDED, claimed_until=None)
    rows = [Notification(event=event, project_id=rule.project_id, channel_index=i, channel=channel,
                         target=_target(channel) if isinstance(channel, dict) else "", next_attempt_at=now,
                         expires_at=now + timedelta(hours=EXPIRE_HOURS))
            for i, channel in enumerate(rule.channels or [])]
    return Notification.objects.bulk_create(rows)


def enqueue(notification_ids: list[int], *, countdown: float = 0.0) -> None:
    """Publish one delivery task per notification; a broker outage is logged, and the next
    evaluation's `redeliver_due` publishes them again."""
    from analysis.alerts.tasks import deliver

    for pk in notification_ids:
        try:
            deliver.apply_async(args=[pk], countdown=countdown or None)
        except Exception:  # the broker is down: the outbox row waits for redeliver_due
            log.warning("alerts.enqueue_failed notification=%s", pk, exc_info=True)
            return


def backoff_seconds(attempts: int) -> float:
    """The wait after the attempts-th failed attempt: 5 s, 10 s, 20 s, … up to 5 minutes."""
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** max(0, attempts - 1))


def _claim(pk: int, now: datetime) -> Notification | None:
    with transaction.atomic():
        row = (Notification.objects.select_for_update(skip_locked=True, of=("self",))
               .select_related("event__rule__project").filter(pk=pk, state=Notification.PENDING).first())
        if row is None or (row.claimed_until and row.claimed_until > now):
            return None
        row.claimed_until = now + timedelta(seconds=CLAIM_SECONDS)
        row.save(update_fields=["claimed_until", "updated_at"])
        return row


def _release(row: Notification) -> None:
    Notification.objects.filter(pk=row.pk).update(claimed_until=None)


def _slot(project_id: int) -> int | None:
    """Take one of the project's delivery slots (a session advisory lock), or None when all are
    busy."""
    with connection.cursor() as cursor:
        for slot in range(PROJECT_SLOTS):
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE + slot, project_id])
            if cursor.fetchone()[0]:
                return slot
    return None


def _free(slot: int, project_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE + slot, project_id])


def seconds_spent(project_id: int, *, now: datetime) -> float:
    """The wall time the project's delivery attempts took over the last minute."""
    spent = (Delivery.objects.filter(at__gt=now - timedelta(minutes=1), event__rule__project_id=project_id)
             .aggregate(ms=Sum("duration_ms"))["ms"])
    return (spent or 0.0) / 1000.0


def attempt(pk: int, *, now: datetime | None = None) -> Outcome:
    """Make the notification's next attempt if it is due and its project has room; record it.
    `now` is the clock the schedule is read and written with (the wall clock unless a test
    replays one); claims and the time budget always use the wall clock."""
    now = now or _now()
    row = _claim(pk, _now())
    if row is None:
        return Outcome(False, None, "claimed or settled")
    if row.next_attempt_at > now:
        _release(row)
        return Outcome(False, (row.next_attempt_at - now).total_seconds(), row.state)
    if now >= row.expires_at:
        return _settle(row, Notification.EXPIRED, "expired")
    if seconds_spent(row.project_id, now=_now()) >= PROJECT_SECONDS_PER_MINUTE:
        _release(row)
        return Outcome(False, BUDGET_WAIT_SECONDS, "over the project's time budget")
    slot = _slot(row.project_id)
    if slot is None:
        _release(row)
        return Outcome(False, BUDGET_WAIT_SECONDS, "the project's slots are busy")
    try:
        tries = _send(row)
    finally:
        _free(slot, row.project_id)
    return _record(row, tries, now=now)


def _send(row: Notification) -> list[channels.Attempt]:
    event = row.event
    data = channels.payload(event)
    body = json.dumps(data, sort_keys=True).encode()
    return channels.send_once(row.channel, data, body)


def _record(row: Notification, tries: list[channels.Attempt], *, now: datetime) -> Outcome:
    row.attempts += 1
    Delivery.objects.bulk_create([
        Delivery(event=row.event, channel=a.channel, target=a.target, attempt=row.attempts, ok=a.ok,
                 status_code=a.status_code, error=a.error, duration_ms=a.duration_ms, at=a.at) for a in tries])
    for a in tries:
        log.log(logging.INFO if a.ok else logging.WARNING, "alerts.delivered event=%s %s %s attempt=%s ok=%s %s",
                row.event_id, a.channel, a.target, row.attempts, a.ok, a.status_code or a.error)
    last = tries[-1] if tries else None
    if last is not None and last.ok:
        AlertEvent.objects.filter(pk=row.event_id).update(notified=True)
        return _settle(row, Notification.DELIVERED, "")
    error = last.error if last is not None else "unknown channel type"
    if last is None or not last.retryable:
        return _settle(row, Notification.FAILED, error)
    wait = backoff_seconds(row.attempts)
    when = now + timedelta(seconds=wait)
    if when >= row.expires_at:
        return _settle(row, Notification.EXPIRED, error)
    row.next_attempt_at, row.claimed_until, row.last_error = when, None, error[:200]
    row.save(update_fields=["attempts", "next_attempt_at", "claimed_until", "last_error", "updated_at"])
    return Outcome(True, wait, row.state)


def _settle(row: Notification, state: str, error: str) -> Outcome:
    row.state, row.claimed_until, row.last_error = state, None, error[:200]
    row.save(update_fields=["state", "attempts", "claimed_until", "last_error", "updated_at"])
    if state == Notification.EXPIRED:
        log.warning("alerts.notification_expired notification=%s event=%s %s after %s attempts",
                    row.pk, row.event_id, row.target, row.attempts)
    return Outcome(bool(row.attempts), None, state)


def redeliver_due(*, now: datetime | None = None) -> int:
    """Publish again the task of every pending notification overdue by OVERDUE_SECONDS (its
    message lost to a broker restart or a killed worker); returns how many."""
    now = now or _now()
    overdue = now - timedelta(seconds=OVERDUE_SECONDS)
    ids = list(Notification.objects.filter(state=Notification.PENDING, next_attempt_at__lt=overdue)
               .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
               .order_by("next_attempt_at").values_list("pk", flat=True)[:1000])
    enqueue(ids)
    return len(ids)
