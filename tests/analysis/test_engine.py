"""The engine on tasks stored through the real write path: findings, path, budget, what-if,
de-duplicated waste and idempotent re-analysis."""

from __future__ import annotations

import pytest

from analysis.engine import pipeline
from analysis.models import Baseline, Finding, TaskAnalysis
from ingest.models import Task

from .workload import history, problem_task, store


@pytest.fixture
def problem(project):
    start = history(project)
    task, steps = problem_task("p1", start)
    store(project, task, steps)
    return Task.objects.get(project=project, task_id="p1")


def kinds(task):
    return sorted(Finding.objects.filter(task=task).values_list("kind", flat=True))


def test_a_task_with_known_problems_gets_exactly_those_findings(problem):
    pipeline.run(problem.pk, force=True)
    assert kinds(problem) == ["repeated_tool_call", "serial_gap", "slow_step"]
    repeat = Finding.objects.get(task=problem, kind="repeated_tool_call")
    assert repeat.step_ids == ["p1-a", "p1-b", "p1-c"]
    assert repeat.wasted_ms == pytest.approx(800, abs=1)
    assert repeat.release == "v2" and repeat.task_started_at == problem.started_at
    slow = Finding.objects.get(task=problem, kind="slow_step")
    assert slow.step_ids == ["p1-d"] and slow.wasted_ms == pytest.approx(2600, abs=60)
    gap = Finding.objects.get(task=problem, kind="serial_gap")
    assert gap.wasted_ms == pytest.approx(2010, abs=1)


def test_the_analysis_has_a_path_a_budget_summing_to_the_duration_and_what_if(problem):
    pipeline.run(problem.pk, force=True)
    analysis = TaskAnalysis.objects.get(task=problem)
    assert analysis.critical_path == ["p1-l1", "p1-a", "p1-b", "p1-c", "p1-l2", "p1-d"]
    assert sum(analysis.budget.values()) == pytest.approx(problem.duration_ms, abs=0.01)
    assert analysis.budget["tool"] == pytest.approx(4200, abs=1)
    # Total waste is the union: no millisecond counted twice.
    assert analysis.wasted_ms == pytest.approx(800 + 2010 + Finding.objects.get(task=problem, kind="slow_step").wasted_ms,
                                               abs=1)
    assert analysis.top_finding == "slow_step"
    assert analysis.finding_kinds == ["repeated_tool_call", "serial_gap", "slow_step"]
    whatif = analysis.whatif
    assert whatif["actual_ms"] == pytest.approx(8750, abs=1)
    assert whatif["cached_ms"] == pytest.approx(8750 - 800, abs=1)
    assert set(whatif["hardware"]) >= {"gpu", "dmatrix", "groq"}
    assert whatif["hardware"]["groq"]["ms"] < whatif["actual_ms"]


def test_reanalysis_replaces_findings_and_never_duplicates(problem):
    pipeline.run(problem.pk, force=True)
    first = sorted(Finding.objects.filter(task=problem).values_list("kind", "wasted_ms"))
    pipeline.run(problem.pk, force=True)
    pipeline.run(problem.pk, force=True)
    assert sorted(Finding.objects.filter(task=problem).values_list("kind", "wasted_ms")) == first
    assert TaskAnalysis.objects.filter(task=problem).count() == 1


def test_baselines_missing_at_analysis_time_are_computed_on_demand(problem):
    assert not Baseline.objects.exists()
    pipeline.run(problem.pk, force=True)
    tool = Baseline.objects.get(project=problem.project, kind="tool", key="search_order", device="")
    assert tool.count == 34 and tool.median_ms == pytest.approx(400, abs=30)
    llm = Baseline.objects.get(project=problem.project, kind="llm", key="llama-3-70b", device="gpu-1")
    assert llm.stats["tpot_median"] == pytest.approx(20, abs=2)
    device = Baseline.objects.get(project=problem.project, kind="device", key="gpu-1")
    assert device.stats["metrics"]["queue_depth"]["median"] == 2


def test_a_late_step_makes_the_task_due_again(problem, settings):
    settings.ANALYSIS_QUIET_SECONDS = 0
    assert pipeline.run(problem.pk) == "analysed"
    assert pipeline.run(problem.pk) == "not_due"
    task, steps = problem_task("p1", 0)
    store(problem.project, task, steps[:1])
    assert pipeline.run(problem.pk) == "analysed"


def test_findings_stay_in_their_project(problem, other_project):
    start = history(other_project)
    task, steps = problem_task("p1", start)
    store(other_project, task, steps)
    pipeline.run(problem.pk, force=True)
    assert not Finding.objects.filter(project=other_project).exists()
    assert set(Finding.objects.filter(task=problem).values_list("project_id", flat=True)) == {problem.project_id}
