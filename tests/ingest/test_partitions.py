"""Steps and samples live in weekly partitions, created on demand and dropped for retention."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from ingest import partitions
from ingest.models import ResourceSample, Step, Task
from ingest.records import Batch, SampleRecord, StepRecord
from ingest.services import batch_store
from tests.conftest import ON_CITUS, single_node

MONDAY = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def _steps(*starts, task_id="t1"):
    return [StepRecord(step_id=f"s{i}", task_id=task_id, started_at=t, ended_at=t + timedelta(seconds=1))
            for i, t in enumerate(starts)]


def _where(step_id: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM ingest_step WHERE step_id = %s", [step_id])
        name = cursor.fetchone()[0]
    # On Citus the row's table is the partition's shard: the partition's name and the shard's id.
    return re.sub(r"_\d+$", "", name) if ON_CITUS else name


@pytest.mark.django_db
def test_steps_land_in_the_partition_of_their_week(project):
    batch_store(project=project, batch=Batch(steps=_steps(MONDAY, MONDAY + timedelta(days=8))))
    assert _where("s0") == "ingest_step_p20261102"
    assert _where("s1") == "ingest_step_p20261109"
    names = [name for name, *_ in partitions.partitions("ingest_step")]
    assert {"ingest_step_p20261102", "ingest_step_p20261109", "ingest_step_default"} <= set(names)


@pytest.mark.django_db
def test_rows_written_around_the_write_path_move_into_the_new_partition(project):
    task = Task.objects.create(project=project, task_id="t0", last_event_at=timezone.now())
    Step.objects.create(project=project, task=task, step_id="orm", started_at=MONDAY,
                        ended_at=MONDAY + timedelta(seconds=1), duration_ms=1000)
    assert _where("orm") == "ingest_step_default"
    batch_store(project=project, batch=Batch(steps=_steps(MONDAY + timedelta(hours=1))))
    assert _where("orm") == "ingest_step_p20261102"
    assert Step.objects.filter(project=project).count() == 2


@pytest.mark.django_db
def test_a_step_resent_with_a_corrected_start_is_not_duplicated(project):
    batch_store(project=project, batch=Batch(steps=_steps(MONDAY)))
    batch_store(project=project, batch=Batch(steps=_steps(MONDAY + timedelta(days=7, minutes=1))))
    assert list(Step.objects.filter(project=project).values_list("started_at", flat=True)) == [
        MONDAY + timedelta(days=7, minutes=1)]


# The periodic job runs in a transaction of its own, where nothing is pending.
retention_in_the_tests_transaction = single_node(
    "retention drops partitions in the test's own transaction right after writing to them, and a "
    "Citus worker refuses to drop a shard whose deferred foreign-key checks are still pending")

@retention_in_the_tests_transaction
@pytest.mark.django_db
def test_retention_drops_whole_old_partitions_and_keeps_recent_ones(project):
    old, recent = MONDAY - timedelta(weeks=10), MONDAY
    batch_store(project=project, batch=Batch(
        steps=_steps(old, recent),
        samples=[SampleRecord(device="gpu-0", ts=t, metrics={"utilization": 0.5}) for t in (old, recent)]))
    dropped = partitions.drop_before(MONDAY - timedelta(weeks=4))
    assert set(dropped) == {"ingest_step_p20260824", "ingest_resourcesample_p20260824"}
    assert list(Step.objects.values_list("step_id", flat=True)) == ["s1"]
    assert ResourceSample.objects.count() == 1


@pytest.mark.django_db
def test_partitions_are_created_ahead_of_time():
    created = partitions.ensure_ahead(weeks=2, now=MONDAY)
    assert {"ingest_step_p20261102", "ingest_step_p20261109", "ingest_step_p20261116",
            "ingest_resourcesample_p20261116"} <= set(created)
    assert partitions.ensure_ahead(weeks=2, now=MONDAY) == []


@retention_in_the_tests_transaction
@pytest.mark.django_db
def test_the_hourly_job_applies_retention(project, settings):
    from ingest.tasks import maintain_partitions

    now = timezone.now()
    old, recent = now - timedelta(days=60), now - timedelta(days=1)
    batch_store(project=project, batch=Batch(steps=_steps(old, task_id="old") + [
        StepRecord(step_id="r", task_id="recent", started_at=recent, ended_at=recent + timedelta(seconds=1))]))
    Task.objects.filter(task_id="old").update(last_event_at=old)
    settings.AGENTOPS_RETENTION_DAYS = 30
    result = maintain_partitions()
    assert result["dropped"] >= 1 and result["tasks_deleted"] == 1
    assert list(Task.objects.values_list("task_id", flat=True)) == ["recent"]
    assert list(Step.objects.values_list("step_id", flat=True)) == ["r"]
