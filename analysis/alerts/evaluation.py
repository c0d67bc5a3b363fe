"""Evaluating alert rules: measure, compare, move the state machine, record, notify.

States: ok → pending (breaching, not yet for long enough) → firing (breaching for `for_minutes`)
→ resolved (back under the threshold; becomes ok silently at the next healthy evaluation).
"For" counts consecutive evaluations: Celery beat evaluates every EVALUATION_MINUTES, so a rule
with for_minutes=10 fires at the 11th breaching evaluation in a row — ten minutes after the first
one, as in Prometheus. A rule notifies when it starts firing and when it resolves, never while
it keeps firing. A muted rule still changes state and records history, but sends nothing.

No data (fewer than min_samples in the window, or no baseline) either keeps the state as it is
(`keep`, the default: silence is not recovery) or counts as a breach (`alert`: for "tell me when
the traffic stops").

Safe to run twice: each rule is claimed with SELECT … FOR UPDATE SKIP LOCKED, so two overlapping
runs never evaluate (or notify) one rule at once, and a rule evaluated less than
DUPLICATE_SECONDS ago is skipped, so a beat message delivered twice counts once toward "for".
(The state machine itself never notifies twice: a firing rule that breaches again stays firing.)
Evaluation never talks to a channel: a notifiable event is stored with one Notification per
channel (the outbox, in the same transaction), and after commit each goes to the alerts queue as
a delivery task of its own (`delivery.py`), so a slow or dead endpoint never delays any rule's
evaluation, another project's deliveries, or the periodic jobs.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from celery.exceptions import SoftTimeLimitExceeded
from django.db import connection, transaction

from analysis import jobs
from analysis.alerts import delivery
from analysis.alerts.metrics import (
    FINDING_METRICS,
    METRICS,
    Measurement,
    MetricSpec,
    measure,
    measure_rolled_up,
)
from analysis.alerts.models import AlertEvent, AlertRule

log = logging.getLogger(__name__)

EVALUATION_MINUTES = 1
DUPLICATE_SECONDS = 5
# A rule's queries get this long; a rule that needs more (a huge window on a huge table) is
# logged as failed and retried next minute instead of holding up every other rule.
RULE_TIMEOUT_SECONDS = 10
RECENT_VALUES_KEPT = 120  # evaluations shown by the sparkline (two hours at one a minute)
# The release baseline looks this far back: an old release may have no traffic in the window.
RELEASE_BASELINE_DAYS = 7


@dataclass(frozen=True)
class Observation:
    """One evaluation's reading: the value compared with the threshold (a percent change when
    the rule has a baseline), what it rests on, and whether there was enough data."""

    value: float | None
    raw_value: float | None
    baseline_value: float | None
    sample_count: int
    start: datetime
    end: datetime

    @property
    def has_data(self) -> bool:
        return self.value is not None


def rule_spec(rule: AlertRule) -> MetricSpec:
    return MetricSpec(metric=rule.metric, filters=rule.filters or {}, finding_kind=rule.finding_kind)


def _enough(m: Measurement, rule: AlertRule) -> bool:
    return m.value is not None and m.sample_count >= max(1, rule.min_samples)


def observe(rule: AlertRule, *, now: datetime) -> Observation:
    """Measure the rule's metric over its window ending now (and its baseline, if any)."""
    spec = rule_spec(rule)
    window = timedelta(minutes=rule.window_minutes)
    current = measure(project=rule.project, spec=spec, start=now - window, end=now)
    empty = Observation(None, current.value, None, current.sample_count, current.start, current.end)
    if not _enough(current, rule):
        return empty
    if rule.baseline == AlertRule.BASELINE_NONE:
        return Observation(current.value, current.value, None, current.sample_count,
                           current.start, current.end)
    if rule.baseline == AlertRule.BASELINE_PREVIOUS_WEEK:
        week = timedelta(days=7)
        base = measure(project=rule.project, spec=spec, start=now - week - window, end=now - week)
    else:
        # Seven days of a release: from the latency rollups when they cover the metric and its
        # filters (within 1.93 %; a few ms instead of a scan of every step of the week).
        base_spec = MetricSpec(metric=rule.metric, finding_kind=rule.finding_kind,
                               filters={**spec.filters, "release": rule.baseline_release})
        span = {"start": now - timedelta(days=RELEASE_BASELINE_DAYS), "end": now}
        base = (measure_rolled_up(project=rule.project, spec=base_spec, **span)
                or measure(project=rule.project, spec=base_spec, **span))
    if not _enough(base, rule) or not base.value:
        return Observation(None, current.value, base.value, current.sample_count, current.start, current.end)
    change = 100.0 * (current.value / base.value - 1.0)
    return Observation(change, current.value, base.value, current.sample_count, current.start, current.end)


def breaches(rule: AlertRule, value: float) -> bool:
    return value > rule.threshold if rule.comparator == AlertRule.GT else value < rule.threshold


def evaluations_needed(rule: AlertRule) -> int:
    """Breaching evaluations in a row before the rule fires."""
    return math.ceil(rule.for_minutes / EVALUATION_MINUTES) + 1


def next_state(rule: AlertRule, *, breaching: bool | None) -> tuple[str, int]:
    """The state and consecutive-breach count after one evaluation. `breaching` None means no
    data under the `keep` behaviour: nothing changes. Pure: the whole state machine is here."""
    if breaching is None:
        return rule.state, rule.consecutive
    if not breaching:
        if rule.state == AlertRule.FIRING:
            return AlertRule.RESOLVED, 0
        return AlertRule.OK, 0
    count = rule.consecutive + 1
    if rule.state == AlertRule.FIRING or count >= evaluations_needed(rule):
        return AlertRule.FIRING, count
    return AlertRule.PENDING, count


def tasks_link(rule: AlertRule, obs: Observation) -> str:
    """The task list filtered to what the rule measured over the window, slowest first."""
    f = rule.filters or {}
    params = {"project": rule.project.name, "since": obs.start.isoformat(), "until": obs.end.isoformat()}
    for key, param in (("task_name", "name"), ("release", "release"), ("environment", "environment"),
                       ("device", "device")):
        if f.get(key):
            params[param] = f[key]
    if rule.metric in FINDING_METRICS:
        if rule.finding_kind:
            params["finding"] = rule.finding_kind
    elif rule.metric == "error_rate":
        params["status"] = "error"
    else:
        params["sort"] = "-duration_ms"
        if rule.metric.startswith("task_duration") and rule.baseline == AlertRule.BASELINE_NONE:
            params["min_duration_ms"] = f"{rule.threshold:g}"
    return "/tasks?" + urlencode(params)


def _remember(rule: AlertRule, obs: Observation, now: datetime) -> None:
    value = None if obs.raw_value is None else round(obs.raw_value, 3)
    rule.recent = [*(rule.recent or []), [now.isoformat(), value]][-RECENT_VALUES_KEPT:]
    rule.last_value = obs.raw_value
    rule.last_sample_count = obs.sample_count
    rule.last_evaluated_at = now


def rule_evaluate(*, rule: AlertRule, now: datetime) -> AlertEvent | None:
    """One evaluation of a locked rule: update it, record a state change. Returns the event when
    the change must be notified (firing or resolved on an unmuted rule)."""
    obs = observe(rule, now=now)
    if obs.has_data:
        breaching = breaches(rule, obs.value)
    else:
        breaching = True if rule.no_data == AlertRule.NO_DATA_ALERT else None
    previous = rule.state
    rule.state, rule.consecutive = next_state(rule, breaching=breaching)
    _remember(rule, obs, now)
    rule.save(update_fields=["state", "consecutive", "last_value", "last_sample_count",
                             "last_evaluated_at", "recent", "updated_at"])
    if rule.state == previous or (previous == AlertRule.RESOLVED and rule.state == AlertRule.OK):
        return None
    notify = rule.state in (AlertRule.FIRING, AlertRule.RESOLVED) and not rule.muted
    event = AlertEvent.objects.create(
        rule=rule, state=rule.state, previous_state=previous, value=obs.value,
        baseline_value=obs.baseline_value, threshold=rule.threshold, sample_count=obs.sample_count,
        window_start=obs.start, window_end=obs.end, link=tasks_link(rule, obs), at=now)
    log.info("alerts.state_changed rule=%s %s→%s value=%s", rule.pk, previous, rule.state, obs.value)
    if not notify:
        return None
    event.outbox = delivery.notifications_create(event, now=now)
    return event


def rules_evaluate(*, now: datetime | None = None, rule_ids: list[int] | None = None,
                   deliver: bool = True) -> dict:
    """Evaluate every enabled rule (or the given ones) and queue the delivery of what changed
    (`deliver`: publish the tasks; the outbox rows are written either way). Returns counts and
    timings for logs and the benchmark."""
    now = now or datetime.now(tz=UTC)
    fresh = now - timedelta(seconds=DUPLICATE_SECONDS)
    ids = AlertRule.objects.filter(enabled=True)
    if rule_ids is not None:
        ids = ids.filter(pk__in=rule_ids)
    to_notify: list[AlertEvent] = []
    evaluated, seconds = 0, []
    # Each rule in a transaction of its own; a project whose rules fail is counted (analysis/jobs.py,
    # shown by /api/v1/status) but not backed off: its other rules must still fire, and a failing
    # rule costs at most RULE_TIMEOUT_SECONDS a minute.
    job = jobs.ProjectJob(jobs.ALERTS, now=now)
    failing: dict[int, Exception] = {}
    passed: set[int] = set()
    for pk, project_id in ids.order_by("pk").values_list("pk", "project_id"):
        started = time.perf_counter()
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL statement_timeout = {int(RULE_TIMEOUT_SECONDS * 1000)}")
                rule = (AlertRule.objects.select_for_update(skip_locked=True, of=("self",))
                        .select_related("project").filter(pk=pk, enabled=True).first())
                if rule is None or (rule.last_evaluated_at and rule.last_evaluated_at > fresh):
                    continue
                event = rule_evaluate(rule=rule, now=now)
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:
            # One rule whose queries fail or time out must not stop the others.
            log.exception("alerts.evaluation_failed rule=%s project=%s", pk, project_id)
            failing[project_id] = exc
            continue
        passed.add(project_id)
        evaluated += 1
        seconds.append(time.perf_counter() - started)
        if event is not None:
            to_notify.append(event)
    for project_id, exc in failing.items():
        job.failed(project_id, exc)
    for project_id in passed - failing.keys():
        job.succeeded(project_id)
    if deliver:
        delivery.enqueue([n.pk for event in to_notify for n in event.outbox])
    return {"evaluated": evaluated, "notified": len(to_notify), "seconds": seconds}


def metric_label(metric: str) -> str:
    return METRICS[metric][2] if metric in METRICS else metric
