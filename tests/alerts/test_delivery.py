"""The delivery outbox: an event is notified once a channel accepts it, retried with back-off
until then or until it expires (visibly, on the rule page and in the API), superseded by a newer
state change, and a project over its time budget waits while another project's delivery goes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from analysis.alerts import delivery
from analysis.alerts.evaluation import rules_evaluate
from analysis.alerts.models import AlertEvent, Delivery, Notification

from . import test_channels
from .conftest import NOW, settle
from .receiver import Receiver
from .test_channels import quick_retries  # noqa: F401  (autouse: 1 s webhook timeouts here too)

DEAD = "http://127.0.0.1:9/refused"


def slow_rule(project, urls, name="p95"):
    return test_channels.slow_rule(project, [{"type": "webhook", "url": url} for url in urls], name=name)


def test_an_event_is_notified_only_once_a_delivery_succeeds(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver(statuses=[503]) as hook:
        rule = slow_rule(project, [hook.url])
        rules_evaluate(now=NOW, deliver=False)
        [n] = Notification.objects.filter(event__rule=rule)
        first = delivery.attempt(n.pk, now=NOW)
        n.refresh_from_db()
        event = AlertEvent.objects.get(rule=rule)
        assert first.sent and not event.notified
        assert (n.state, n.attempts, n.last_error) == ("pending", 1, "HTTP 503")
        assert n.next_attempt_at == NOW + timedelta(seconds=delivery.RETRY_BASE_SECONDS)
        # Not due yet: nothing is sent, and the task is told how long to wait.
        early = delivery.attempt(n.pk, now=NOW + timedelta(seconds=1))
        assert not early.sent and early.wait == pytest.approx(delivery.RETRY_BASE_SECONDS - 1)
        assert len(hook.requests) == 1
        delivery.attempt(n.pk, now=n.next_attempt_at)
    n.refresh_from_db()
    event.refresh_from_db()
    assert n.state == "delivered" and n.attempts == 2 and event.notified
    assert len(hook.requests) == 2
    assert list(Delivery.objects.filter(event=event).order_by("attempt").values_list("attempt", "ok")) == [
        (1, False), (2, True)]


def test_backoff_doubles_up_to_its_cap():
    waits = [delivery.backoff_seconds(n) for n in range(1, 10)]
    assert waits[:4] == [5, 10, 20, 40]
    assert max(waits) == delivery.RETRY_MAX_SECONDS and waits == sorted(waits)


def test_an_endpoint_that_never_answers_expires_visibly(db, project, store, django_user_model):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rule = slow_rule(project, [DEAD])
    rules_evaluate(now=NOW, deliver=False)
    [n] = Notification.objects.filter(event__rule=rule)
    settle([n.pk], max_attempts=500)
    n.refresh_from_db()
    assert n.state == "expired" and n.last_error == "connection refused"
    assert n.attempts > 20  # six hours of retries, five minutes apart at most
    last = Delivery.objects.filter(event__rule=rule).order_by("-attempt").first()
    assert last.attempt == n.attempts
    assert not AlertEvent.objects.get(rule=rule).notified
    user = django_user_model.objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    page = client.get(f"/alerts/{rule.pk}/").content.decode()
    assert f"gave up after {n.attempts} attempts" in page


def test_a_pending_notification_shows_when_it_is_retried(db, project, store, django_user_model):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rule = slow_rule(project, [DEAD])
    rules_evaluate(now=NOW, deliver=False)
    [n] = Notification.objects.filter(event__rule=rule)
    delivery.attempt(n.pk, now=NOW)
    user = django_user_model.objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    page = re.sub(r"<[^>]+>", "", client.get(f"/alerts/{rule.pk}/").content.decode())  # the text a reader sees
    assert "retrying: 1 attempt, next at 12:00:05 UTC" in page and "connection refused" in page


def test_a_newer_state_change_supersedes_what_is_still_pending(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rule = slow_rule(project, [DEAD])
    rules_evaluate(now=NOW, deliver=False)
    store(project, [100.0] * 200, start=NOW + timedelta(seconds=1), prefix="fast", spacing=timedelta(seconds=1))
    rules_evaluate(now=NOW + timedelta(minutes=5), deliver=False)
    rows = list(Notification.objects.filter(event__rule=rule).order_by("event__at")
                .values_list("event__state", "state"))
    assert rows == [("firing", "superseded"), ("resolved", "pending")]


def test_a_project_over_its_time_budget_waits_and_another_project_does_not(db, project, other_project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    store(other_project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver() as hook:
        busy = slow_rule(project, [hook.url], name="busy")
        calm = slow_rule(other_project, [hook.url], name="calm")
        rules_evaluate(now=NOW, deliver=False)
        # The busy project's endpoints took a minute of delivery time in the last minute.
        event = AlertEvent.objects.get(rule=busy)
        spent = datetime.now(tz=UTC)
        Delivery.objects.bulk_create([Delivery(event=event, channel="webhook", target=DEAD, attempt=1, ok=False,
                                               duration_ms=5000, at=spent) for _ in range(12)])
        [b] = Notification.objects.filter(event__rule=busy)
        [c] = Notification.objects.filter(event__rule=calm)
        waited = delivery.attempt(b.pk, now=NOW)
        went = delivery.attempt(c.pk, now=NOW)
    assert not waited.sent and waited.wait == delivery.BUDGET_WAIT_SECONDS
    b.refresh_from_db()
    assert b.state == "pending" and b.attempts == 0 and b.claimed_until is None
    assert went.sent and went.state == "delivered"
    assert [p["rule"]["name"] for p in hook.payloads()] == ["calm"]


def test_a_lost_message_is_published_again(db, project, store, monkeypatch):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rule = slow_rule(project, [DEAD])
    rules_evaluate(now=NOW, deliver=False)
    [n] = Notification.objects.filter(event__rule=rule)
    published = []
    monkeypatch.setattr(delivery, "enqueue", lambda ids, countdown=0.0: published.extend(ids))
    assert delivery.redeliver_due(now=NOW + timedelta(seconds=30)) == 0  # not overdue yet
    assert delivery.redeliver_due(now=NOW + timedelta(minutes=2)) == 1 and published == [n.pk]


def test_a_doubled_message_attempts_once(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver() as hook:
        rule = slow_rule(project, [hook.url])
        rules_evaluate(now=NOW, deliver=False)
        [n] = Notification.objects.filter(event__rule=rule)
        assert delivery.attempt(n.pk, now=NOW).state == "delivered"
        assert not delivery.attempt(n.pk, now=NOW).sent
    assert len(hook.requests) == 1


def test_the_events_api_says_where_each_channel_stands(live_server, project, make_key, store):
    import requests

    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver() as hook:
        rule = slow_rule(project, [hook.url, DEAD])
        rules_evaluate(now=NOW)
    key = make_key(project, "read")
    r = requests.get(f"{live_server.url}/api/v1/alerts/events", params={"rule": rule.pk},
                     headers={"Authorization": f"Bearer {key}"}, timeout=30)
    [event] = r.json()["results"]
    assert event["notified"] is True
    states = [(n["channel"], n["target"], n["state"]) for n in event["notifications"]]
    assert states[0] == ("webhook", hook.url, "delivered")
    assert states[1][2] == "pending" and event["notifications"][1]["last_error"] == "connection refused"
