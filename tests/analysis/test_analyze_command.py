"""`manage.py analyze`: the same claim-and-replace path as the workers, run by hand."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from analysis.models import Finding, TaskAnalysis
from ingest.models import Task

from .workload import history, problem_task, store


def test_analyze_all_of_a_project_reports_what_it_did(project, other_project):
    start = history(project, tasks=25)
    task, steps = problem_task("p1", start)
    store(project, task, steps)
    store(other_project, *problem_task("q1", 0))
    out, err = StringIO(), StringIO()
    call_command("analyze", "--all", "--project", "acme", stdout=out, stderr=err)
    assert "26 tasks" in out.getvalue() and "analysed=26" in out.getvalue()
    assert "analysed 26/26 tasks" in err.getvalue()
    assert TaskAnalysis.objects.filter(project=project, analyzed_at__isnull=False).count() == 26
    assert not TaskAnalysis.objects.filter(project=other_project).exists()
    assert Finding.objects.filter(task__task_id="p1").count() == 3


def test_analyze_one_task_twice_gives_the_same_findings(project):
    start = history(project, tasks=25)
    store(project, *problem_task("p1", start))
    call_command("analyze", "--task", "p1", stdout=StringIO(), stderr=StringIO())
    first = sorted(Finding.objects.filter(task__task_id="p1").values_list("kind", "step_ids"))
    call_command("analyze", "--task", "p1", stdout=StringIO(), stderr=StringIO())
    assert sorted(Finding.objects.filter(task__task_id="p1").values_list("kind", "step_ids")) == first
    assert Task.objects.get(task_id="p1").analysis.analyzed_at is not None


@pytest.mark.parametrize("args, message", [
    ((), "--all, --due or --task"),
    (("--task", "nope"), "no task 'nope'"),
    (("--all", "--project", "nope"), "no project named 'nope'"),
])
def test_analyze_explains_what_is_wrong(db, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("analyze", *args, stdout=StringIO(), stderr=StringIO())
