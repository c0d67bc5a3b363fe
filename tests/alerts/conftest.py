"""Helpers for the alerts tests: tasks and steps stored through ingest's one write path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def stop_worker(worker) -> None:
    """A Celery worker subprocess (started in a session of its own) stops warm, or is killed."""
    import os
    import signal
    import subprocess

    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def store_tasks(project, durations_ms, *, start: datetime, prefix: str = "t", name: str = "checkout-agent",
                environment: str = "production", release: str = "v1", status: str = "ok",
                spacing: timedelta = timedelta(seconds=1), steps: list[dict] | None = None) -> list[str]:
    """One task per duration, started `spacing` apart from `start`; optional steps per task
    (dicts of StepRecord fields, placed at the task's start)."""
    tasks, step_records, ids = [], [], []
    for i, duration in enumerate(durations_ms):
        began = start + spacing * i
        task_id = f"{prefix}{i}"
        ids.append(task_id)
        tasks.append(TaskRecord(task_id=task_id, name=name, release=release, environment=environment,
                                started_at=began, ended_at=began + timedelta(milliseconds=duration),
                                status=status))
        for j, fields in enumerate(steps or []):
            f = dict(fields)
            step_duration = f.pop("duration_ms", duration)
            step_records.append(StepRecord(step_id=f"{task_id}-s{j}", task_id=task_id, started_at=began,
                                           ended_at=began + timedelta(milliseconds=step_duration), **f))
    batch_store(project=project, batch=Batch(tasks=tasks, steps=step_records))
    return ids


@pytest.fixture
def store():
    return store_tasks


def settle(notification_ids, *, max_attempts: int = 5) -> None:
    """Work the notifications as the delivery worker would, with the schedule's clock moved on
    to each retry's time instead of sleeping through the back-off."""
    from analysis.alerts import delivery
    from analysis.alerts.models import Notification

    for pk in notification_ids:
        for _ in range(max_attempts):
            row = Notification.objects.get(pk=pk)
            if row.state != Notification.PENDING:
                break
            delivery.attempt(pk, now=row.next_attempt_at)


@pytest.fixture(autouse=True)
def delivered_in_process(request, monkeypatch):
    """Evaluation hands its notifications to the delivery queue; here they are worked in the
    test's process at once (tests/alerts/test_delivery_isolation.py runs the real workers)."""
    if "stack_env" in request.fixturenames:
        return
    from analysis.alerts import delivery

    monkeypatch.setattr(delivery, "enqueue", lambda ids, countdown=0.0: settle(ids))
