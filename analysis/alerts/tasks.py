"""The Celery task beat runs every minute: a thin wrapper around `rules_evaluate`."""

from __future__ import annotations

import logging

from celery import shared_task

from analysis.alerts.evaluation import rules_evaluate

log = logging.getLogger(__name__)


@shared_task(name="analysis.alerts.tasks.evaluate_alerts", ignore_result=True,
             soft_time_limit=55, time_limit=58)
def evaluate_alerts() -> dict:
    result = rules_evaluate()
    seconds = result.pop("seconds")
    log.info("alerts.evaluated rules=%s notified=%s max_rule_ms=%.1f", result["evaluated"],
             result["notified"], 1000 * max(seconds, default=0.0))
    return result
