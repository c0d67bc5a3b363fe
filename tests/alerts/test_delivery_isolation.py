"""One tenant's dead webhooks cannot cancel or delay another tenant's alerts.

Project A has 4 rules with 10 webhooks each, all pointed at a listener that accepts and never
answers; project B has one rule with a healthy webhook. Both fire at the same evaluation. The
evaluation and the deliveries run in real Celery workers started as runstack starts them (the
periodic worker, and the alerts worker with its threads): B's webhook must be heard within one
evaluation period, A's notifications must stay pending (not "notified") and be retried, and the
periodic queue must stay free for the next job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentops.celery import periodic_queue
from agentops.management.commands.runstack import delivery_worker
from analysis.alerts import delivery
from analysis.alerts.evaluation import EVALUATION_MINUTES
from analysis.alerts.models import AlertEvent, AlertRule, Delivery, Notification
from analysis.alerts.tasks import evaluate_alerts
from ingest.models import Project
from tests.conftest import faults_pass

from .conftest import stop_worker, store_tasks
from .receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]


class Silent:
    """A TCP listener that accepts every connection and never says a word."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(128)
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"

    def _accept(self):
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            self.held.append(conn)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        for conn in self.held:
            conn.close()
        self.server.close()


def _worker(command: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _rule(project, name, urls):
    return AlertRule.objects.create(
        project=project, name=name, metric="task_duration_p95", threshold=0, window_minutes=10,
        min_samples=1, channels=[{"type": "webhook", "url": url} for url in urls])


@pytest.mark.slow
@faults_pass
def test_dead_webhooks_of_one_project_never_delay_another_projects_alert(stack_env, tmp_path):
    a, b = Project.objects.create(name="tenant-a"), Project.objects.create(name="tenant-b")
    now = datetime.now(tz=UTC)
    for project in (a, b):
        store_tasks(project, [900.0] * 3, start=now - timedelta(minutes=2))
    periodic = _worker([sys.executable, "-m", "celery", "-A", "agentops", "worker", "--loglevel", "INFO",
                        "--concurrency", "1", "--hostname", f"periodic-{os.getpid()}@%h",
                        "--queues", periodic_queue()],
                       stack_env, tmp_path / "periodic.log")
    alerts = _worker(delivery_worker(sys.executable), stack_env, tmp_path / "alerts.log")
    try:
        with Silent() as dead, Receiver() as healthy:
            for i in range(4):
                _rule(a, f"a{i}", [dead.url] * 10)
            b_rule = _rule(b, "b", [healthy.url])
            time.sleep(3)  # the workers' start; the clock below starts at the evaluation
            published = time.monotonic()
            evaluate_alerts.apply_async()
            heard = None
            while time.monotonic() - published < 60 * EVALUATION_MINUTES:
                assert periodic.poll() is None and alerts.poll() is None, "a worker died"
                if healthy.requests and heard is None:
                    heard = time.monotonic() - published
                if heard is not None and Delivery.objects.filter(event__rule__project=a).count() >= 2:
                    break
                time.sleep(0.2)
            assert heard is not None, "B's webhook was not heard within one evaluation period"
            print(f"B's webhook heard {heard:.2f} s after the evaluation was published")

            # B: notified, with the one delivery that succeeded.
            [b_event] = AlertEvent.objects.filter(rule=b_rule)
            assert b_event.notified and [p["rule"]["name"] for p in healthy.payloads()] == ["b"]
            # A: retried, not notified, and saying so.
            a_events = AlertEvent.objects.filter(rule__project=a)
            assert a_events.count() == 4 and not a_events.filter(notified=True).exists()
            pending = Notification.objects.filter(project=a, state=Notification.PENDING)
            assert pending.count() == 40
            tried = pending.filter(attempts__gte=1)
            assert tried.exists() and set(tried.values_list("last_error", flat=True)) == {"timeout"}

            # The periodic queue is free: the next evaluation runs at once.
            before = AlertRule.objects.get(pk=b_rule.pk).last_evaluated_at
            time.sleep(5.5)  # past DUPLICATE_SECONDS
            evaluate_alerts.apply_async()
            deadline = time.monotonic() + 15
            while AlertRule.objects.get(pk=b_rule.pk).last_evaluated_at == before:
                assert time.monotonic() < deadline, "the periodic queue was held up"
                time.sleep(0.2)
        # At most PROJECT_SLOTS of A's attempts ran at once.
        spans = [(d.at - timedelta(milliseconds=d.duration_ms), d.at)
                 for d in Delivery.objects.filter(event__rule__project=a)]
        overlap = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
        assert overlap <= delivery.PROJECT_SLOTS
    finally:
        stop_worker(alerts)
        stop_worker(periodic)
        for name in ("periodic.log", "alerts.log"):
            print(name, (tmp_path / name).read_text()[-2000:])
