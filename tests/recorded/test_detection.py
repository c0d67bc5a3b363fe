"""The findings on traces recorded from real frameworks match what really happened in them
(labels written by the recorders from what each run did): precision and recall of every
labelled kind at least 0.9, and no finding of a kind nothing injected. Only counted findings
are scored: a low-confidence ("possible") one is shown to users but claimed nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.management.commands.evaluate_detection import project_findings, replay_and_analyse
from analysis.simulator import recorded
from analysis.simulator.evaluation import evaluate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
FAMILIES = recorded.families(FIXTURES) if FIXTURES.is_dir() else []


@pytest.mark.django_db
@pytest.mark.parametrize("folder", FAMILIES, ids=[f.name for f in FAMILIES])
def test_findings_on_recorded_framework_traces_match_what_happened(folder):
    labels = recorded.labels(folder)
    assert labels, "a recorded family needs labels"
    project = replay_and_analyse(folder)
    findings, _ = project_findings(project, include_low=False)
    result = evaluate(labels, findings)
    for score in result.scores:
        if score.labels:
            assert score.recall >= 0.9, (score.kind, score)
        if score.findings:
            assert score.labels and score.precision >= 0.9, (score.kind, score)


@pytest.mark.django_db
@pytest.mark.parametrize("folder", FAMILIES, ids=[f.name for f in FAMILIES])
def test_wrapper_spans_leave_the_critical_path_and_budget_to_the_work(folder):
    """Graph nodes, chains, runner, agent and turn spans wrap the model and tool calls: the
    critical path still runs through every model call (these agents call the model one turn at
    a time), and the budget still adds up to the task, with the model's time as model time."""
    from analysis.models import TaskAnalysis
    from ingest.models import Step

    project = replay_and_analyse(folder)
    analyses = TaskAnalysis.objects.filter(project=project).select_related("task")
    assert analyses.count() >= 40
    for analysis in analyses:
        task = analysis.task
        steps = list(Step.objects.filter(task=task))
        llm = [s for s in steps if s.kind == "llm"]
        if not llm:
            continue  # OpenLLMetry's one-span create_agent trace
        assert {s.step_id for s in llm} <= set(analysis.critical_path), task.task_id
        budget = analysis.budget
        assert sum(v for v in budget.values() if isinstance(v, int | float)) == pytest.approx(task.duration_ms, abs=1.0)
        model_ms = sum(budget.get(k, 0) for k in ("prefill", "decode", "queue"))
        assert model_ms == pytest.approx(sum(s.duration_ms for s in llm), rel=0.02, abs=2.0), task.task_id
