"""evaluate_detection scores hand-made findings against hand-made labels, by the rules of
analysis/simulator/evaluation.py, and replays a project in time order."""

from __future__ import annotations

import json
import random
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from analysis.models import Finding
from ingest.models import Task
from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store


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
    """A table row as [labels, asserted, right, precision, surfaced, right, precision, recall
    (asserted), recall (surfaced), wasted ±30 %, of], intervals dropped."""
    cells = next(line.split() for line in lines if line.split() and line.split()[0] == kind)
    return [c for c in cells[1:] if not c.startswith("[")]


def view(task_id, kind, steps, *, confidence="high", wasted_ms=100.0, **evidence):
    from analysis.simulator.evaluation import FindingView

    return FindingView(task_id, kind, tuple(steps), evidence, confidence, wasted_ms)


def score(labels, findings, kind):
    from analysis.simulator.evaluation import evaluate

    return evaluate(labels, findings).score(kind)


def test_a_finding_matches_a_label_when_each_names_at_least_half_of_the_other():
    from analysis.simulator.evaluation import overlaps

    assert overlaps({"a", "b"}, {"a", "b", "c"})          # 2 of 3, 2 of 2
    assert overlaps({"a"}, {"a", "b"})                    # 1 of 2: half
    assert not overlaps({"a"}, {"a", "b", "c"})           # names one step of a three-call group
    assert not overlaps({"a", "x", "y", "z"}, {"a", "b"})  # sprawls over the turn, touches one
    assert not overlaps(set(), {"a"}) and overlaps(set(), set())


def test_asserted_and_surfaced_findings_are_scored_apart():
    labels = [{"task_id": "t1", "kind": "parallelizable_calls", "step_ids": ["a", "b", "c"]},
              {"task_id": "t2", "kind": "parallelizable_calls", "step_ids": ["d", "e"]},
              {"task_id": "t3", "kind": "parallelizable_calls", "step_ids": ["f", "g"]}]
    findings = [view("t1", "parallelizable_calls", ["a", "b", "c"]),                 # asserted, right
                view("t2", "parallelizable_calls", ["d", "e"], confidence="low"),    # surfaced, right
                view("t3", "parallelizable_calls", ["f", "x", "y"]),                 # asserted, wrong
                view("t4", "parallelizable_calls", ["p", "q"], confidence="low")]    # surfaced, wrong
    s = score(labels, findings, "parallelizable_calls")
    assert (s.precision_asserted.k, s.precision_asserted.n) == (1, 2)
    assert (s.precision_surfaced.k, s.precision_surfaced.n) == (2, 4)
    assert (s.recall_asserted.k, s.recall_surfaced.k, s.labels) == (1, 2, 3)


def test_per_step_kinds_are_scored_per_step_with_each_steps_magnitude():
    labels = [{"task_id": "t1", "kind": "hardware_queueing", "step_ids": ["l1", "l2", "l3"], "magnitude_ms": 3000,
               "step_magnitude_ms": {"l1": 1000, "l2": 1000, "l3": 1000}}]
    findings = [view("t1", "hardware_queueing", ["l1"], wasted_ms=1100),   # within 30 %
                view("t1", "hardware_queueing", ["l2"], wasted_ms=400)]    # found, wasted far off
    s = score(labels, findings, "hardware_queueing")
    assert s.labels == 3 and (s.recall_asserted.k, s.precision_asserted.k, s.precision_asserted.n) == (2, 2, 2)
    assert (s.magnitude.k, s.magnitude.n) == (1, 2)


def test_wasted_time_is_the_sum_of_the_findings_that_found_the_label():
    labels = [{"task_id": "t1", "kind": "serial_gap", "step_ids": ["a", "b"], "magnitude_ms": 2000},
              {"task_id": "t2", "kind": "serial_gap", "step_ids": ["c", "d"]}]  # no truth: not scored
    s = score(labels, [view("t1", "serial_gap", ["a", "b"], wasted_ms=1500),
                       view("t2", "serial_gap", ["c", "d"], wasted_ms=1)], "serial_gap")
    assert (s.magnitude.k, s.magnitude.n) == (1, 1)  # 1500 is within 30 % of 2000 (600)
    s = score(labels, [view("t1", "serial_gap", ["a", "b"], wasted_ms=1300)], "serial_gap")
    assert (s.magnitude.k, s.magnitude.n) == (0, 1)


def test_a_slow_step_on_a_task_a_device_incident_or_growing_context_slowed_is_right():
    labels = [{"task_id": "t1", "kind": "context_growth", "step_ids": ["l1", "l2", "l3", "l4"]}]
    s = score(labels, [view("t1", "slow_step", ["l5"]), view("t2", "slow_step", ["x"])], "slow_step")
    assert (s.precision_asserted.k, s.precision_asserted.n, s.labels) == (1, 2, 0)


def test_precision_recall_and_hardware_verdict_accuracy_in_the_table(project, other_project, tmp_path):
    t1, t2, t3 = task(project, "t1"), task(project, "t2"), task(project, "t3")
    finding(project, t1, "slow_step", ["s1"])                                # right
    finding(project, t2, "slow_step", ["s9"])                                # on a queueing task: right too
    finding(project, t1, "repeated_tool_call", ["s3"])                       # names half the label's steps
    finding(project, t1, "repeated_tool_call", ["s7"])                       # same task, other steps
    finding(project, t2, "hardware_queueing", ["s5"], verdict="queueing")    # right, right verdict
    finding(project, t3, "context_growth", ["c1", "c2", "c3"])              # right
    finding(project, t3, "parallelizable_calls", ["c1", "c2"])               # not injected there
    other = task(other_project, "t3")
    finding(other_project, other, "serial_gap", ["c1", "c2"])                # another project's: ignored

    lines = run(labels=write_labels(tmp_path / "l.jsonl", LABELS), project="acme")
    assert "7 findings (0 low-confidence), 5 labels (6 scored units)" in lines[0]
    # labels, asserted, right, precision, surfaced, right, precision, recall ×2, wasted share, of
    assert row(lines, "slow_step") == ["1", "2", "2", "1.000", "2", "2", "1.000", "1.000", "1.000", "0.000", "1"]
    assert row(lines, "repeated_tool_call")[:4] == ["1", "2", "1", "0.500"]
    assert row(lines, "hardware_queueing")[:4] + row(lines, "hardware_queueing")[7:9] == [
        "2", "1", "1", "1.000", "0.500", "0.500"]  # two labelled steps, one found
    assert row(lines, "serial_gap")[:4] + row(lines, "serial_gap")[7:] == ["1", "0", "0", "0.000", "0.000", "0.000",
                                                                           "n/a", "0"]
    assert row(lines, "parallelizable_calls")[:4] == ["0", "1", "0", "0.000"]
    verdict = next(line for line in lines if line.startswith("hardware verdict accuracy"))
    assert verdict.endswith("(1 of 2 labelled LLM steps right; 1 had a verdict)")


def test_no_findings_reports_zeros_honestly(project, tmp_path):
    lines = run(labels=write_labels(tmp_path / "l.jsonl", LABELS), project="acme")
    assert row(lines, "overall")[:4] == ["6", "0", "0", "0.000"]
    assert any(line.startswith("hardware verdict accuracy: 0.000") and "(0 of 2" in line for line in lines)


def test_per_step_verdicts_in_evidence_count(project, tmp_path):
    t2 = task(project, "t2")
    finding(project, t2, "hardware_queueing", ["s5", "s6"], verdicts={"s5": "queueing", "s6": "throttling"})
    lines = run(labels=write_labels(tmp_path / "l.jsonl", LABELS[2:3]), project="acme")
    assert any(line.startswith("hardware verdict accuracy: 0.500") and "(1 of 2" in line for line in lines)


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
    labels = [{"task_id": "t1", "kind": "slow_step", "step_ids": ["s1"]},
              {"task_id": "t1", "kind": "slow_step", "step_ids": ["s2"], "ambiguous": True},
              {"task_id": "t2", "kind": "slow_step", "step_ids": ["s9"], "ambiguous": True}]
    findings = [view("t1", "slow_step", ["s1"]), view("t1", "slow_step", ["s2"]), view("t1", "slow_step", ["s3"])]
    s = score(labels, findings, "slow_step")
    # s2 is neither right nor wrong, t2's stall is no miss; s3 is a false alarm.
    assert (s.labels, s.recall_asserted.k, s.precision_asserted.n, s.precision_asserted.k) == (1, 1, 2, 1)


def test_time_order_analyses_each_task_with_the_baselines_of_its_past(project):
    """A tool call 10× its usual time, before a release made every call of that tool as slow: the
    baselines of the whole history say it was normal; those it had when it ended say slow."""
    from analysis.management.commands.evaluate_detection import (
        project_findings,
        replay_in_time_order,
    )

    from .workload import at

    def one(task_id, start, ms):
        step = StepRecord(f"{task_id}-s", task_id, at(start), at(start + ms / 1000), kind="tool", name="lookup",
                          tool_name="lookup", tool_args={"q": task_id})
        batch_store(project=project, batch=Batch(tasks=[TaskRecord(task_id, name="t", started_at=at(start),
                                                                   ended_at=at(start + 2), status="ok")],
                                                 steps=[step]))

    rng = random.Random(5)
    for i in range(40):
        one(f"before{i}", 60 * i, rng.gauss(100, 8))
    one("slow", 60 * 41, 1000)
    for i in range(200):
        one(f"after{i}", 60 * (42 + i), rng.gauss(1000, 60))
    replay_in_time_order(project, refresh_minutes=5)
    assert "slow" in {f.task_id for f in project_findings(project) if f.kind == "slow_step"}
    # Analysed with the whole history's baselines, as `analyze --all` does, it was normal.
    from analysis.engine import baselines, pipeline

    baselines.baselines_refresh(project=project, full=True)
    pipeline.run(Task.objects.get(project=project, task_id="slow").pk, force=True)
    assert "slow" not in {f.task_id for f in project_findings(project) if f.kind == "slow_step"}


# --- a corpus in ../shared/eval/ format ---------------------------------------------------------

def test_wilson_interval_matches_the_textbook_values():
    from analysis.simulator.evaluation import wilson

    low, high = wilson(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.49, 0.943)
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(50, 50)[1] == 1.0 and round(wilson(50, 50)[0], 3) == 0.929


def _repeat_corpus(tmp_path, labelled_steps):
    """Three tasks that call `lookup` with the same arguments three times; tasks 1 and 2 labelled
    `repeated_tool_call` on `labelled_steps` (offsets of the task's calls, 1-3)."""
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
                                          "gen_ai.tool.call.arguments": '{"order": 42}',
                                          # the same answer each time: a repeat asserted (no answer
                                          # recorded would make it only possible)
                                          "gen_ai.tool.call.result": '{"order": 42, "status": "shipped"}'}))
    (corpus / "traces-000.pb").write_bytes(trace_request(spans, resource={"service.name": "x"}).SerializeToString())
    (corpus / "labels.jsonl").write_text("".join(
        json.dumps({"task_id": f"{t:032x}", "kind": "repeated_tool_call",
                    "step_ids": [f"{100 * t + i:016x}" for i in labelled_steps]}) + "\n"
        for t in (1, 2)))
    return corpus


def _tables(text):
    """The per-task table and the by-steps one, as lines."""
    per_task, by_steps = text.split("Matched by steps")
    return per_task.splitlines(), by_steps.splitlines()


def test_corpus_is_posted_through_the_ingest_views_analysed_and_scored(db, tmp_path):
    out = StringIO()
    call_command("evaluate_detection", "--corpus", str(_repeat_corpus(tmp_path, (2, 3))), stdout=out)
    text = out.getvalue()
    assert "3 tasks stored and analysed" in text
    # Labelled 2 of the 3 tasks (the two repeats; the finding names the first call too): the third
    # task's repeats are asserted but unlabelled, so wrong; both ways of matching agree.
    per_task, by_steps = _tables(text)
    assert row(per_task, "repeated_tool_call")[:3] == ["2", "3", "2"], text
    assert row(by_steps, "repeated_tool_call")[:3] == ["2", "3", "2"], text
    assert Task.objects.filter(project__name="corpus-corpus-x").count() == 3


def test_a_corpus_is_held_to_its_own_per_task_rule_and_shown_by_steps_too(db, tmp_path):
    # The labels name only the first call of each task's three: the finding (all three calls)
    # is on the labelled task, which is the corpus's rule, but names mostly other steps.
    out = StringIO()
    call_command("evaluate_detection", "--corpus", str(_repeat_corpus(tmp_path, (1,))), stdout=out)
    per_task, by_steps = _tables(out.getvalue())
    assert row(per_task, "repeated_tool_call")[:3] == ["2", "3", "2"], out.getvalue()
    assert row(by_steps, "repeated_tool_call")[:3] == ["2", "3", "0"], out.getvalue()


def test_a_folder_that_is_no_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="labels.jsonl and traces"):
        call_command("evaluate_detection", "--corpus", str(tmp_path))


def test_a_detector_that_raises_is_reported_not_scored_as_silence(db, tmp_path, monkeypatch):
    """The worker logs a failing detector and goes on without its findings: the evaluation says
    so, or its table scores a crash as the rules' misses (the stagger crash hid that way)."""
    from analysis.engine.detectors import base

    base.all_detectors()

    def broken(ctx):
        raise KeyError("no reason for this basis")

    monkeypatch.setitem(base.REGISTRY, "repeated_tool_call", broken)
    out, err = StringIO(), StringIO()
    call_command("evaluate_detection", "--corpus", str(_repeat_corpus(tmp_path, (2, 3))), stdout=out, stderr=err)
    assert "3 detector failures (analysis.detector_failed) on 3 tasks" in err.getvalue(), err.getvalue()
    assert "kind=repeated_tool_call" in err.getvalue()


def test_the_workers_routine_lines_do_not_bury_the_tables(db, tmp_path, caplog):
    """Each analysed batch and baseline refresh logs a line at INFO: hundreds between the tables of
    a run. The command keeps them out unless asked (-v 2), and leaves the level as it found it."""
    import logging

    corpus = str(_repeat_corpus(tmp_path, (2, 3)))
    caplog.set_level(logging.INFO, logger="agentops.analysis")
    call_command("evaluate_detection", "--corpus", corpus, stdout=StringIO())
    assert not [r for r in caplog.records if r.name == "agentops.analysis" and r.levelno < logging.WARNING]
    assert logging.getLogger("agentops.analysis").level == logging.INFO
    call_command("evaluate_detection", "--corpus", corpus, stdout=StringIO(), verbosity=2)
    assert any(r.getMessage().startswith("analysis.batch_done") for r in caplog.records)


def test_a_corpus_with_metrics_payloads_gets_its_device_samples(db, tmp_path):
    """Device telemetry may come as the OTLP metrics payloads exporters send (metrics-*.pb, here a
    dcgm-exporter GPU and a vLLM server through a Prometheus receiver): posted to /v1/metrics, they
    become the corpus project's resource samples before its tasks are analysed."""
    from ingest.models import ResourceSample
    from tests.ingest.fixtures.otlp import gauge_request

    corpus = _repeat_corpus(tmp_path, (2, 3))
    gpu = {"gpu": "0", "UUID": "GPU-5d1e", "Hostname": "vllm-a", "modelName": "NVIDIA H100 80GB HBM3"}
    dcgm = gauge_request([("DCGM_FI_DEV_SM_CLOCK", gpu, 1110.0), ("DCGM_FI_DEV_MAX_SM_CLOCK", gpu, 1980.0),
                          ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu, 96.0)],
                         resource={"service.name": "dcgm-exporter", "service.instance.id": "vllm-a:9400"})
    vllm = gauge_request([("vllm:num_requests_waiting", {"model_name": "llama"}, 37.0)],
                         resource={"service.name": "vllm", "service.instance.id": "vllm-a:8000"}, ts_ms=500)
    (corpus / "metrics-000.pb").write_bytes(dcgm.SerializeToString())
    (corpus / "metrics-001.pb").write_bytes(vllm.SerializeToString())
    call_command("evaluate_detection", "--corpus", str(corpus), stdout=StringIO())
    samples = {s.device: s for s in ResourceSample.objects.filter(project__name="corpus-corpus-x")}
    assert set(samples) == {"GPU-5d1e", "vllm-a:8000"}
    assert (samples["GPU-5d1e"].sm_clock_mhz, samples["GPU-5d1e"].clock_reasons) == (1110.0, 96.0)
    assert samples["vllm-a:8000"].queue_depth == 37.0
