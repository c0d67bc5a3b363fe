"""One project's data cannot stall the others' periodic jobs (docs/reliability.md, "One tenant's
data cannot stall the others"): rollups, retention, baselines, learned pairs and alert evaluation
run per project, each part in a transaction of its own; a part that raises is counted in
/api/v1/status and retried with back-off, and the other projects' parts go on. A bad reading an
earlier version stored no longer breaks the rollups or the devices chart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from analysis import jobs, rollups
from analysis.alerts.evaluation import rules_evaluate
from analysis.alerts.models import AlertRule
from analysis.engine import baselines, learned
from analysis.models import AgentProfile, Baseline, JobFailure
from ingest.models import Device, ResourceSample, Task
from tests.analysis.factories import T0, make_step, make_task
from tests.analysis.test_rollups import fill
from tests.conftest import single_node


def tasks_in(project, hour: datetime) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(sum(tasks), 0) FROM analysis_task_rollup WHERE project_id = %s AND hour = %s",
                    [project.pk, hour])
        return cur.fetchone()[0]


def rollup_hours(project, table: str = "analysis_task_rollup") -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table} WHERE project_id = %s", [project.pk])
        return cur.fetchone()[0]


def status(project, *, key: str) -> dict:
    response = Client().get("/api/v1/status", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    return response.json()


def break_rollups_of(project) -> Task:
    """A task duration no ingest path produces (durations come from timestamps) forced in by SQL,
    as an earlier version's bug could have: the rollup's log bucket of NaN cannot be cast, so the
    project's refresh raises."""
    task = Task.objects.filter(project=project).order_by("started_at").first()
    Task.objects.filter(pk=task.pk).update(duration_ms=float("nan"), last_event_at=datetime.now(tz=UTC))
    return task


def test_a_project_whose_rollup_refresh_raises_does_not_stop_the_others_rollups_or_retention(
        project, other_project, read_key, other_keys, settings):
    fill(project, n=200, seed=1)
    fill(other_project, n=200, seed=2)
    rollups.rollups_refresh()
    before = rollups.watermark()
    broken = break_rollups_of(project)
    # Late data for the other project, in an hour already rolled up.
    late = Task.objects.filter(project=other_project).order_by("started_at")[50]
    hour = rollups.hour_floor(late.started_at)
    counted = tasks_in(other_project, hour)
    Task.objects.create(project=other_project, task_id="late", name=late.name, release=late.release,
                        environment=late.environment, started_at=late.started_at, ended_at=late.ended_at,
                        duration_ms=late.duration_ms, reported=True, last_event_at=datetime.now(tz=UTC))
    settings.AGENTOPS_RETENTION_DAYS = 1
    old_other = rollup_hours(other_project)

    out = rollups.rollups_refresh()

    assert out["failed"] == 1
    assert tasks_in(other_project, hour) == counted + 1  # the other project's rollups advanced
    assert rollup_hours(other_project) < old_other  # and its retention ran
    after = rollups.watermark()
    assert after > before
    assert rollups.watermark(project_id=other_project.pk) == after
    assert rollups.watermark(project_id=project.pk) == before  # its readers keep to what it rolled up
    failure = JobFailure.objects.get(job=jobs.ROLLUPS, project_id=project.pk)
    assert failure.failures == 1 and failure.last_error
    # The failure is counted in the project's status, and only there.
    body = status(project, key=read_key)
    assert body["jobs"]["rollups"]["failures"] == 1
    assert body["jobs"]["rollups"]["last_error_at"] == failure.last_error_at.isoformat()
    assert body["rollups"]["watermark"] == before.isoformat()
    assert status(other_project, key=other_keys["read"])["jobs"] == {}

    # Retried with back-off: not within a minute, again after it, with the wait doubled.
    now = datetime.now(tz=UTC)
    rollups.rollups_refresh(now=now + timedelta(seconds=30))
    assert JobFailure.objects.get(job=jobs.ROLLUPS, project_id=project.pk).failures == 1
    rollups.rollups_refresh(now=now + timedelta(seconds=90))
    failure = JobFailure.objects.get(job=jobs.ROLLUPS, project_id=project.pk)
    assert failure.failures == 2 and failure.retry_at - failure.last_error_at == timedelta(seconds=120)

    # Once the cause is gone, the next try catches up from where the project stopped.
    Task.objects.filter(pk=broken.pk).update(duration_ms=1000.0, last_event_at=datetime.now(tz=UTC))
    out = rollups.rollups_refresh(now=now + timedelta(minutes=5))
    assert "failed" not in out
    assert not JobFailure.objects.filter(project_id=project.pk).exists()
    assert rollups.watermark(project_id=project.pk) == rollups.watermark() == now + timedelta(minutes=5)
    assert status(project, key=read_key)["jobs"] == {}


def test_a_project_never_rolled_up_because_its_first_rebuild_failed_is_rebuilt_later(project, other_project):
    fill(project, n=50, seed=1)
    fill(other_project, n=50, seed=2)
    broken = break_rollups_of(project)
    out = rollups.rollups_refresh()
    assert out["failed"] == 1 and rollup_hours(other_project) > 0 and rollup_hours(project) == 0
    assert rollups.watermark(project_id=project.pk) is None  # its readers read raw rows
    Task.objects.filter(pk=broken.pk).update(duration_ms=1000.0)
    rollups.rollups_refresh(now=datetime.now(tz=UTC) + timedelta(minutes=2))
    assert rollup_hours(project) > 0 and rollups.watermark(project_id=project.pk) == rollups.watermark()


@pytest.fixture
def browser(project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client


def test_a_bad_clock_reading_stored_before_the_bound_neither_stalls_the_rollups_nor_the_devices_chart(
        browser, project, other_project):
    """The incident of issue #39: a DCGM clock-reasons value of 1e30 got in before ingest checked
    its range. Read as no reasons, it no longer fails the bigint cast of every refresh."""
    for p in (project, other_project):
        Device.objects.create(project=p, name="gpu-0", role="gpu", vendor="nvidia", first_seen=T0, last_seen=T0)
        ResourceSample.objects.bulk_create([
            ResourceSample(project=p, device="gpu-0", ts=T0 + timedelta(minutes=m), sm_clock_mhz=1900.0,
                           clock_reasons=0x40 if m == 30 else 0.0, power_w=400.0) for m in range(0, 240, 5)])
        make_task(p, "t", start=T0)
    with connection.cursor() as cur:  # as an earlier version let in
        cur.execute("UPDATE ingest_resourcesample SET clock_reasons = 1e30, power_w = 1.7e308"
                    " WHERE project_id = %s AND ts = %s", [project.pk, T0 + timedelta(minutes=65)])
    # The chart before any rollup (raw rows), then from the rollups.
    assert browser.get("/charts/devices.json", {"since": T0.isoformat(),
                                                "until": (T0 + timedelta(hours=4)).isoformat()}).status_code == 200
    out = rollups.rollups_refresh(now=T0 + timedelta(days=1))
    assert "failed" not in out
    assert rollups.watermark(project_id=project.pk) == T0 + timedelta(days=1)
    buckets = rollups.sample_buckets(project_id=project.pk, devices=["gpu-0"], since=T0, until=T0 + timedelta(hours=4),
                                     bucket_seconds=3600, rolled_up_until=rollups.watermark(project_id=project.pk))
    assert [b.samples for b in buckets] == [12, 12, 12, 12]
    assert buckets[0].reasons == 0x40 and buckets[1].reasons == 0 and buckets[1].high("power") == 400.0
    response = browser.get("/charts/devices.json", {"since": T0.isoformat(),
                                                    "until": (T0 + timedelta(hours=4)).isoformat()})
    assert response.status_code == 200, response.content[:500]


# --- the other periodic jobs ---------------------------------------------------------------------


def refuse_inserts(table: str, project) -> None:
    """A fault of the database for one project's rows of `table` (a full tablespace, a corrupt
    index): every insert of them raises."""
    with connection.cursor() as cur:
        cur.execute("CREATE OR REPLACE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
                    " $$ BEGIN RAISE EXCEPTION 'refused for project %', NEW.project_id; END $$")
        cur.execute(f"CREATE TRIGGER test_refuse BEFORE INSERT ON {table} FOR EACH ROW"
                    f" WHEN (NEW.project_id = {int(project.pk)}) EXECUTE FUNCTION test_refuse()")


def steps_for_baselines(project) -> None:
    for i in range(30):
        task = make_task(project, f"b{i}", start=T0 + timedelta(minutes=i))
        make_step(task, "chat", kind="llm", model="m", duration_ms=1000.0 + 10 * i)


@single_node("its fault is a trigger that refuses one project's rows, and Citus supports no triggers on distributed tables")
def test_a_project_whose_baselines_fail_does_not_stop_the_others(project, other_project):
    steps_for_baselines(project)
    steps_for_baselines(other_project)
    refuse_inserts("analysis_baseline", project)
    baselines.all_projects_refresh()
    assert Baseline.objects.filter(project=other_project).exists()
    assert not Baseline.objects.filter(project=project).exists()
    assert JobFailure.objects.get(job=jobs.BASELINES, project_id=project.pk).failures == 1


@single_node("its fault is a trigger that refuses one project's rows, and Citus supports no triggers on distributed tables")
def test_a_project_whose_learned_pairs_fail_does_not_stop_the_others(project, other_project):
    for p in (project, other_project):
        for i in range(3):
            task = make_task(p, f"l{i}", start=T0 + timedelta(minutes=i))
            make_step(task, "chat", kind="llm", model="m", duration_ms=1000.0)
    refuse_inserts("analysis_agentprofile", project)
    learned.refresh_due()
    assert AgentProfile.objects.filter(project=other_project).exists()
    assert not AgentProfile.objects.filter(project=project).exists()
    assert JobFailure.objects.get(job=jobs.LEARNED_PAIRS, project_id=project.pk).failures == 1


def test_alert_rules_already_run_one_at_a_time_and_a_failing_projects_rules_are_counted(project, other_project):
    """Alert evaluation was per rule, each in a transaction of its own, before issue #39; what is
    new is that a project whose rules fail is counted in its status. It is not backed off: its
    other rules must still fire."""
    rules = {p: AlertRule.objects.create(project=p, name="p95", metric="task_duration_p95", threshold=5000,
                                         window_minutes=10, min_samples=1,
                                         channels=[{"type": "email", "to": ["oncall@example.com"]}])
             for p in (project, other_project)}
    with connection.cursor() as cur:
        cur.execute("CREATE OR REPLACE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
                    " $$ BEGIN RAISE EXCEPTION 'refused for project %', NEW.project_id; END $$")
        cur.execute(f"CREATE TRIGGER test_refuse BEFORE UPDATE ON {AlertRule._meta.db_table} FOR EACH ROW"
                    f" WHEN (NEW.project_id = {int(project.pk)}) EXECUTE FUNCTION test_refuse()")
    now = datetime.now(tz=UTC)
    assert rules_evaluate(now=now, deliver=False)["evaluated"] == 1
    rules[other_project].refresh_from_db()
    assert rules[other_project].last_evaluated_at == now
    assert JobFailure.objects.get(job=jobs.ALERTS, project_id=project.pk).failures == 1
    assert not JobFailure.objects.filter(project_id=other_project.pk).exists()
    rules_evaluate(now=now + timedelta(minutes=1), deliver=False)  # tried again at once: no back-off
    assert JobFailure.objects.get(job=jobs.ALERTS, project_id=project.pk).failures == 2
