"""The pipeline end to end with a real Celery worker subprocess: ingest over HTTP, findings
appear without anyone calling analyze; a worker SIGKILLed mid-analysis leaves nothing
partial or duplicated once the sweep hands the task out again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from analysis.engine import batch
from analysis.engine import tasks as analysis_tasks
from analysis.engine.analyse import analyse
from analysis.models import Finding, TaskAnalysis
from bench.huge_task import insert_huge_task
from ingest.models import Task
from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store
from tests.conftest import faults_pass

from .workload import at, history, problem_task, store

pytestmark = pytest.mark.django_db(transaction=True)


def start_worker(env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "solo", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "-l", "info"],
        env={**env, "AGENTOPS_ANALYSIS_QUIET_SECONDS": "1"}, cwd=os.getcwd(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_for(predicate, *, timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def event(kind, step_id, start, end, **kw):
    return {"type": "step", "task_id": "live-1", "step_id": step_id, "kind": kind, "name": kw.pop("name", kind),
            "started_at": at(start).isoformat(), "ended_at": at(end).isoformat(), **kw}


def test_findings_appear_after_http_ingest_without_calling_analyze(live_server, stack_env, project, ingest_key,
                                                                   settings):
    settings.ANALYSIS_QUIET_SECONDS = 1
    worker = start_worker(stack_env)
    try:
        events = [
            {"type": "task", "task_id": "live-1", "name": "checkout", "release": "v1",
             "started_at": at(0).isoformat(), "ended_at": at(6).isoformat(), "status": "ok"},
            event("llm", "l1", 0, 1, model="m", input_tokens=500, output_tokens=20, ttft_ms=100),
            event("tool", "a", 1.01, 1.6, tool_name="search_order", tool_args={"order_id": "A-1"}),
            event("tool", "b", 1.62, 2.2, tool_name="search_order", tool_args={"order_id": "A-1"}),
            event("llm", "l2", 4.5, 6, model="m", input_tokens=600, output_tokens=20, ttft_ms=100),
        ]
        r = requests.post(f"{live_server.url}/api/v1/ingest", data=json.dumps({"events": events}),
                          headers={"Authorization": f"Bearer {ingest_key}", "Content-Type": "application/json"},
                          timeout=30)
        assert r.status_code == 200, r.text
        task = Task.objects.get(project=project, task_id="live-1")
        kinds = wait_for(lambda: sorted(Finding.objects.filter(task=task).values_list("kind", flat=True)),
                         timeout=60)
        assert kinds == ["repeated_tool_call", "serial_gap"]
        analysis = TaskAnalysis.objects.get(task=task)
        assert analysis.critical_path == ["l1", "a", "b", "l2"]
        assert sum(analysis.budget.values()) == pytest.approx(6000, abs=0.01)
    finally:
        stop(worker)


def test_every_task_of_a_stream_of_batches_is_analysed_soon_after_its_last_span(stack_env, project, settings):
    """Ingest sends one message per trigger window (analysis/engine/signals.py): the tasks of the
    batches it sent none for are analysed by the window's message all the same, and soon; no beat
    runs here, so none of them waits for the sweep."""
    settings.ANALYSIS_QUIET_SECONDS = 1
    history(project, tasks=3)
    worker = start_worker(stack_env)
    try:
        for i in range(12):  # ~3 windows of 4 batches
            task, steps = problem_task(f"stream-{i}", i)
            store(project, task, steps)
            time.sleep(0.25)
        last_span = timezone.now()
        stream = Task.objects.filter(project=project, task_id__startswith="stream-")
        wait_for(lambda: TaskAnalysis.objects.filter(task__in=stream, analyzed_at__isnull=False).count() == 12,
                 timeout=60)
    finally:
        stop(worker)
    # Generous: the quiet period (1 s) + the window (1 s) + a loaded machine. The sweep would be 5 s+.
    slowest = max(TaskAnalysis.objects.filter(task__in=stream).values_list("analyzed_at", flat=True))
    assert (slowest - last_span).total_seconds() < 15


def big_task(project, n: int = 30000) -> Task:
    """A long task: many turns of llm → repeated search → serial stall."""
    steps, t = [], 0.0
    for i in range(n // 3):
        steps.append(StepRecord(f"l{i}", "big", at(t), at(t + 0.2), kind="llm", name="chat", model="m",
                                input_tokens=400, output_tokens=10, ttft_ms=50))
        steps.append(StepRecord(f"a{i}", "big", at(t + 0.21), at(t + 0.3), kind="tool", name="search",
                                tool_name="search", tool_args={"q": i % 50}))
        steps.append(StepRecord(f"b{i}", "big", at(t + 0.3), at(t + 0.35), kind="tool", name="fetch",
                                tool_name="fetch", tool_args={"id": i}))
        t += 0.8 if i % 100 else 1.4
    batch_store(project=project, batch=Batch(
        tasks=[TaskRecord("big", name="batch", started_at=at(0), ended_at=at(t), status="ok")], steps=steps))
    return Task.objects.get(project=project, task_id="big")


@faults_pass
def test_a_worker_killed_mid_analysis_leaves_no_partial_or_duplicate_findings(stack_env, project, settings):
    settings.ANALYSIS_QUIET_SECONDS = 0
    history(project, tasks=25)
    task = big_task(project)
    Task.objects.filter(pk=task.pk).update(last_event_at=timezone.now() - timedelta(seconds=5))
    worker = start_worker(stack_env)
    try:
        assert analysis_tasks.sweep() >= 1
        claimed = wait_for(lambda: TaskAnalysis.objects.filter(task=task, analyzed_at__isnull=True)
                           .exclude(claim_token__in=["", "queued"]).exists(), timeout=60, interval=0.02)
        assert claimed
        stop(worker, signal.SIGKILL)
        assert not Finding.objects.filter(task=task).exists()
        assert TaskAnalysis.objects.get(task=task).analyzed_at is None
    finally:
        stop(worker, signal.SIGKILL)
    # The dead worker's claim runs out; the next sweep hands the task to a new worker.
    TaskAnalysis.objects.filter(task=task).update(claimed_until=timezone.now() - timedelta(seconds=1))
    worker = start_worker(stack_env)
    try:
        assert analysis_tasks.sweep() >= 1
        wait_for(lambda: TaskAnalysis.objects.filter(task=task, analyzed_at__isnull=False).exists(), timeout=120)
    finally:
        stop(worker)
    expected = analyse(batch.contexts_load([task.pk])[task.pk])["findings"]
    stored = list(Finding.objects.filter(task=task).values_list("kind", "step_ids"))
    assert len(stored) == len(expected) > 0
    assert len({(k, tuple(ids)) for k, ids in stored}) == len(stored)


def worker_claim(task):
    """(token, claimed_until) of a worker's claim on the task, once a worker holds it."""
    return TaskAnalysis.objects.filter(task=task, analyzed_at__isnull=True).exclude(
        claim_token__in=["", "queued"]).values_list("claim_token", "claimed_until").first()


def test_a_claim_renewed_past_its_lease_is_not_claimed_again(stack_env, project, settings):
    # A 200,000-span trace's analysis outlived the 300 s lease, was claimed again and ran twice
    # (issue #39). Here the lease is 6 s and the analysis takes longer: its worker renews it.
    settings.ANALYSIS_QUIET_SECONDS = 0
    task = insert_huge_task(project, "long", steps=45_000, calls=20)
    worker = start_worker({**stack_env, "AGENTOPS_ANALYSIS_CLAIM_SECONDS": "6"})
    try:
        analysis_tasks.analyse_tasks.apply_async(args=[[task.pk]], kwargs={"project_id": project.pk})
        token, first_until = wait_for(lambda: worker_claim(task), timeout=120, interval=0.02)
        tries = 0
        while TaskAnalysis.objects.get(task=task).analyzed_at is None:
            if timezone.now() > first_until + timedelta(seconds=1):  # past the lease it was claimed with
                assert batch.claim_ids([task.pk])[1] == {}, "live work claimed again"
                row = TaskAnalysis.objects.get(task=task)
                assert row.analyzed_at is not None or row.claimed_until > first_until  # renewed (or just stored)
                tries += 1
            time.sleep(0.3)
            assert worker.poll() is None
    finally:
        stop(worker)
    assert tries >= 3, "the analysis ended within its first lease: nothing was shown"
    row = TaskAnalysis.objects.get(task=task)
    assert row.analyzed_through == task.last_event_at and row.claim_token == ""  # stored by its worker


def test_a_dead_workers_tasks_can_be_claimed_again_within_a_minute(stack_env, project, settings):
    settings.ANALYSIS_QUIET_SECONDS = 0
    task = insert_huge_task(project, "killed", steps=45_000, calls=20)
    worker = start_worker(stack_env)  # the default lease
    try:
        analysis_tasks.analyse_tasks.apply_async(args=[[task.pk]], kwargs={"project_id": project.pk})
        wait_for(lambda: worker_claim(task), timeout=120, interval=0.02)
    finally:
        stop(worker, signal.SIGKILL)
    killed = time.monotonic()
    assert TaskAnalysis.objects.get(task=task).analyzed_at is None
    token, claimed = None, {}
    while not claimed and time.monotonic() - killed < 75:
        time.sleep(1)
        token, claimed = batch.claim_ids([task.pk])
    assert claimed, "the dead worker's claim was still held after 75 s"
    assert time.monotonic() - killed < 60
    assert batch.analyse_claimed(claimed, token=token)["analysed"] == 1
