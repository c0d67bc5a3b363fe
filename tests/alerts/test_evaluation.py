"""The state machine: pending until the "for" duration passes, one notification when it fires,
none while it keeps firing, one when it recovers; no data keeps or alerts as configured."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail

from analysis.alerts.evaluation import evaluations_needed, next_state, rules_evaluate
from analysis.alerts.models import AlertEvent, AlertRule, Delivery
from analysis.models import Finding
from ingest.models import Task

from .conftest import NOW

MINUTE = timedelta(minutes=1)


@pytest.fixture
def rule(project):
    return AlertRule.objects.create(
        project=project, name="checkout p95 over 5 s", metric="task_duration_p95", comparator="gt",
        threshold=5000, window_minutes=10, for_minutes=3, min_samples=5,
        filters={"task_name": "checkout-agent", "environment": "production"},
        channels=[{"type": "email", "to": ["oncall@example.com"]}])


def run(minutes_after: int, **kwargs):
    rules_evaluate(now=NOW + MINUTE * minutes_after, **kwargs)


def states(rule):
    return list(AlertEvent.objects.filter(rule=rule).order_by("at", "id").values_list("state", flat=True))


def test_slow_traffic_is_pending_then_fires_once_after_the_for_duration(db, project, store, rule):
    store(project, [9000.0] * 30, start=NOW - timedelta(minutes=9), spacing=timedelta(seconds=20))
    run(0)
    rule.refresh_from_db()
    assert (rule.state, rule.consecutive) == ("pending", 1)
    assert mail.outbox == []
    run(1)
    run(2)
    rule.refresh_from_db()
    assert rule.state == "pending"
    run(3)  # the 4th breaching evaluation: 3 minutes after the first
    rule.refresh_from_db()
    assert rule.state == "firing"
    assert len(mail.outbox) == 1
    assert "FIRING" in mail.outbox[0].subject and mail.outbox[0].to == ["oncall@example.com"]
    for minute in range(4, 8):  # still slow: no new notification
        run(minute)
    assert len(mail.outbox) == 1
    assert states(rule) == ["pending", "firing"]
    assert Delivery.objects.filter(event__rule=rule, ok=True).count() == 1


def test_recovery_is_notified_once_and_then_the_rule_is_ok_again(db, project, store, rule):
    rule.for_minutes = 0
    rule.save()
    store(project, [9000.0] * 20, start=NOW - timedelta(minutes=5), spacing=timedelta(seconds=10))
    run(0)
    assert states(rule) == ["firing"]
    # Fast traffic; ten minutes on, the slow tasks have left the 10-minute window.
    store(project, [800.0] * 40, start=NOW + MINUTE, prefix="fast", spacing=timedelta(seconds=10))
    run(10)
    run(11)
    run(12)
    rule.refresh_from_db()
    assert rule.state == "ok"
    assert states(rule) == ["firing", "resolved"]
    assert [m.subject.split(":")[0] for m in mail.outbox] == ["[agentops] FIRING", "[agentops] RESOLVED"]


def test_a_flap_shorter_than_for_never_notifies(db, project, store, rule):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=2), spacing=timedelta(seconds=5))
    run(0)
    run(1)
    store(project, [100.0] * 400, start=NOW + MINUTE, prefix="fast", spacing=timedelta(seconds=1))
    run(9)
    rule.refresh_from_db()
    assert rule.state == "ok"
    assert states(rule) == ["pending", "ok"]
    assert mail.outbox == []


def test_too_few_samples_is_no_data_and_keeps_the_state(db, project, store, rule):
    rule.for_minutes = 0
    rule.save()
    store(project, [9000.0] * 6, start=NOW - timedelta(minutes=5))
    run(0)
    assert states(rule) == ["firing"]
    run(20)  # nothing in the window: silence is not recovery
    rule.refresh_from_db()
    assert rule.state == "firing" and rule.last_value is None
    assert len(mail.outbox) == 1


def test_no_data_can_alert(db, project, rule):
    rule.for_minutes = 1
    rule.no_data = "alert"
    rule.save()
    run(0)
    run(1)
    rule.refresh_from_db()
    assert rule.state == "firing"
    assert len(mail.outbox) == 1


def test_a_muted_rule_changes_state_but_sends_nothing(db, project, store, rule):
    rule.for_minutes = 0
    rule.muted = True
    rule.save()
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    run(0)
    assert states(rule) == ["firing"]
    assert mail.outbox == []
    assert not Delivery.objects.exists()


def test_disabled_rules_and_duplicate_runs_are_not_evaluated(db, project, store, rule):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rules_evaluate(now=NOW)
    rules_evaluate(now=NOW + timedelta(seconds=1))  # the same beat tick delivered twice
    rule.refresh_from_db()
    assert rule.consecutive == 1
    rule.enabled = False
    rule.save()
    assert rules_evaluate(now=NOW + MINUTE)["evaluated"] == 0


def test_other_projects_traffic_never_fires_a_rule(db, project, other_project, store, rule):
    rule.for_minutes = 0
    rule.save()
    store(other_project, [9000.0] * 50, start=NOW - timedelta(minutes=5))
    run(0)
    rule.refresh_from_db()
    assert rule.state == "ok" and rule.last_sample_count == 0


def test_low_confidence_findings_never_fire_a_wasted_time_rule(db, project, store):
    rule = AlertRule.objects.create(
        project=project, name="a tenth of the time wasted", metric="wasted_share", comparator="gt", threshold=10,
        window_minutes=10, for_minutes=0, min_samples=5, channels=[{"type": "email", "to": ["oncall@example.com"]}])
    ids = store(project, [1000.0] * 10, start=NOW - timedelta(minutes=5))
    tasks = Task.objects.filter(project=project, task_id__in=ids)
    Finding.objects.bulk_create([  # half the time, if these calls were independent: nothing shows they were
        Finding(project=project, task=t, kind="parallelizable_calls", wasted_ms=500.0, summary="one after the other",
                confidence=Finding.CONFIDENCE_LOW, confidence_reason="possible: no call ids or data flow",
                task_started_at=t.started_at, release=t.release) for t in tasks])
    run(0)
    rule.refresh_from_db()
    assert (rule.state, rule.last_value) == ("ok", 0.0)
    assert mail.outbox == []
    Finding.objects.filter(project=project).update(confidence=Finding.CONFIDENCE_MEDIUM)
    run(1)
    rule.refresh_from_db()
    assert (rule.state, rule.last_value) == ("firing", pytest.approx(50.0))
    assert len(mail.outbox) == 1


def test_ttft_doubling_against_the_previous_week(db, project, store):
    rule = AlertRule.objects.create(
        project=project, name="Groq TTFT p99 doubled", metric="ttft_p99", threshold=100,
        window_minutes=10, min_samples=5, baseline="previous_week", filters={"device": "groq-lpu-01"})
    week = timedelta(days=7)
    llm = {"kind": "llm", "name": "chat", "device": "groq-lpu-01", "duration_ms": 900.0}
    for i, ttft in enumerate([100.0, 110.0, 120.0, 105.0, 115.0, 100.0]):
        store(project, [1000.0], start=NOW - week - timedelta(minutes=5, seconds=-i), prefix=f"w{i}-",
              steps=[{**llm, "ttft_ms": ttft}])
    for i, ttft in enumerate([190.0, 200.0, 210.0, 205.0, 199.0, 201.0]):
        store(project, [1000.0], start=NOW - timedelta(minutes=5, seconds=-i), prefix=f"n{i}-",
              steps=[{**llm, "ttft_ms": ttft}])
    run(0)
    rule.refresh_from_db()
    assert rule.state == "ok"  # +80 %: not yet doubled
    store(project, [1000.0], start=NOW + timedelta(seconds=10), prefix="spike-", steps=[{**llm, "ttft_ms": 400.0}])
    run(1)
    rule.refresh_from_db()
    assert rule.state == "firing"
    event = AlertEvent.objects.get(rule=rule)
    assert event.value > 100 and event.baseline_value == pytest.approx(119.75, abs=0.5)


@pytest.mark.parametrize("for_minutes,needed", [(0, 1), (1, 2), (10, 11)])
def test_for_counts_one_evaluation_a_minute(for_minutes, needed):
    assert evaluations_needed(AlertRule(for_minutes=for_minutes)) == needed


def test_next_state_is_the_whole_state_machine():
    r = AlertRule(for_minutes=1, state="ok", consecutive=0)
    assert next_state(r, breaching=True) == ("pending", 1)
    r.state, r.consecutive = "pending", 1
    assert next_state(r, breaching=True) == ("firing", 2)
    r.state, r.consecutive = "firing", 2
    assert next_state(r, breaching=True) == ("firing", 3)
    assert next_state(r, breaching=None) == ("firing", 2)
    assert next_state(r, breaching=False) == ("resolved", 0)
    r.state, r.consecutive = "resolved", 0
    assert next_state(r, breaching=False) == ("ok", 0)
    assert next_state(r, breaching=True) == ("pending", 1)


def test_a_rule_whose_query_fails_does_not_stop_the_others(db, project, store, rule, monkeypatch):
    from django.db import OperationalError

    from analysis.alerts import evaluation

    broken = AlertRule.objects.create(project=project, name="a broken", metric="error_rate", threshold=1,
                                      min_samples=1, channels=[{"type": "email", "to": ["x@example.com"]}])
    real_measure = evaluation.measure

    def measure(*, project, spec, start, end):
        if spec.metric == "error_rate":
            raise OperationalError("canceling statement due to statement timeout")
        return real_measure(project=project, spec=spec, start=start, end=end)

    monkeypatch.setattr(evaluation, "measure", measure)
    rule.for_minutes = 0
    rule.save()
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    assert run_result(0)["evaluated"] == 1
    rule.refresh_from_db()
    broken.refresh_from_db()
    assert rule.state == "firing" and broken.last_evaluated_at is None
    assert [m.to for m in mail.outbox] == [["oncall@example.com"]]


def run_result(minutes_after: int) -> dict:
    return rules_evaluate(now=NOW + MINUTE * minutes_after)


def test_alert_drill_tasks_carry_the_name_asked_for(project):
    """README's "see an alert fire" scopes its rule to a task name: the drill's tasks must have it."""
    from django.core.management import call_command

    from ingest.models import Task

    call_command("alert_drill", "--project", project.name, "--name", "coding-agent", "--tasks", "3",
                 stdout=open("/dev/null", "w"))
    assert set(Task.objects.filter(project=project).values_list("name", flat=True)) == {"coding-agent"}
