"""End to end: slow tasks ingested over HTTP fire the rule in a real Celery worker, the local
webhook hears "firing" exactly once, and after fast traffic "resolved" exactly once.

The worker is a real `celery -A agentops worker` subprocess on this test's database. The test
publishes the same `evaluate_alerts` message beat publishes every minute instead of waiting a
minute per tick for beat (on a queue of its own, so the analysis jobs ingest enqueues do not
compete with it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests

from agentops.celery import alerts_queue
from analysis.alerts.evaluation import DUPLICATE_SECONDS
from analysis.alerts.models import AlertRule
from analysis.alerts.tasks import evaluate_alerts
from ingest.models import IngestKey, Project
from ingest.services import key_create
from tests.conftest import faults_pass

from .conftest import stop_worker
from .receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]


def _events(prefix: str, n: int, duration_ms: float, now: datetime) -> list[dict]:
    out = []
    for i in range(n):
        began = now - timedelta(seconds=60) + timedelta(milliseconds=50 * i)
        out.append({"type": "task", "task_id": f"{prefix}{i}", "name": "checkout-agent", "release": "v2",
                    "environment": "production", "started_at": began.isoformat(),
                    "ended_at": (began + timedelta(milliseconds=duration_ms)).isoformat(), "status": "ok"})
    return out


def _evaluated_after(rule: AlertRule, moment: datetime | None, worker, timeout: float = 30) -> AlertRule:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the worker died"
        rule.refresh_from_db()
        if rule.last_evaluated_at and (moment is None or rule.last_evaluated_at > moment):
            return rule
        time.sleep(0.2)
    raise AssertionError("the worker did not evaluate the rule in time")


@pytest.mark.slow
@faults_pass
def test_slow_traffic_fires_once_and_recovery_resolves_once(live_server, stack_env, settings, tmp_path):
    settings.ANALYSIS_QUIET_SECONDS = 3600  # keep the analysis jobs ingest enqueues out of the way
    project = Project.objects.create(name="shop")
    _, key = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST, IngestKey.SCOPE_ADMIN,
                                                 IngestKey.SCOPE_READ])
    headers = {"Authorization": f"Bearer {key}"}
    queue = f"alerts-e2e-{os.getpid()}"
    log = open(tmp_path / "worker.log", "w+")
    worker = subprocess.Popen(  # the evaluation's queue, and the deliveries' (analysis/alerts/delivery.py)
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "-Q", f"{queue},{alerts_queue()}",
         "--concurrency", "1",
         "--pool", "solo", "--loglevel", "INFO", "--hostname", f"alerts-e2e-{os.getpid()}@%h"],
        cwd=ROOT, env=stack_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with Receiver() as hook:
            r = requests.post(f"{live_server.url}/api/v1/alerts/rules", headers=headers, timeout=30, json={
                "name": "checkout-agent p95 over 5 s", "metric": "task_duration_p95", "comparator": "gt",
                "threshold": 5000, "window_minutes": 5, "for_minutes": 1, "min_samples": 10,
                "filters": {"task_name": "checkout-agent", "environment": "production"},
                "channels": [{"type": "webhook", "url": hook.url, "secret": "shh"}]})
            assert r.status_code == 201, r.text
            rule = AlertRule.objects.get(pk=r.json()["id"])
            now = datetime.now(tz=UTC)
            r = requests.post(f"{live_server.url}/api/v1/ingest", headers=headers, timeout=30,
                              json={"events": _events("slow", 20, 9000.0, now)})
            assert r.json()["accepted"] == 20

            def tick():
                before = rule.last_evaluated_at
                if before is not None:  # a second message within DUPLICATE_SECONDS is a duplicate
                    time.sleep(max(0.0, DUPLICATE_SECONDS + 0.5 - (datetime.now(tz=UTC) - before).total_seconds()))
                evaluate_alerts.apply_async(queue=queue)
                return _evaluated_after(rule, before, worker, timeout=45 if before is None else 30)

            assert tick().state == "pending"  # for 1 minute: two evaluations in a row
            assert tick().state == "firing"
            assert tick().state == "firing"
            assert [p["state"] for p in hook.payloads()] == ["firing"]

            r = requests.post(f"{live_server.url}/api/v1/ingest", headers=headers, timeout=30,
                              json={"events": _events("fast", 600, 400.0, now)})
            assert r.json()["accepted"] == 600
            assert tick().state == "resolved"
            assert tick().state == "ok"
            payloads = hook.payloads()
            assert [p["state"] for p in payloads] == ["firing", "resolved"]
            assert payloads[0]["value"] == pytest.approx(9000.0)
            assert payloads[1]["value"] < 5000
            assert payloads[0]["rule"]["name"] == "checkout-agent p95 over 5 s"
            events = requests.get(f"{live_server.url}/api/v1/alerts/events", params={"rule": rule.pk},
                                  headers=headers, timeout=30).json()["results"]
            assert [e["state"] for e in events] == ["resolved", "firing", "pending"]
            assert all(d["ok"] for e in events for d in e["deliveries"])
    finally:
        stop_worker(worker)
        log.seek(0)
        print(log.read()[-3000:])
