"""A batch that loses a real deadlock in Postgres is stored again, not answered with a 503."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from ingest.models import Task
from ingest.records import Batch, TaskRecord
from ingest.services import batch_store, project_create
from tests.conftest import subprocess_database_url

T0 = datetime(2026, 11, 2, 10, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_loses_a_deadlock_is_stored_again(caplog):
    project, _ = project_create(name="deadlock")
    batch_store(project=project, batch=Batch(tasks=[TaskRecord(task_id="t1", name="before", started_at=T0)]))
    locked, done = threading.Event(), threading.Event()

    def other_transaction():
        # Holds t1's row, then waits for the lock batch_store takes first for t1: a cycle.
        with psycopg.connect(subprocess_database_url()) as conn:
            conn.execute("UPDATE ingest_task SET name = 'other' WHERE project_id = %s AND task_id = 't1'",
                         [project.pk])
            locked.set()
            time.sleep(0.5)  # batch_store now holds the advisory lock and waits for the row
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext('t1'))", [project.pk])
            conn.commit()
        done.set()

    thread = threading.Thread(target=other_transaction)
    thread.start()
    assert locked.wait(10)
    batch_store(project=project, batch=Batch(tasks=[
        TaskRecord(task_id="t1", name="after", started_at=T0, ended_at=T0 + timedelta(seconds=2))]))
    thread.join(20)
    assert done.is_set()
    # Postgres cancelled batch_store's transaction (it had waited longest, so its deadlock check
    # ran first); the batch was stored again after the other transaction committed.
    assert [r for r in caplog.records if "ingest.deadlock_retried" in r.getMessage()]
    task = Task.objects.get(project=project, task_id="t1")
    assert task.name == "after" and task.ended_at == T0 + timedelta(seconds=2)
