"""What-if projections along the critical path, and their per-release aggregate."""

from __future__ import annotations

import pytest

from analysis.engine import pipeline
from analysis.engine.analyse import analyse
from analysis.engine.critical_path import critical_path
from analysis.engine.whatif import model_params_b, projections
from analysis.hardware import PROFILES
from analysis.models import TaskAnalysis
from ingest.models import Task

from .detectors.builders import T0, step, task
from .workload import history, problem_task, store


def run(ctx):
    result = analyse(ctx)
    return result["whatif"]


def test_caching_repeats_and_parallelising_calls_shorten_the_path_alone_and_together():
    ctx = task([
        step("l1", "llm", 0, 1, model="m", tool_call_ids=("ca", "cb", "cc")),  # one response asked for all
        # The answers recorded, as instrumentations record them: a repeat with none is only possible.
        step("a", "tool", 1, 2, tool_name="search", tool_args={"q": 1}, tool_call_id="ca", tool_result='{"hits": 3}'),
        step("b", "tool", 2, 3, tool_name="search", tool_args={"q": 1}, tool_call_id="cb",
             tool_result='{"hits": 3}'),  # repeat of a: 1 s
        step("c", "tool", 3, 3.5, tool_name="weather", tool_args={"city": "x"}, tool_call_id="cc",
             tool_result='{"sky": "clear"}'),  # serial with a
        step("l2", "llm", 3.5, 4, model="m"),
    ])
    w = run(ctx)
    assert w["actual_ms"] == 4000
    assert w["cached_ms"] == 3000
    assert w["parallel_ms"] == 3500   # a ∥ c saves 500 ms
    assert w["parallel_cached_ms"] == 2500


def test_a_possible_serialisation_promises_no_saving():
    # Nothing shows whether c needed a's output: the finding is only possible, and saves nothing.
    ctx = task([
        step("l1", "llm", 0, 1, model="m"),
        step("a", "tool", 1, 2, tool_name="search", tool_args={"q": 1}),
        step("c", "tool", 2, 2.5, tool_name="weather", tool_args={"city": "x"}),
        step("l2", "llm", 2.5, 3, model="m"),
    ])
    assert run(ctx)["parallel_ms"] == run(ctx)["actual_ms"] == 3000


def test_time_off_the_critical_path_saves_nothing():
    ctx = task([
        step("long", "tool", 0, 5, tool_name="report", parent_step_id="p1"),
        step("a", "tool", 0, 1, tool_name="search", tool_args={"q": 1}, parent_step_id="p2"),
        step("b", "tool", 1, 2, tool_name="search", tool_args={"q": 1}, parent_step_id="p2"),
    ])
    w = run(ctx)
    assert w["cached_ms"] == w["actual_ms"] == 5000


def test_hardware_profiles_replace_llm_time_on_the_path_by_their_model():
    llm = step("l", "llm", 0, 3, model="llama-3-70b", input_tokens=2000, output_tokens=200, ttft_ms=300)
    ctx = task([llm, step("t", "tool", 3, 4, tool_name="x")])
    segments = critical_path(ctx.steps, ctx.start_ms, ctx.end_ms)
    w = projections(ctx, segments, [])
    assert set(w["hardware"]) == set(PROFILES)
    for family, model in PROFILES.items():
        expected = 1000 + model.step_ms(2000, 200, model_params_b=70)
        assert w["hardware"][family]["ms"] == pytest.approx(expected, abs=0.1)
    assert T0  # times are absolute epoch ms; the projection only uses lengths


def test_calls_already_on_a_family_keep_their_time_there_and_unnamed_hardware_is_counted():
    # Two calls on a Groq LPU (by its reported vendor), one on a vLLM server whose host's GPUs say
    # nvidia, one to a hosted API (no device): "on groq" claims nothing for the first two.
    calls = [step("g1", "llm", 0, 1, model="llama-3-70b", device="lpu-1", input_tokens=2000, output_tokens=200),
             step("g2", "llm", 1, 2, model="llama-3-70b", device="lpu-1", input_tokens=2000, output_tokens=200),
             step("v", "llm", 2, 5, model="llama-3-70b", device="vllm-1:8000", input_tokens=2000, output_tokens=200),
             step("h", "llm", 5, 8, model="llama-3-70b", input_tokens=2000, output_tokens=200)]
    ctx = task(calls, families={"lpu-1": "groq", "GPU-0": "gpu"}, related={"vllm-1:8000": ("GPU-0",)})
    w = projections(ctx, critical_path(ctx.steps, ctx.start_ms, ctx.end_ms), [])
    lpu = PROFILES["groq"].step_ms(2000, 200, model_params_b=70)
    assert w["hardware"]["groq"]["already_ms"] == 2000
    assert w["hardware"]["groq"]["llm_ms"] == pytest.approx(2000 + 2 * lpu, abs=0.2)
    assert w["hardware"]["gpu"]["already_ms"] == 3000  # the server's GPUs name its family
    assert w["unknown_hardware_ms"] == 3000


def test_model_size_is_read_from_the_model_name():
    assert model_params_b("llama-3.1-70b-instruct") == 70
    assert model_params_b("qwen2.5-coder-32b") == 32
    assert model_params_b("gpt-4o") == 70


def test_every_analysed_task_has_its_whatif_projections(project):
    start = history(project, tasks=25)
    task_record, steps = problem_task("p1", start)
    store(project, task_record, steps)
    for t in Task.objects.filter(project=project):
        pipeline.run(t.pk, force=True)
    whatifs = {a.task.task_id: a.whatif for a in TaskAnalysis.objects.filter(project=project).select_related("task")}
    assert len(whatifs) == 26
    problem = whatifs.pop("p1")
    assert problem["cached_ms"] == pytest.approx(problem["actual_ms"] - 800, abs=1)
    for whatif in whatifs.values():  # nothing repeated: caching saves nothing
        assert whatif["cached_ms"] == whatif["actual_ms"]
        assert set(whatif["hardware"]) == set(PROFILES)
