"""Webhook and email delivery: the payload a receiver gets, retries, the signature, and that a
failing endpoint delays nobody else."""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

import pytest
from django.core import mail

from analysis.alerts import channels
from analysis.alerts.evaluation import rules_evaluate
from analysis.alerts.models import AlertRule, Delivery

from .conftest import NOW
from .receiver import Receiver


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(channels, "WEBHOOK_TIMEOUT_SECONDS", 1.0)


def slow_rule(project, channel_list, name="checkout p95 over 5 s"):
    return AlertRule.objects.create(
        project=project, name=name, metric="task_duration_p95", threshold=5000, window_minutes=10,
        min_samples=5, filters={"task_name": "checkout-agent", "release": "v1"}, channels=channel_list)


def test_firing_webhook_payload_links_to_the_matching_tasks(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver() as hook:
        rule = slow_rule(project, [{"type": "webhook", "url": hook.url}])
        rules_evaluate(now=NOW)
    [body] = hook.payloads()
    assert body["state"] == "firing"
    assert body["value"] == pytest.approx(9000.0) and body["threshold"] == 5000
    assert body["rule"]["id"] == rule.pk and body["rule"]["name"] == "checkout p95 over 5 s"
    assert body["rule"]["metric"] == "task_duration_p95" and body["sample_count"] == 10
    assert body["window"]["minutes"] == 10
    assert body["window"]["end"].startswith("2026-11-02T12:00:00")
    link = body["link"]
    assert "/tasks?" in link and "name=checkout-agent" in link and "release=v1" in link
    assert "min_duration_ms=5000" in link and "project=acme" in link
    assert "X-Agentops-Signature" not in hook.requests[0]["headers"]


def test_a_500_is_retried_and_every_attempt_is_logged(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver(statuses=[500, 503]) as hook:
        rule = slow_rule(project, [{"type": "webhook", "url": hook.url}])
        rules_evaluate(now=NOW)
    assert len(hook.requests) == 3
    log = list(Delivery.objects.filter(event__rule=rule).order_by("attempt")
               .values_list("attempt", "status_code", "ok"))
    assert log == [(1, 500, False), (2, 503, False), (3, 200, True)]


def test_a_4xx_is_not_retried(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver(statuses=[404]) as hook:
        rule = slow_rule(project, [{"type": "webhook", "url": hook.url}])
        rules_evaluate(now=NOW)
    assert len(hook.requests) == 1
    assert Delivery.objects.get(event__rule=rule).status_code == 404


def test_the_signature_verifies_with_the_shared_secret(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver() as hook:
        slow_rule(project, [{"type": "webhook", "url": hook.url, "secret": "s3cret"}])
        rules_evaluate(now=NOW)
    request = hook.requests[0]
    expected = "sha256=" + hmac.new(b"s3cret", request["body"], hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request["headers"]["X-Agentops-Signature"], expected)
    wrong = "sha256=" + hmac.new(b"guess", request["body"], hashlib.sha256).hexdigest()
    assert request["headers"]["X-Agentops-Signature"] != wrong


def test_email_says_what_fired_and_where_to_look(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    slow_rule(project, [{"type": "email", "to": ["a@example.com", "b@example.com"]}])
    rules_evaluate(now=NOW)
    [message] = mail.outbox
    assert message.subject == "[agentops] FIRING: checkout p95 over 5 s"
    assert message.to == ["a@example.com", "b@example.com"]
    assert "task_duration_p95 over the last 10 min = 9 s (alert when > 5 s)" in message.body
    assert "/tasks?" in message.body


def test_a_rule_name_with_line_breaks_still_sends_its_email(db, project, store):
    """A CR/LF in a header is refused by Django's mail: the subject is kept on one line."""
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rule = slow_rule(project, [{"type": "email", "to": ["a@example.com"]}], name="checkout\r\nBcc: x@evil.example")
    rules_evaluate(now=NOW)
    [message] = mail.outbox
    assert message.subject == "[agentops] FIRING: checkout Bcc: x@evil.example"
    assert message.to == ["a@example.com"] and not message.bcc
    assert Delivery.objects.get(event__rule=rule).ok
