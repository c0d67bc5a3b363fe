"""Alert webhooks are no SSRF tool: a rule cannot point at loopback, private, link-local or
metadata addresses in any spelling, a delivery re-checks the address it connects to, redirects
are not followed, and the delivery log (readable with a read key) says a generic error class,
never what the target answered."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import pytest
import requests

from analysis.alerts import channels, targets
from analysis.alerts.evaluation import rules_evaluate
from analysis.alerts.models import AlertRule, Delivery
from ingest.models import IngestKey

from .conftest import NOW
from .receiver import Receiver
from .test_api import RULE

BYPASSES = [
    "http://127.0.0.1:8000/admin/", "http://localhost/", "http://0/", "http://0.0.0.0/",
    "http://[::1]/", "http://[::]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/",
    "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/",
    "http://10.0.0.5/", "http://192.168.1.1/", "http://172.16.0.1/", "http://100.64.0.1/",
    "http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://[fd00::1]/",
    "http://224.0.0.1/", "http://[2002:7f00:1::]/", "https://127.0.0.1:443/",
]


@pytest.fixture
def no_private_hosts(settings):
    settings.AGENTOPS_WEBHOOK_ALLOWED_HOSTS = []


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(channels, "WEBHOOK_TIMEOUT_SECONDS", 1.0)


@pytest.mark.parametrize("url", BYPASSES)
def test_a_rule_cannot_target_a_non_public_address(live_server, project, make_key, no_private_hosts, url):
    key = make_key(project, IngestKey.SCOPE_ADMIN, IngestKey.SCOPE_READ)
    r = requests.post(f"{live_server.url}/api/v1/alerts/rules", timeout=30,
                      json={**RULE, "channels": [{"type": "webhook", "url": url}]},
                      headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 400, (url, r.text)
    assert "[0].url" in r.text and "AGENTOPS_WEBHOOK_ALLOWED_HOSTS" in r.text
    assert not AlertRule.objects.filter(project=project).exists()


def test_public_addresses_and_named_on_prem_hosts_are_accepted(settings):
    settings.AGENTOPS_WEBHOOK_ALLOWED_HOSTS = ["hooks.internal", "127.0.0.1"]
    targets.check("https://93.184.215.14/hook")
    targets.check("http://127.0.0.1:9000/hook")
    targets.check("http://hooks.internal/x", unresolved_ok=True)
    with pytest.raises(targets.TargetRefused):
        targets.check("http://localhost:9000/hook")  # allowed by name only, not by address
    with pytest.raises(targets.TargetRefused):
        targets.check("ftp://93.184.215.14/x")


def slow_rule(project, url):
    return AlertRule.objects.create(
        project=project, name="p95", metric="task_duration_p95", threshold=5000, window_minutes=10,
        min_samples=5, filters={"task_name": "checkout-agent", "release": "v1"},
        channels=[{"type": "webhook", "url": url}])


def test_a_name_that_resolves_to_loopback_is_refused_at_send_time(db, project, store, settings):
    """Saved while allowed (or while the name pointed elsewhere), refused once it is loopback."""
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver() as hook:
        rule = slow_rule(project, hook.url.replace("127.0.0.1", "localhost"))
        settings.AGENTOPS_WEBHOOK_ALLOWED_HOSTS = []
        rules_evaluate(now=NOW)
    assert hook.requests == []
    [(attempt, ok, error)] = Delivery.objects.filter(event__rule=rule).values_list("attempt", "ok", "error")
    assert (attempt, ok) == (1, False)  # refused, so not retried
    assert error == "refused target (not a public address)"


def test_redirects_are_not_followed(db, project, store):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    with Receiver() as inner, Receiver(statuses=[302], location=inner.url) as redirecting:
        rule = slow_rule(project, redirecting.url)
        rules_evaluate(now=NOW)
        assert len(redirecting.requests) == 1
    assert inner.requests == []
    [(status, ok)] = Delivery.objects.filter(event__rule=rule).values_list("status_code", "ok")
    assert (status, ok) == (302, False)


@pytest.fixture
def banner_server():
    """A TCP service that is not HTTP: it greets with a banner, as SMTP or FTP would."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.sendall(b"220 secret-banner ESMTP\r\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/"
    stop.set()
    thread.join()
    server.close()


def test_the_delivery_log_never_echoes_what_the_target_said(db, project, store, banner_server):
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rule = slow_rule(project, banner_server)
    rules_evaluate(now=NOW)
    errors = set(Delivery.objects.filter(event__rule=rule).values_list("error", flat=True))
    assert errors and errors <= {"invalid HTTP response", "connection failed"}  # as the reply raced the close
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    rule.channels = [{"type": "webhook", "url": f"http://127.0.0.1:{port}/"}]
    rule.save()
    attempts = channels.webhook_send(url=f"http://127.0.0.1:{port}/", body=b"{}")
    assert [a.error for a in attempts] == ["connection refused"]
