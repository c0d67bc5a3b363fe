"""Reads of alert rules and their history; every selector takes the project first."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from analysis.alerts.models import AlertEvent, AlertRule, Delivery, Notification
from ingest.models import Project


def rule_list(*, project: Project) -> QuerySet[AlertRule]:
    return AlertRule.objects.filter(project=project).select_related("project").order_by("name", "id")


def rule_get(*, project: Project, rule_id: int) -> AlertRule | None:
    return rule_list(project=project).filter(pk=rule_id).first()


def event_list(*, project: Project, rule_id: int | None = None, before_id: int | None = None,
               limit: int = 50) -> tuple[list[AlertEvent], int | None]:
    """A page of state changes, newest first, with where each channel's delivery stands and its
    attempts; and the id to pass
    as `before_id` for the next page (None on the last page)."""
    qs = AlertEvent.objects.filter(rule__project=project)
    if rule_id is not None:
        qs = qs.filter(rule_id=rule_id)
    if before_id is not None:
        qs = qs.filter(pk__lt=before_id)
    qs = qs.select_related("rule").prefetch_related(
        Prefetch("deliveries", queryset=Delivery.objects.order_by("at", "id")),
        Prefetch("notifications", queryset=Notification.objects.order_by("channel_index", "id")))
    rows = list(qs.order_by("-id")[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].pk
    return rows, None
