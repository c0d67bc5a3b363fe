"""Scale-out: two Celery workers (concurrency 1 each) on one broker analyse 2,000 simulated
tasks between them — every ended task analysed, none analysed twice.

The simulator stores the tasks in-process through the ingest path; its `tasks_ended` signal
enqueues the analysis in chunks, and the two workers race for the messages and, inside a
message, for each task's claim. The workers' own logs say how many tasks each analysed (the
`analysed` count of every `analysis.analyse_tasks` result), so a task analysed twice shows
as a total above the number of tasks, whichever worker did it."""

from __future__ import annotations

import ast
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import Count

from analysis.models import Finding, TaskAnalysis
from ingest.models import Project, Task
from tests.conftest import faults_pass

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, faults_pass]

TASKS = 2000
RESULT = re.compile(r"Task analysis\.analyse_tasks\[[^\]]+\] succeeded in [0-9.e-]+s: (\{.*\})")


def start_worker(env: dict, name: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "solo", "--concurrency", "1",
         "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"],
        env={**env, "AGENTOPS_ANALYSIS_QUIET_SECONDS": "0", "DEBUG": "0"}, cwd=os.getcwd(),
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def analysed_by(log: Path) -> int:
    return sum(ast.literal_eval(m.group(1)).get("analysed", 0) for m in RESULT.finditer(log.read_text()))


def test_two_workers_analyse_every_task_exactly_once(stack_env, settings, tmp_path):
    settings.ANALYSIS_QUIET_SECONDS = 0  # enqueue at once; the workers see the same setting
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [start_worker(stack_env, name, log) for name, log in zip(("a", "b"), logs, strict=True)]
    try:
        call_command("simulate", project="scale", tasks=TASKS, seed=23, since="1d", stdout=io.StringIO(),
                     stderr=io.StringIO())
        project = Project.objects.get(name="scale")
        ended = Task.objects.filter(project=project, ended_at__isnull=False)
        expected = ended.count()
        assert expected >= TASKS * 0.95, f"the simulator ended only {expected} of {TASKS} tasks"

        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            done = TaskAnalysis.objects.filter(task__in=ended, analyzed_at__isnull=False).count()
            if done >= expected:
                break
            assert all(w.poll() is None for w in workers), "a worker died: " + logs[0].read_text()[-2000:]
            time.sleep(0.5)
        time.sleep(1)  # the last results reach the logs
    finally:
        for w in workers:
            stop(w)

    # A message that failed (a claim that lost a deadlock to the other worker's, say) leaves its
    # tasks to the sweep, which this stack does not run: they would show as missed below.
    failures = [line for log in logs for line in log.read_text().splitlines() if "raised unexpected" in line]
    assert not failures, failures[:3]
    missed = list(ended.exclude(analysis__analyzed_at__isnull=False).values_list("task_id", flat=True)[:10])
    assert not missed, f"{len(missed)}+ ended tasks never analysed, e.g. {missed}"
    per_worker = [analysed_by(log) for log in logs]
    # Both consumed messages of the one queue (a drain claims whatever is due, so when one worker
    # keeps up with the simulator it may analyse every task while the other's claims find none) ...
    assert all(RESULT.search(log.read_text()) for log in logs), per_worker
    # ... and between them analysed each task once per request that brought its data: a task's
    # steps come in one native batch, and for some tasks their server's llm_request spans follow
    # in an OTLP request moments later, which (with no quiet period) rightly makes the task due
    # again. A task analysed twice at once, or lost, would break the bounds.
    late = Task.objects.filter(pk__in=ended, steps__name="llm_request").distinct().count()
    assert expected <= sum(per_worker) <= expected + late, (per_worker, expected, late)
    doubled = (Finding.objects.filter(task__project=project).values("task", "kind", "step_ids")
               .annotate(n=Count("id")).filter(n__gt=1))
    assert not doubled.exists()
    assert not TaskAnalysis.objects.filter(task__project=project).exclude(claim_token="").exists()
