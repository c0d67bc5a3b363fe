"""evaluate_detection scores hand-made findings against hand-made labels."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from analysis.models import Finding
from ingest.models import Task


def write_labels(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


LABELS = [
    {"task_id": "t1", "kind": "slow_step", "step_ids": ["s1"], "magnitude_ms": 900},
    {"task_id": "t1", "kind": "repeated_tool_call", "step_ids": ["s2", "s3"], "magnitude_ms": 200},
    {"task_id": "t2", "kind": "hardware_queueing", "step_ids": ["s5", "s6"], "magnitude_ms": 2500,
     "verdicts": {"s5": "queueing", "s6": "queueing"}},
    {"task_id": "t3", "kind": "context_growth", "step_ids": ["c1", "c2", "c3"], "magnitude_ms": 800},
    {"task_id": "t3", "kind": "serial_gap", "step_ids": ["c1", "c2"], "magnitude_ms": 3000},
]


def task(project, task_id):
    now = timezone.now()
    return Task.objects.create(project=project, task_id=task_id, started_at=now, last_event_at=now)


def finding(project, t, kind, step_ids, **evidence):
    return Finding.objects.create(project=project, task=t, kind=kind, step_ids=step_ids, wasted_ms=100,
                                  summary="x", evidence=evidence, task_started_at=t.started_at)


def run(**options) -> list[str]:
    out = StringIO()
    call_command("evaluate_detection", stdout=out, **options)
    return out.getvalue().splitlines()


def row(lines, kind) -> list[str]:
    return next(line.split() for line in lines if line.split() and line.split()[0] == kind)


def test_precision_recall_f1_per_kind_and_hardware_verdict_accuracy(project, other_project, tmp_path):
    t1, t2, t3 = task(project, "t1"), task(project, "t2"), task(project, "t3")
    finding(project, t1, "slow_step", ["s1"])                                # right
    finding(project, t2, "slow_step", ["s9"])                                # no such label
    finding(project, t1, "repeated_tool_call", ["s3"])                       # overlaps the label's steps
    finding(project, t1, "repeated_tool_call", ["s7"])                       # same task, other steps
    finding(project, t2, "hardware_queueing", ["s5"], verdict="queueing")    # right, right verdict
    finding(project, t2, "slow_step", ["s6"], verdict="nominal")             # wrong kind and verdict
    finding(project, t3, "context_growth", [])                              # task-level kind
    finding(project, t3, "parallelizable_calls", ["c1", "c2"])               # not injected there
    other = task(other_project, "t3")
    finding(other_project, other, "serial_gap", ["c1"])                      # another project's: ignored

    lines = run(labels=write_labels(tmp_path / "l.jsonl", LABELS), project="acme")
    # kind, labels, findings, found, correct, precision, recall, F1
    assert row(lines, "slow_step")[1:] == ["1", "3", "1", "1", "0.333", "1.000", "0.500"]
    assert row(lines, "repeated_tool_call")[1:] == ["1", "2", "1", "1", "0.500", "1.000", "0.667"]
    assert row(lines, "hardware_queueing")[1:] == ["1", "1", "1", "1", "1.000", "1.000", "1.000"]
    assert row(lines, "context_growth")[1:] == ["1", "1", "1", "1", "1.000", "1.000", "1.000"]
    assert row(lines, "serial_gap")[1:] == ["1", "0", "0", "0", "0.000", "0.000", "0.000"]
    assert row(lines, "parallelizable_calls")[1:] == ["0", "1", "0", "0", "0.000", "0.000", "0.000"]
    assert row(lines, "overall")[1:] == ["5", "8", "4", "4", "0.500", "0.800", "0.615"]
    verdict = next(line for line in lines if line.startswith("hardware verdict accuracy"))
    assert verdict.startswith("hardware verdict accuracy: 0.500 (1 of 2 labelled LLM steps right; 2 had a verdict)")


def test_no_findings_reports_zeros_honestly(project, tmp_path):
    lines = run(labels=write_labels(tmp_path / "l.jsonl", LABELS), project="acme")
    assert row(lines, "overall")[1:] == ["5", "0", "0", "0", "0.000", "0.000", "0.000"]
    assert any(line.startswith("hardware verdict accuracy: 0.000 (0 of 2") for line in lines)


def test_per_step_verdicts_in_evidence_count(project, tmp_path):
    t2 = task(project, "t2")
    finding(project, t2, "hardware_queueing", ["s5", "s6"], verdicts={"s5": "queueing", "s6": "throttling"})
    lines = run(labels=write_labels(tmp_path / "l.jsonl", LABELS[2:3]), project="acme")
    assert any(line.startswith("hardware verdict accuracy: 0.500 (1 of 2") for line in lines)


@pytest.mark.parametrize("content,message", [
    ('{"task_id": "t1", "kind": "slow_step", "step_ids": []}\nnot json\n', "line 2: not JSON"),
    ('{"task_id": "t1", "kind": "sluggish", "step_ids": []}\n', "line 1: kind 'sluggish' is not one of"),
    ('{"kind": "slow_step", "step_ids": []}\n', "line 1: task_id is missing"),
    ('{"task_id": "t1", "kind": "slow_step", "step_ids": "s1"}\n', "line 1: step_ids must be a list"),
])
def test_bad_label_files_are_refused_naming_the_line(project, tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(CommandError, match=message):
        run(labels=str(path), project="acme")


def test_missing_file_and_unknown_project_are_clear_errors(project, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run(labels=str(tmp_path / "nope.jsonl"), project="acme")
    with pytest.raises(CommandError, match="no project named 'nope'"):
        run(labels=write_labels(tmp_path / "l.jsonl", LABELS), project="nope")


def test_an_ambiguous_label_counts_neither_way():
    from analysis.simulator.evaluation import FindingView, evaluate

    labels = [{"task_id": "t1", "kind": "slow_step", "step_ids": ["s1"]},
              {"task_id": "t1", "kind": "slow_step", "step_ids": ["s2"], "ambiguous": True},
              {"task_id": "t2", "kind": "slow_step", "step_ids": ["s9"], "ambiguous": True}]
    findings = [FindingView("t1", "slow_step", ("s1",)), FindingView("t1", "slow_step", ("s2",)),
                FindingView("t1", "slow_step", ("s3",))]
    [score] = [s for s in evaluate(labels, findings).scores if s.kind == "slow_step"]
    # s2 is neither right nor wrong, t2's stall is no miss; s3 is a false alarm.
    assert (score.labels, score.labels_found, score.findings, score.findings_matched) == (1, 1, 2, 1)


def test_low_confidence_findings_are_not_scored_unless_asked(project, tmp_path):
    t = task(project, "t1")
    finding(project, t, "slow_step", ["s1"])
    Finding.objects.create(project=project, task=t, kind="parallelizable_calls", step_ids=["a", "b"], wasted_ms=50,
                           summary="x", confidence="low", task_started_at=t.started_at)
    labels = write_labels(tmp_path / "l.jsonl", [{"task_id": "t1", "kind": "slow_step", "step_ids": ["s1"]}])
    lines = run(labels=labels, project=project.name)
    assert "1 findings scored (1 low-confidence not scored)" in lines[0]
    assert row(lines, "parallelizable_calls")[2] == "0"
    assert row(run(labels=labels, project=project.name, include_low=True), "parallelizable_calls")[2] == "1"


# --- a corpus in ../shared/eval/ format ---------------------------------------------------------

def test_corpus_scoring_is_per_task_asserted_for_precision_surfaced_for_recall():
    from analysis.simulator.evaluation import corpus_score

    labels = [{"task_id": "a", "kind": "parallelizable_calls"}, {"task_id": "b", "kind": "parallelizable_calls"},
              {"task_id": "c", "kind": "hardware_queueing"}]
    findings = [("a", "parallelizable_calls", "high"), ("a", "parallelizable_calls", "medium"),  # one task
                ("b", "parallelizable_calls", "low"),       # surfaced: recall, not precision
                ("d", "parallelizable_calls", "medium"),    # asserted, wrong
                ("c", "slow_step", "high"),                 # slowed by queueing: right
                ("e", "slow_step", "high")]                 # wrong
    scores = {s.kind: s for s in corpus_score(labels, findings)}
    par = scores["parallelizable_calls"]
    assert (par.asserted, par.asserted_right, par.precision) == (2, 1, 0.5)
    assert (par.labels, par.surfaced_found, par.recall, par.low) == (2, 2, 1.0, 1)
    assert (scores["slow_step"].asserted_right, scores["slow_step"].asserted) == (1, 2)
    assert scores["hardware_queueing"].recall == 0.0


def test_wilson_interval_matches_the_textbook_values():
    from analysis.simulator.evaluation import wilson

    low, high = wilson(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.49, 0.943)
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(50, 50)[1] == 1.0 and round(wilson(50, 50)[0], 3) == 0.929


def test_corpus_is_posted_through_the_ingest_views_analysed_and_scored(db, tmp_path):
    from tests.ingest.fixtures.otlp import span, trace_request

    corpus = tmp_path / "corpus-x"
    corpus.mkdir()
    spans = []
    for trace in range(1, 4):
        spans.append(span(trace, 100 * trace, name="invoke_agent", end_ms=3000,
                          attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "x"}))
        for i in range(3):  # the same call three times: a repeat in every task
            spans.append(span(trace, 100 * trace + 1 + i, parent=100 * trace, name="execute_tool",
                              start_ms=100 + 900 * i, end_ms=900 + 900 * i,
                              attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                                          "gen_ai.tool.call.arguments": '{"order": 42}'}))
    (corpus / "traces-000.pb").write_bytes(trace_request(spans, resource={"service.name": "x"}).SerializeToString())
    (corpus / "labels.jsonl").write_text("".join(
        json.dumps({"task_id": f"{t:032x}", "kind": "repeated_tool_call", "step_ids": [f"{100 * t + 2:016x}"]}) + "\n"
        for t in (1, 2)))
    out = StringIO()
    call_command("evaluate_detection", "--corpus", str(corpus), stdout=out)
    text = out.getvalue()
    assert "3 tasks stored and analysed" in text
    row = next(line for line in text.splitlines() if line.startswith("repeated_tool_call"))
    # Labelled 2 of the 3 tasks: the third task's repeat is asserted but unlabelled, so wrong.
    assert row.split()[1:4] == ["2", "3", "2"], text
    assert Task.objects.filter(project__name="corpus-corpus-x").count() == 3


def test_a_folder_that_is_no_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="labels.jsonl and traces"):
        call_command("evaluate_detection", "--corpus", str(tmp_path))
