"""Batch analysis: many tasks claimed in one statement, loaded in a few queries and stored by
COPY; a task gets the same results alone (a batch of one) as among others, and the same claim
guarantees."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import fields
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from scipy.stats import kendalltau

from analysis.engine import batch, pipeline
from analysis.engine.baselines import baselines_refresh
from analysis.engine.detectors.base import StepData
from analysis.engine.detectors.context_growth import kendall_tau
from analysis.engine.tasks import analyse_tasks
from analysis.models import Finding, TaskAnalysis
from ingest.models import Step, Task
from ingest.records import Batch, StepRecord
from ingest.services import batch_store
from tests.conftest import ON_CITUS, faults_pass

from .workload import at, history, problem_task, store


@pytest.fixture
def quiet(settings):
    settings.ANALYSIS_QUIET_SECONDS = 0
    settings.ANALYSIS_ABANDON_SECONDS = 3600
    return settings


def results(project) -> tuple[list, list]:
    findings = sorted(
        (f.task.task_id, f.kind, tuple(f.step_ids), f.wasted_ms, f.severity, f.summary, repr(f.evidence),
         f.confidence, f.confidence_reason, f.release, f.task_started_at)
        for f in Finding.objects.filter(project=project).select_related("task"))
    analyses = sorted(
        (a.task.task_id, tuple(a.critical_path), repr(a.budget), repr(a.whatif), a.wasted_ms, a.top_finding,
         tuple(a.finding_kinds), a.analyzed_through == a.task.last_event_at, a.claim_token, a.claimed_until)
        for a in TaskAnalysis.objects.filter(project=project).select_related("task"))
    return findings, analyses


def test_a_task_analysed_alone_gets_the_results_it_gets_in_a_batch(project):
    # A batch shares its baselines, telemetry reads and learned profiles among its tasks: what a
    # task's analysis sees must not depend on which tasks it was batched with.
    call_command("simulate", project=project.name, tasks=150, seed=11, since="1d", stdout=StringIO(),
                 stderr=StringIO())
    baselines_refresh(project=project, full=True)
    pks = list(Task.objects.filter(project=project).order_by("pk").values_list("pk", flat=True))
    token, claimed = batch.claim_ids(pks, force=True)
    assert sorted(claimed) == pks
    outcome = batch.analyse_claimed(claimed, token=token)
    assert outcome["analysed"] == len(pks) and outcome["claim_lost"] == outcome["failed"] == 0
    together = results(project)
    assert len(together[0]) > 20  # the simulator injected problems: there is something to compare
    Finding.objects.filter(project=project).delete()
    TaskAnalysis.objects.filter(project=project).delete()
    for pk in pks:
        assert pipeline.run(pk, force=True) == "analysed"
    assert results(project) == together


def test_every_step_field_is_loaded_from_its_own_column(project):
    # By name, not by position: each StepData field holds the value of the column it is named after.
    # Times to the µs that float ms cannot hold exactly: the loader's ms equal timestamp() × 1000.
    batch_store(project=project, batch=Batch(steps=[
        StepRecord("a", "t1", at(0.000003), at(1.000005), kind="tool", name="lookup", tool_name="lookup", tool_args={"id": 7},
                   tool_result="{\"id\": 7}", tool_call_id="call-a", status="error", error="boom"),
        StepRecord("b", "t1", at(1), at(3), kind="llm", name="chat", parent_step_id="a", depends_on=["a"],
                   model="m-1", device="gpu-1", input_tokens=11, output_tokens=22, ttft_ms=33.5,
                   tool_call_ids=["call-a", "call-b"], attributes={"agentops.serving": {"queue_ms": 5.0}}),
        # HTTP client spans below a model call: the server each dialed (StepData.peer), as the newer
        # conventions name it, as the older URL attribute carries it (no user info, lower case), or none.
        StepRecord("c", "t1", at(1), at(3), kind="other", name="POST", parent_step_id="b",
                   attributes={"http.request.method": "POST", "server.address": "vllm-1", "server.port": 8000,
                               "url.full": "http://elsewhere:1/v1"}),
        StepRecord("d", "t1", at(1), at(3), kind="other", name="POST", parent_step_id="b",
                   attributes={"http.method": "POST", "http.url": "https://user:pw@VLLM-2.internal:8443/v1/chat?x=1"}),
        StepRecord("e", "t1", at(1), at(3), kind="other", name="POST", parent_step_id="b",
                   attributes={"http.method": "POST"})]))
    task = Task.objects.get(project=project, task_id="t1")
    loaded = {s.step_id: s for s in batch.contexts_load([task.pk])[task.pk].steps}
    assert {sid: s.peer for sid, s in loaded.items()} == {"a": "", "b": "", "c": "vllm-1:8000",
                                                          "d": "vllm-2.internal:8443", "e": ""}
    assert {s.server for s in loaded.values()} == {""}  # an LLM call's own server.address: none sent here
    for row in Step.objects.filter(task=task):
        step = loaded[row.step_id]
        assert (step.start_ms, step.end_ms) == (row.started_at.timestamp() * 1000, row.ended_at.timestamp() * 1000)
        assert step.serving == row.attributes.get("agentops.serving")  # an attribute, not a column
        for f in fields(StepData):
            if f.name not in ("start_ms", "end_ms", "serving", "peer", "server"):  # attributes, read above
                stored = getattr(row, f.name)
                assert getattr(step, f.name) == (tuple(stored) if isinstance(stored, list) else stored), f.name


def test_analysing_a_batch_twice_replaces_its_findings(project, quiet):
    history(project, tasks=25)
    for i in range(3):
        store(project, *problem_task(f"p{i}", 400 + 20 * i))
    pks = list(Task.objects.filter(project=project).values_list("pk", flat=True))
    for _ in range(2):
        token, claimed = batch.claim_ids(pks, force=True)
        batch.analyse_claimed(claimed, token=token)
    first = results(project)
    token, claimed = batch.claim_ids(pks, force=True)
    batch.analyse_claimed(claimed, token=token)
    assert results(project) == first
    assert Finding.objects.filter(task__task_id="p0", kind="repeated_tool_call").count() == 1


def test_a_batch_claim_leaves_out_tasks_another_worker_holds(project, quiet):
    history(project, tasks=5)
    held = Task.objects.get(project=project, task_id="n0")
    assert batch.claim_ids([held.pk])[1] == {held.pk: project.pk}  # each claimed task with its project
    pks = list(Task.objects.filter(project=project).values_list("pk", flat=True))
    token, claimed = batch.claim_ids(pks)
    assert held.pk not in claimed and len(claimed) == len(pks) - 1
    # A second batch claim gets nothing: every task is held now.
    assert batch.claim_ids(pks)[1] == {}
    assert batch.claim_due()[1] == {}
    batch.analyse_claimed(claimed, token=token)
    assert not Finding.objects.filter(task=held).exists()
    assert TaskAnalysis.objects.get(task=held).analyzed_at is None


def test_a_claim_that_names_the_projects_takes_only_their_tasks_and_a_batch_of_them_is_analysed(
        project, other_project, quiet):
    # The ingest trigger and `analyze` name the tasks' projects (on Citus each claim and load then
    # runs on those projects' shards): a task id of another project is neither claimed nor read.
    history(project, tasks=3)
    history(other_project, tasks=2)
    ours = list(Task.objects.filter(project=project).values_list("pk", flat=True))
    theirs = list(Task.objects.filter(project=other_project).values_list("pk", flat=True))
    token, claimed = batch.claim_ids(ours + theirs, projects=[project.pk])
    assert claimed == {pk: project.pk for pk in sorted(ours)}
    outcome = batch.analyse_claimed(claimed, token=token)
    assert outcome["analysed"] == len(ours)
    assert TaskAnalysis.objects.filter(task_id__in=ours, analyzed_at__isnull=False).count() == len(ours)
    assert not TaskAnalysis.objects.filter(task_id__in=theirs, analyzed_at__isnull=False).exists()
    # …and the other project's tasks are still free for a claim that names their project.
    assert set(batch.run_ids(theirs, projects=[other_project.pk], top_up=False).items()) >= {("analysed", 2)}


def test_two_due_claims_never_share_a_task(project, quiet):
    history(project, tasks=30)
    first = batch.claim_due(limit=20)[1]
    second = batch.claim_due(limit=20)[1]
    assert len(first) == 20 and len(second) == 10
    assert not set(first) & set(second)


def test_a_task_stored_while_another_worker_waits_to_claim_it_is_not_analysed_twice(transactional_db, project,
                                                                                       quiet):
    """Worker A stores a task's results while worker B's claim (chosen in an older snapshot, when
    the task was still due) waits for A's row locks: once A commits, B must not take the task."""
    from django.db import connection, connections

    history(project, tasks=3)
    pk = Task.objects.filter(project=project).values_list("pk", flat=True).first()
    token_a, claimed_a = batch.claim_ids([pk])
    assert list(claimed_a) == [pk]
    storing, commit, b_result = threading.Event(), threading.Event(), {}

    def worker_a():
        try:
            with transaction.atomic():
                assert batch.analyse_claimed([pk], token=token_a)["analysed"] == 1
                storing.set()
                commit.wait(30)
        finally:
            connections.close_all()

    def worker_b():
        try:
            b_result["claimed"] = batch.claim_ids([pk])[1]
        finally:
            connections.close_all()

    a = threading.Thread(target=worker_a)
    a.start()
    assert storing.wait(30)
    b = threading.Thread(target=worker_b)
    b.start()
    deadline = time.monotonic() + 30
    # On Citus the row, and B's wait for its lock, are on the worker holding the project's shard
    # (the shard's statement: INSERT INTO public.analysis_taskanalysis_<shard>); citus_stat_activity
    # shows every node's backends.
    activity = "citus_stat_activity" if ON_CITUS else "pg_stat_activity"
    with connection.cursor() as cursor:  # B is waiting on A's lock on the task's analysis row
        while time.monotonic() < deadline:
            cursor.execute(f"SELECT count(*) FROM {activity} WHERE wait_event_type = 'Lock'"
                           " AND query LIKE %s", ["%INSERT INTO %analysis_taskanalysis%"])
            if cursor.fetchone()[0]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("worker B never waited for worker A's lock")
    commit.set()
    a.join(30)
    b.join(30)
    assert b_result["claimed"] == {}
    analysis = TaskAnalysis.objects.get(task_id=pk)
    assert analysis.claim_token == "" and analysis.analyzed_through == analysis.task.last_event_at


def test_a_batch_whose_claim_on_one_task_expired_stores_only_the_rest(project, quiet):
    history(project, tasks=4)
    for i in range(2):
        store(project, *problem_task(f"p{i}", 400 + 20 * i))
    pks = list(Task.objects.filter(project=project).values_list("pk", flat=True))
    token, claimed = batch.claim_ids(pks)
    stolen = Task.objects.get(project=project, task_id="p0")
    TaskAnalysis.objects.filter(task=stolen).update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert list(batch.claim_ids([stolen.pk])[1]) == [stolen.pk]  # the new owner
    outcome = batch.analyse_claimed(claimed, token=token)
    assert outcome["claim_lost"] == 1 and outcome["analysed"] == len(pks) - 1
    assert not Finding.objects.filter(task=stolen).exists()
    assert Finding.objects.filter(task__task_id="p1").exists()


def test_late_data_makes_a_batch_analysed_task_due_again(project, quiet):
    store(project, *problem_task("p1", 0))
    task = Task.objects.get(project=project, task_id="p1")
    assert batch.run_due()["analysed"] == 1
    assert batch.claim_due()[1] == {}
    batch_store(project=project, batch=Batch(steps=[StepRecord("late", "p1", at(2.6), at(4.4), kind="tool",
                                                               name="notify")]))
    assert batch.run_due()["analysed"] == 1
    assert "late" in TaskAnalysis.objects.get(task=task).critical_path


def test_a_batch_is_bounded_by_its_steps(project, quiet, monkeypatch):
    history(project, tasks=10)  # 3 steps each
    monkeypatch.setattr(batch, "BATCH_STEPS", 7)
    assert len(batch.claim_due()[1]) == 2
    monkeypatch.setattr(batch, "BATCH_STEPS", 1)
    assert len(batch.claim_due()[1]) == 1  # a task bigger than the bound still goes, alone


def test_an_ingest_message_tops_its_batch_up_with_other_due_tasks(project, quiet):
    history(project, tasks=12)
    one = Task.objects.get(project=project, task_id="n3")
    outcome = analyse_tasks([one.pk])
    assert outcome["analysed"] == 12
    assert TaskAnalysis.objects.filter(project=project, analyzed_at__isnull=False).count() == 12
    # A message whose tasks were analysed already does nothing.
    assert analyse_tasks([one.pk]).get("analysed", 0) == 0


def test_a_message_whose_tasks_were_taken_drains_every_due_task_not_only_one_batch(project, quiet, monkeypatch):
    # One ingest message per window: the window's other tasks have no message of their own, so the
    # worker that finds its message's tasks gone must still work off everything due.
    history(project, tasks=12)
    monkeypatch.setattr(batch, "BATCH_TASKS", 5)
    first = Task.objects.get(project=project, task_id="n3")
    pipeline.run(first.pk)  # another worker's drain took this message's task
    outcome = analyse_tasks([first.pk])
    assert outcome["analysed"] == 11 and not outcome["more_due"]
    assert not TaskAnalysis.objects.filter(project=project, analyzed_at__isnull=True).exists()


def test_a_drain_cut_short_by_its_time_sends_itself_on_and_the_next_message_finishes(project, quiet, monkeypatch):
    from unittest import mock

    history(project, tasks=12)
    monkeypatch.setattr(batch, "BATCH_TASKS", 5)
    monkeypatch.setattr(batch, "DRAIN_SECONDS", 0.0)  # the time is up after the first batch
    with mock.patch("analysis.engine.tasks.analyse_tasks.apply_async") as publish:
        outcome = analyse_tasks([])
    assert outcome["analysed"] == 5 and outcome["more_due"] == 1
    publish.assert_called_once_with(args=[[]])
    monkeypatch.setattr(batch, "DRAIN_SECONDS", 20.0)
    with mock.patch("analysis.engine.tasks.analyse_tasks.apply_async") as publish:
        outcome = analyse_tasks([])  # the message it sent
    assert outcome["analysed"] == 7 and not outcome["more_due"]
    publish.assert_not_called()
    assert not TaskAnalysis.objects.filter(project=project, analyzed_at__isnull=True).exists()


def test_kendall_tau_is_scipys_bit_for_bit():
    rng = random.Random(17)
    for _ in range(3000):
        n = rng.randint(2, 40)
        pool = [float(rng.randint(0, 5)) for _ in range(3)]
        values = [rng.choice(pool) if rng.random() < 0.4 else rng.uniform(0, 5000) for _ in range(n)]
        if len(set(values)) < 2:
            continue
        assert kendall_tau(values) == float(kendalltau(range(n), values).statistic)


def due_tasks(project, n: int, *, last_event_at, prefix: str) -> list[Task]:
    """n ended, quiet tasks of two steps each (rows only: the claim reads the tasks, not their steps)."""
    start = last_event_at - timedelta(seconds=5)
    return Task.objects.bulk_create(
        Task(project=project, task_id=f"{prefix}{i}", name="agent", started_at=start, ended_at=start + timedelta(seconds=1),
             duration_ms=1000.0, reported=True, step_count=2, last_event_at=last_event_at + timedelta(milliseconds=i))
        for i in range(n))


def test_one_projects_backlog_does_not_hold_another_projects_task_out_of_the_batch(project, other_project, quiet):
    # Oldest last event first, project A's 500 due tasks filled the first batch and B's one task,
    # newer than all of them, waited for the batches after (issue #39: more than 90 s).
    due_tasks(project, 500, last_event_at=timezone.now() - timedelta(minutes=10), prefix="a")
    (b,) = due_tasks(other_project, 1, last_event_at=timezone.now() - timedelta(seconds=2), prefix="b")
    _, claimed = batch.claim_due(limit=batch.BATCH_TASKS)
    assert len(claimed) == batch.BATCH_TASKS
    assert claimed[b.pk] == other_project.pk
    # The rest of the batch is A's, oldest first; the next claim takes A's last one.
    assert sorted(pk for pk, p in claimed.items() if p == project.pk) == sorted(
        Task.objects.filter(project=project).order_by("last_event_at").values_list("pk", flat=True)[:499])
    assert len(batch.claim_due(limit=batch.BATCH_TASKS)[1]) == 1


def test_projects_take_turns_within_a_batch(project, other_project, quiet):
    older = due_tasks(project, 5, last_event_at=timezone.now() - timedelta(minutes=10), prefix="a")
    newer = due_tasks(other_project, 5, last_event_at=timezone.now() - timedelta(minutes=1), prefix="b")
    _, claimed = batch.claim_due(limit=4)
    assert set(claimed) == {older[0].pk, older[1].pk, newer[0].pk, newer[1].pk}


# The bound on one analysing process's peak RSS, whatever the size of its task (docs/analysis.md,
# "Huge tasks"): a 200,000-span trace analysed whole took 3.3 GB (issue #39).
PEAK_RSS_MB = 1024


@pytest.mark.slow
@faults_pass  # minutes of one child process's analysis: the faults pass, not the suite's each pass
@pytest.mark.django_db(transaction=True)
def test_a_huge_task_is_analysed_in_bounded_memory_and_says_what_it_covered(stack_env, project, read_key, client,
                                                                            django_user_model):
    import json
    import subprocess
    import sys

    from bench.huge_task import insert_huge_task

    task = insert_huge_task(project, "huge", steps=200_000, calls=20)
    assert task.step_count > 199_000
    # Analysed as a worker does (a batch of one) in a process of its own, whose peak RSS is read.
    out = subprocess.run([sys.executable, "bench/huge_task.py", "--child", str(task.pk)], env=stack_env,
                         stdout=subprocess.PIPE, text=True, timeout=900, check=True)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    assert measured["outcome"] == "analysed"
    assert measured["peak_rss_mb"] < PEAK_RSS_MB, measured
    analysis = TaskAnalysis.objects.get(task=task)
    assert analysis.limited["reason"] == "too_large"
    assert analysis.limited["steps"] == task.step_count
    assert analysis.limited["analysed_steps"] == analysis.limited["limit"] == batch.HUGE_TASK_STEPS
    # What could be computed is there: findings, a critical path, a budget of the part analysed.
    until = datetime.fromisoformat(analysis.limited["analysed_until"])
    assert task.started_at < until < task.ended_at
    assert sum(analysis.budget.values()) == pytest.approx((until - task.started_at).total_seconds() * 1000, abs=1)
    assert analysis.critical_path and Finding.objects.filter(task=task).exists()
    # … and the task page and the API say what it covers.
    body = client.get("/api/v1/tasks/huge", HTTP_AUTHORIZATION=f"Bearer {read_key}").json()
    assert body["analysis_limited"]["analysed_steps"] == batch.HUGE_TASK_STEPS
    assert body["analysis_limited"]["note"] == analysis.limited_note
    assert "Too large to analyse fully" in analysis.limited_note and f"{task.step_count:,} steps" in analysis.limited_note
    user = django_user_model.objects.create_user("ana", password="pw")
    project.members.add(user)
    client.force_login(user)
    page = client.get("/tasks/huge").content.decode()
    assert 'id="analysis-limited"' in page and f"{task.step_count:,} steps" in page


def test_a_task_under_the_size_limit_is_analysed_whole(project, quiet):
    from bench.huge_task import insert_huge_task

    task = insert_huge_task(project, "big", steps=2_000, calls=20)
    token, claimed = batch.claim_ids([task.pk], force=True)
    assert batch.analyse_claimed(claimed, token=token)["analysed"] == 1
    analysis = TaskAnalysis.objects.get(task=task)
    assert analysis.limited is None and analysis.limited_note == ""
    assert sum(analysis.budget.values()) == pytest.approx(task.duration_ms, abs=1)


@pytest.mark.django_db(transaction=True)
def test_a_held_claim_is_renewed_and_a_dropped_one_runs_out(project, quiet, monkeypatch):
    monkeypatch.setattr(batch, "CLAIM_SECONDS", 2)
    monkeypatch.setattr(batch, "HEARTBEAT_SECONDS", 0.4)
    held, dropped = due_tasks(project, 2, last_event_at=timezone.now() - timedelta(minutes=1), prefix="t")
    token, claimed = batch.claim_ids([held.pk, dropped.pk], projects=[project.pk])
    assert len(claimed) == 2
    with batch.Heartbeat() as beat:
        beat.hold(token, {held.pk: project.pk})
        time.sleep(3.5)  # past the 2 s lease
        assert batch.claim_ids([held.pk, dropped.pk], projects=[project.pk])[1] == {dropped.pk: project.pk}
    assert TaskAnalysis.objects.get(task=held).claim_token == token
