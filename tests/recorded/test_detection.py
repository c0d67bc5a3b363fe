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
