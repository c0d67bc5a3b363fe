"""Alert rules, the history of their state changes and the log of every delivery attempt.

A rule watches one metric (see `metrics.py`) of a project's traffic over a trailing window,
optionally relative to a baseline, and moves through ok → pending → firing → resolved
(`evaluation.py`). Only firing and resolved are notified; every state change is an AlertEvent.
"""

from __future__ import annotations

from django.db import models

from ingest.models import Project


class AlertRule(models.Model):
    GT, LT = "gt", "lt"
    COMPARATORS = [GT, LT]

    BASELINE_NONE = "none"
    BASELINE_PREVIOUS_WEEK = "previous_week"
    BASELINE_RELEASE = "release"
    BASELINES = [BASELINE_NONE, BASELINE_PREVIOUS_WEEK, BASELINE_RELEASE]

    NO_DATA_KEEP = "keep"
    NO_DATA_ALERT = "alert"
    NO_DATA_BEHAVIOURS = [NO_DATA_KEEP, NO_DATA_ALERT]

    OK, PENDING, FIRING, RESOLVED = "ok", "pending", "firing", "resolved"
    STATES = [OK, PENDING, FIRING, RESOLVED]

    FILTER_KEYS = ["task_name", "step_kind", "step_name", "model", "device", "release", "environment"]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=200)
    metric = models.CharField(max_length=40)
    # Only for finding_rate / wasted_share: which finding kind counts ("" = any).
    finding_kind = models.CharField(max_length=40, blank=True, default="")
    comparator = models.CharField(max_length=2, choices=[(c, c) for c in COMPARATORS], default=GT)
    # Milliseconds for latency metrics, percent for rates; percent change under a baseline.
    threshold = models.FloatField()
    window_minutes = models.PositiveIntegerField(default=10)
    for_minutes = models.PositiveIntegerField(default=0)
    min_samples = models.PositiveIntegerField(default=20)
    filters = models.JSONField(default=dict, blank=True)
    baseline = models.CharField(max_length=16, choices=[(b, b) for b in BASELINES], default=BASELINE_NONE)
    baseline_release = models.CharField(max_length=200, blank=True, default="")
    channels = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    muted = models.BooleanField(default=False)
    no_data = models.CharField(max_length=8, choices=[(b, b) for b in NO_DATA_BEHAVIOURS],
                               default=NO_DATA_KEEP)

    state = models.CharField(max_length=10, choices=[(s, s) for s in STATES], default=OK)
    consecutive = models.PositiveIntegerField(default=0)  # consecutive breaching evaluations
    last_value = models.FloatField(null=True, blank=True)
    last_sample_count = models.IntegerField(null=True, blank=True)
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    # The last evaluations as [[iso time, value or null], ...] for the sparkline (capped).
    recent = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        indexes = [models.Index(fields=["project", "name"], name="alert_rule_project_name")]

    def __str__(self) -> str:
        return self.name


class AlertEvent(models.Model):
    """One state change of a rule, with the value that caused it."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="events")
    state = models.CharField(max_length=10)
    previous_state = models.CharField(max_length=10, blank=True, default="")
    value = models.FloatField(null=True, blank=True)
    baseline_value = models.FloatField(null=True, blank=True)
    threshold = models.FloatField()
    sample_count = models.IntegerField(default=0)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    link = models.CharField(max_length=2000, blank=True, default="")
    notified = models.BooleanField(default=False)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["rule", "-at"], name="alert_event_rule_time")]


class Delivery(models.Model):
    """One attempt to deliver an event to one channel."""

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=20)  # webhook | email
    target = models.CharField(max_length=2000)  # the URL or the addresses, never the secret
    attempt = models.PositiveSmallIntegerField(default=1)
    ok = models.BooleanField(default=False)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    duration_ms = models.FloatField(null=True, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["event", "at"], name="alert_delivery_event_time"),
                   # The per-project time budget sums the last minute's attempts.
                   models.Index(fields=["at"], name="alert_delivery_time")]


class Notification(models.Model):
    """The promise to deliver one event to one channel: the outbox row a delivery task works
    from (`delivery.py`). It is written in the transaction that records the event, so a crash
    between evaluation and delivery loses nothing, and it stays `pending` (retried with back-off)
    until the channel accepts it or it expires."""

    PENDING, DELIVERED, FAILED, EXPIRED, SUPERSEDED = "pending", "delivered", "failed", "expired", "superseded"
    STATES = [PENDING, DELIVERED, FAILED, EXPIRED, SUPERSEDED]

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="notifications")
    # Denormalised from event.rule: the per-project concurrency and time budget key on it.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    channel_index = models.PositiveSmallIntegerField()  # position in the rule's channels
    channel = models.JSONField()  # the channel as it was when the event happened
    target = models.CharField(max_length=2000)  # the URL or the addresses, never the secret
    state = models.CharField(max_length=12, choices=[(s, s) for s in STATES], default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    # A delivery task holds the row until then; a second message for it meanwhile does nothing.
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["channel_index", "id"]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="alert_notification_due",
                         condition=models.Q(state="pending")),
            models.Index(fields=["event", "channel_index"], name="alert_notification_event"),
        ]
