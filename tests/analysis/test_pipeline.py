"""When tasks are analysed and by whom: due-ness, claims, the sweep and the ingest signal."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from analysis.engine import batch, pipeline
from analysis.engine.signals import TRIGGER_WINDOW_SECONDS
from analysis.models import Finding, TaskAnalysis
from ingest.models import Task
from ingest.records import Batch, StepRecord
from ingest.services import batch_store

from .workload import at, history, problem_task, store


@pytest.fixture
def quiet(settings):
    settings.ANALYSIS_QUIET_SECONDS = 0
    settings.ANALYSIS_ABANDON_SECONDS = 3600
    return settings


@pytest.fixture
def ended(project, quiet):
    task, steps = problem_task("p1", history(project, tasks=3))
    store(project, task, steps)
    return Task.objects.get(project=project, task_id="p1")


def test_a_claimed_task_is_not_analysed_by_a_second_worker(ended):
    assert list(batch.claim_ids([ended.pk])[1]) == [ended.pk]
    assert batch.claim_ids([ended.pk])[1] == {}
    assert pipeline.run(ended.pk) == "claimed_elsewhere"
    assert pipeline.run(ended.pk, force=True) == "claimed_elsewhere"
    assert not Finding.objects.filter(task=ended).exists()


def test_an_expired_claim_is_taken_over_and_the_stale_worker_cannot_write(ended):
    stale, _ = batch.claim_ids([ended.pk])
    TaskAnalysis.objects.filter(task=ended).update(claimed_until=timezone.now() - timedelta(seconds=1))
    fresh, claimed = batch.claim_ids([ended.pk])
    assert list(claimed) == [ended.pk] and fresh != stale
    assert batch.analyse_claimed([ended.pk], token=stale)["claim_lost"] == 1
    assert not Finding.objects.filter(task=ended).exists()
    assert batch.analyse_claimed([ended.pk], token=fresh)["analysed"] == 1
    # Three tasks of history are a cold start: no slow_step yet, only the history-free kinds.
    assert sorted(Finding.objects.filter(task=ended).values_list("kind", flat=True)) == [
        "repeated_tool_call", "serial_gap"]
    row = TaskAnalysis.objects.get(task=ended)
    assert row.claimed_until is None and row.analyzed_through == ended.last_event_at


def test_the_sweep_hands_out_a_due_task_once_and_the_worker_takes_it(ended):
    due = pipeline.sweep()
    assert ended.pk in due
    assert ended.pk not in pipeline.sweep()  # queued: not enqueued again while it waits
    assert pipeline.run(ended.pk) == "analysed"
    assert ended.pk not in pipeline.sweep()


def test_a_task_another_worker_analysed_just_before_our_claim_is_not_analysed_again(ended, monkeypatch):
    claim, theirs = batch.claim_ids, {}

    def claim_after_another_worker(task_pks, **kwargs):
        token, [pk] = claim(task_pks)  # the other worker claims, analyses and releases the task meanwhile
        batch.analyse_claimed([pk], token=token)
        theirs["analyzed_at"] = TaskAnalysis.objects.get(task_id=pk).analyzed_at
        return claim(task_pks, **kwargs)

    monkeypatch.setattr(batch, "claim_ids", claim_after_another_worker)
    assert pipeline.run(ended.pk) == "not_due"
    row = TaskAnalysis.objects.get(task=ended)
    assert row.analyzed_at == theirs["analyzed_at"]  # their analysis stands, not a second one
    assert row.claim_token == "" and row.claimed_until is None


def test_a_task_still_receiving_steps_is_not_due(project, settings):
    settings.ANALYSIS_QUIET_SECONDS = 60
    task, steps = problem_task("p1", 0)
    store(project, task, steps)
    pk = Task.objects.get(task_id="p1").pk
    assert pipeline.run(pk) == "not_due"
    assert pk not in pipeline.sweep()


def test_a_task_never_reported_ended_is_due_after_the_abandon_period(project, quiet):
    batch_store(project=project, batch=Batch(steps=[StepRecord("s1", "orphan", at(0), at(1), kind="tool", name="x")]))
    task = Task.objects.get(task_id="orphan")
    assert task.pk not in pipeline.sweep()
    Task.objects.filter(pk=task.pk).update(last_event_at=timezone.now() - timedelta(hours=2))
    assert task.pk in pipeline.sweep()


def test_ingest_enqueues_ended_tasks_after_the_quiet_period(project, django_capture_on_commit_callbacks, settings):
    settings.ANALYSIS_QUIET_SECONDS = 7
    task, steps = problem_task("p1", 0)
    with mock.patch("analysis.engine.tasks.analyse_tasks.apply_async") as publish:
        with django_capture_on_commit_callbacks(execute=True):
            store(project, task, steps)
    publish.assert_called_once()
    assert publish.call_args.kwargs["args"] == [[Task.objects.get(task_id="p1").pk]]
    # Due when the quiet period is over for every task of its trigger window (signals.py).
    assert 7 < publish.call_args.kwargs["countdown"] <= 7 + TRIGGER_WINDOW_SECONDS


def test_batches_stored_within_one_window_send_one_message_due_after_all_of_them(
        project, django_capture_on_commit_callbacks, settings):
    settings.ANALYSIS_QUIET_SECONDS = 5
    with mock.patch("analysis.engine.signals.time") as clock, \
            mock.patch("analysis.engine.tasks.analyse_tasks.apply_async") as publish:
        clock.time.return_value, clock.monotonic.return_value = 1_000_000.25, 0.0
        for i in range(5):
            task, steps = problem_task(f"w{i}", i)
            with django_capture_on_commit_callbacks(execute=True):
                store(project, task, steps)
    publish.assert_called_once()
    assert publish.call_args.kwargs["countdown"] == pytest.approx(5.75)


def test_a_message_whose_tasks_were_taken_analyses_the_other_due_tasks(ended):
    from analysis.engine.tasks import analyse_tasks

    task, steps = problem_task("p2", 0)
    store(ended.project, task, steps)
    other = Task.objects.get(task_id="p2")
    pipeline.run(ended.pk)  # another worker's drain took this message's task
    assert analyse_tasks([ended.pk])["analysed"] >= 1
    assert TaskAnalysis.objects.get(task=other).analyzed_at is not None


def test_one_message_carries_a_chunk_of_ended_tasks(project, django_capture_on_commit_callbacks):
    from analysis.engine.tasks import ENQUEUE_CHUNK

    batches = [problem_task(f"p{i}", i) for i in range(ENQUEUE_CHUNK + 3)]
    with mock.patch("analysis.engine.tasks.analyse_tasks.apply_async") as publish:
        with django_capture_on_commit_callbacks(execute=True):
            batch_store(project=project, batch=Batch(tasks=[t for t, _ in batches],
                                                     steps=[s for _, steps in batches for s in steps]))
    sizes = [len(call.kwargs["args"][0]) for call in publish.call_args_list]
    assert sizes == [ENQUEUE_CHUNK, 3]


def test_a_broker_outage_never_breaks_ingest(project, django_capture_on_commit_callbacks, caplog):
    task, steps = problem_task("p1", 0)
    with mock.patch("analysis.engine.tasks.analyse_tasks.apply_async", side_effect=ConnectionError("broker down")):
        with django_capture_on_commit_callbacks(execute=True):
            store(project, task, steps)
    assert Task.objects.filter(task_id="p1").exists()
    assert "analysis.enqueue_failed" in caplog.text
