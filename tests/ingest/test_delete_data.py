"""Deleting a project's data, and data older than retention, leaves everything else alone."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from ingest.models import Project, ResourceSample, Step, Task
from ingest.records import Batch, SampleRecord, StepRecord, TaskRecord
from ingest.services import batch_store


def _seed(project, *, task_id, age_days):
    start = timezone.now() - timedelta(days=age_days)
    batch_store(project=project, batch=Batch(
        tasks=[TaskRecord(task_id=task_id, name="n", started_at=start, ended_at=start + timedelta(seconds=1))],
        steps=[StepRecord(step_id="s1", task_id=task_id, started_at=start, ended_at=start + timedelta(seconds=1))],
        samples=[SampleRecord(device="gpu-0", ts=start, metrics={"utilization": 0.5})],
    ))
    Task.objects.filter(project=project, task_id=task_id).update(last_event_at=start)


@pytest.mark.django_db
def test_deleting_a_project_spares_the_others(project, other_project):
    _seed(project, task_id="a", age_days=1)
    _seed(other_project, task_id="b", age_days=1)
    call_command("delete_data", project="acme", yes=True, delete_project=True)
    assert not Project.objects.filter(name="acme").exists()
    assert list(Task.objects.values_list("task_id", flat=True)) == ["b"]
    assert Step.objects.count() == 1 and ResourceSample.objects.count() == 1


@pytest.mark.django_db
def test_retention_deletes_only_old_data(project, other_project):
    _seed(project, task_id="old", age_days=40)
    _seed(project, task_id="new", age_days=2)
    _seed(other_project, task_id="other-old", age_days=40)
    call_command("delete_data", older_than=30, yes=True)
    assert sorted(Task.objects.values_list("task_id", flat=True)) == ["new"]
    assert Step.objects.count() == 1
    assert ResourceSample.objects.count() == 1


@pytest.mark.django_db
def test_deleting_a_project_removes_its_rollups(project, other_project):
    from django.db import connection

    from analysis import rollups

    _seed(project, task_id="a", age_days=1)
    _seed(other_project, task_id="b", age_days=1)
    rollups.project_rebuild(project=project)
    rollups.project_rebuild(project=other_project)
    call_command("delete_data", project="acme", yes=True, delete_project=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT project_id FROM analysis_task_rollup")
        assert [r[0] for r in cursor.fetchall()] == [other_project.pk]
