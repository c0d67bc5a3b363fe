"""The alerts' Celery tasks: `evaluate_alerts`, which beat runs every minute on the periodic
queue, and `deliver`, one attempt at one notification, on the alerts queue (`delivery.py`)."""

from __future__ import annotations

import logging

from celery import shared_task

from analysis.alerts import delivery
from analysis.alerts.evaluation import rules_evaluate

log = logging.getLogger(__name__)


@shared_task(name="analysis.alerts.tasks.evaluate_alerts", ignore_result=True,
             soft_time_limit=55, time_limit=58)
def evaluate_alerts() -> dict:
    result = rules_evaluate()
    seconds = result.pop("seconds")
    result["redelivered"] = delivery.redeliver_due()
    # Every minute: an evaluation that changed nothing is routine (DEBUG); one that notified is news.
    log.log(logging.INFO if result["notified"] or result["redelivered"] else logging.DEBUG,
            "alerts.evaluated rules=%s notified=%s redelivered=%s max_rule_ms=%.1f", result["evaluated"],
            result["notified"], result["redelivered"], 1000 * max(seconds, default=0.0))
    return result


@shared_task(name="analysis.alerts.deliver", ignore_result=True, acks_late=True)
def deliver(notification_id: int) -> str:
    """One attempt; a notification that must wait (back-off, or its project over budget) is
    published again for when it is due. The outbox row is the truth, so a lost or doubled
    message costs nothing."""
    outcome = delivery.attempt(notification_id)
    if outcome.wait is not None:
        delivery.enqueue([notification_id], countdown=outcome.wait)
    return outcome.state
