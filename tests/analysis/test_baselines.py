"""Baselines: robust statistics in SQL, refreshed incrementally, windowed by the data's time."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from analysis.engine.baselines import baselines_refresh
from analysis.models import Baseline
from ingest.models import Task
from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store

from .workload import at, history


def tool_task(task_id: str, start: float, tool: str, ms: float) -> Batch:
    step = StepRecord(f"{task_id}-s", task_id, at(start), at(start + ms / 1000), kind="tool", name=tool,
                      tool_name=tool, tool_args={"q": task_id})
    return Batch(tasks=[TaskRecord(task_id, name="t", started_at=at(start), ended_at=at(start + 1), status="ok")],
                 steps=[step])


def test_median_and_mad_resist_a_few_extreme_outliers(project):
    rng = random.Random(3)
    for i in range(60):
        batch_store(project=project, batch=tool_task(f"t{i}", i, "lookup", rng.gauss(200, 20)))
    for i in range(5):  # incidents: 50× slower
        batch_store(project=project, batch=tool_task(f"x{i}", 100 + i, "lookup", 10_000))
    baselines_refresh(project=project, full=True)
    b = Baseline.objects.get(project=project, kind="tool", key="lookup")
    assert b.count == 65
    assert b.median_ms == pytest.approx(200, abs=15)
    assert b.mad_ms == pytest.approx(13.5, abs=8)  # MAD of N(200, 20) ≈ 0.6745 × 20
    assert b.p99_ms > 5000  # the tail is visible in the percentiles, not in the median


def test_refresh_recomputes_only_keys_with_new_data(project):
    history(project, tasks=25)
    baselines_refresh(project=project, full=True)
    before = {(b.kind, b.key, b.device): b.updated_at for b in Baseline.objects.filter(project=project)}
    Task.objects.filter(project=project).update(last_event_at=timezone.now() - timedelta(hours=1))
    batch_store(project=project, batch=tool_task("new", 900, "search_order", 450))
    baselines_refresh(project=project)
    after = {(b.kind, b.key, b.device): b.updated_at for b in Baseline.objects.filter(project=project)}
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {("tool", "search_order", "")}
    assert Baseline.objects.get(project=project, kind="tool", key="search_order").count == 26


def test_the_window_follows_the_data_not_the_wall_clock(project):
    # All of this happened long ago (2026-11-01) and weeks apart: only the last week counts.
    for i in range(30):
        batch_store(project=project, batch=tool_task(f"old{i}", i, "report", 5000))
    for i in range(30):
        batch_store(project=project, batch=tool_task(f"new{i}", 30 * 86400 + i, "report", 800))
    baselines_refresh(project=project, full=True)
    b = Baseline.objects.get(project=project, kind="tool", key="report")
    assert b.count == 30 and b.median_ms == pytest.approx(800)


def test_baselines_of_one_project_ignore_another(project, other_project):
    for i in range(30):
        batch_store(project=project, batch=tool_task(f"a{i}", i, "lookup", 100))
        batch_store(project=other_project, batch=tool_task(f"a{i}", i, "lookup", 900))
    baselines_refresh(project=project, full=True)
    baselines_refresh(project=other_project, full=True)
    assert Baseline.objects.get(project=project, key="lookup").median_ms == pytest.approx(100)
    assert Baseline.objects.get(project=other_project, key="lookup").median_ms == pytest.approx(900)


def test_a_key_without_usable_history_is_not_recomputed_for_every_task(project, django_assert_max_num_queries):
    from analysis.engine.baselines import baselines_ensure

    batch_store(project=project, batch=Batch(steps=[StepRecord("s", "t", at(0), at(1), kind="tool", name="flaky",
                                                               tool_name="flaky", status="error")]))
    baselines_ensure(project=project, keys={("tool", "flaky")}, devices={"gpu-silent"})
    assert Baseline.objects.get(project=project, kind="tool", key="flaky").count == 0
    with django_assert_max_num_queries(1):
        baselines_ensure(project=project, keys={("tool", "flaky")}, devices={"gpu-silent"})


def test_llm_steps_without_ttft_get_a_line_over_output_tokens(project):
    rng = random.Random(5)
    steps = []
    for i in range(80):
        out = rng.randint(20, 400)
        ms = (150 + 20 * out) * rng.uniform(0.95, 1.05)
        steps.append(StepRecord(f"s{i}", f"t{i}", at(i * 60), at(i * 60 + ms / 1000), kind="llm", name="chat",
                                model="m", output_tokens=out))
    batch_store(project=project, batch=Batch(steps=steps))
    baselines_refresh(project=project, full=True)
    stats = Baseline.objects.get(project=project, kind="llm", key="m", device="").stats
    assert stats["line_b"] == pytest.approx(20, rel=0.1)
    assert stats["line_a"] == pytest.approx(150, abs=150)
    assert stats["line_log_mad"] < 0.06


@pytest.mark.parametrize("short_share", [0.6, 0.8])
def test_the_line_holds_for_one_models_short_tool_turns_and_long_answers(project, short_share):
    """The usual mix of one model's calls: many short tool-calling turns (~12 tokens, ~90 ms) and
    fewer long answers (60-110 tokens), with one call in seven slowed 2-3x by incidents. The line
    must pass through both clusters, so a short turn that took twice its usual is an outlier (a
    line through the overall medians, which then fall between the clusters, read every short turn
    as ~2x its usual, with a log spread of 0.6; thirds by count both fall in the short turns)."""
    rng = random.Random(11)
    steps = []
    for i in range(280):
        out = rng.randint(11, 14) if rng.random() < short_share else rng.randint(60, 110)
        ms = (5 + 3.5 + 7 * out) * rng.uniform(0.9, 1.1) * (rng.uniform(2, 3) if i % 7 == 3 else 1)
        steps.append(StepRecord(f"s{i}", f"t{i}", at(i * 60), at(i * 60 + ms / 1000), kind="llm", name="chat",
                                model="m", output_tokens=out))
    batch_store(project=project, batch=Batch(steps=steps))
    baselines_refresh(project=project, full=True)
    stats = Baseline.objects.get(project=project, kind="llm", key="m", device="").stats
    assert stats["line_b"] == pytest.approx(7, rel=0.15)
    assert 12 * stats["line_b"] + stats["line_a"] == pytest.approx(92.5, rel=0.15)
    assert stats["line_log_mad"] < 0.08


def test_steps_without_ttft_leave_the_ttft_and_tpot_spread_of_a_model_alone(project):
    """One model, called streamed (with TTFT) by one agent and non-streamed by another: missing
    values are missing, not 1 ms (the log-MADs were 13.8 and 10.1, so no call could be slow)."""
    rng = random.Random(7)
    steps = []
    for i in range(120):
        out = rng.randint(80, 120)
        ms = 300 + 20 * out * rng.uniform(0.95, 1.05)
        streamed = i % 2 == 0
        steps.append(StepRecord(f"s{i}", f"t{i}", at(i * 60), at(i * 60 + ms / 1000), kind="llm", name="chat",
                                model="m", output_tokens=out, input_tokens=500,
                                ttft_ms=300 * rng.uniform(0.95, 1.05) if streamed else None,
                                streamed=streamed))
    batch_store(project=project, batch=Batch(steps=steps))
    baselines_refresh(project=project, full=True)
    stats = Baseline.objects.get(project=project, kind="llm", key="m", device="").stats
    assert stats["ttft_log_mad"] < 0.05
    assert stats["tpot_log_mad"] < 0.05


def test_arguments_that_recur_and_take_longer_are_kept_with_the_tools_baseline(project):
    # run_tests: ~4 s against one file, ~25 s against the whole suite (one run in five).
    from analysis.engine import batch
    from analysis.models import Finding

    rng = random.Random(5)

    def run_tests(task_id, start, target, ms):
        step = StepRecord(f"{task_id}-s", task_id, at(start), at(start + ms / 1000), kind="tool", name="run_tests",
                          tool_name="run_tests", tool_args={"target": target})
        task = TaskRecord(task_id, name="fix", started_at=at(start), ended_at=at(start + ms / 1000), status="ok")
        batch_store(project=project, batch=Batch(tasks=[task], steps=[step]))

    for i in range(60):
        suite = i % 5 == 0
        run_tests(f"t{i}", i * 100, "tests/" if suite else f"tests/test_{i % 7}.py",
                  rng.gauss(25_000, 2000) if suite else rng.gauss(4000, 300))
    baselines_refresh(project=project, full=True)
    b = Baseline.objects.get(project=project, kind="tool", key="run_tests")
    [suite] = b.stats["args"]  # the one-file targets take the tool's usual time: not kept
    assert suite["value"] == {"target": "tests/"} and suite["runs"] == 12
    assert suite["median"] == pytest.approx(25_000, rel=0.1)

    run_tests("whole", 7000, "tests/", 27_000)  # a bigger job
    run_tests("one-file", 7100, "tests/test_1.py", 27_000)  # a slow call
    pks = list(Task.objects.filter(project=project, task_id__in=["whole", "one-file"]).values_list("pk", flat=True))
    batch.run_ids(pks, force=True, top_up=False)
    slow = {f.task.task_id: f for f in Finding.objects.filter(project=project, kind="slow_step")}
    assert slow["one-file"].confidence == "high" and round(slow["one-file"].wasted_ms) == pytest.approx(23_000, rel=0.05)
    # 12 earlier runs of the whole suite: enough to doubt, not to be sure (fewer than 20).
    assert slow["whole"].confidence == "low" and "bigger job" in slow["whole"].confidence_reason


def test_a_release_that_made_a_tool_slower_is_kept_with_the_tools_baseline(project):
    # search: ~200 ms in v1, twice that in v2 (a regression, every call); its v2 calls' tail is no
    # slow step, a call slow even for v2 is.
    from analysis.engine import batch
    from analysis.models import Finding

    rng = random.Random(8)

    def search(task_id, start, release, ms):
        step = StepRecord(f"{task_id}-s", task_id, at(start), at(start + ms / 1000), kind="tool", name="search",
                          tool_name="search", tool_args={"q": task_id})
        task = TaskRecord(task_id, name="find", started_at=at(start), ended_at=at(start + ms / 1000), status="ok",
                          release=release)
        batch_store(project=project, batch=Batch(tasks=[task], steps=[step]))

    for i in range(80):
        v2 = i >= 40
        search(f"t{i}", i * 10, "v2" if v2 else "v1", (400 if v2 else 200) * rng.lognormvariate(0, 0.1))
    baselines_refresh(project=project, full=True)
    b = Baseline.objects.get(project=project, kind="tool", key="search")
    [v2] = b.stats["releases"]
    assert v2["value"] == "v2" and v2["runs"] == 40 and v2["median"] == pytest.approx(400, rel=0.1)
    assert "args" not in b.stats  # every query is its own: no group of arguments

    search("tail", 900, "v2", 650)  # v2's tail: over 3x v1's time, usual for v2
    search("stuck", 910, "v2", 3000)
    search("old", 920, "v1", 5000)  # judged against the tool (both releases: a wide spread)
    pks = list(Task.objects.filter(project=project, task_id__in=["tail", "stuck", "old"]).values_list("pk", flat=True))
    batch.run_ids(pks, force=True, top_up=False)
    slow = {f.task.task_id: f for f in Finding.objects.filter(project=project, kind="slow_step")}
    assert sorted(slow) == ["old", "stuck"], (b.median_ms, b.mad_ms, b.stats["log_mad"], Baseline.objects.get(project=project, kind="tool", key="search").stats)
    assert "in this release it usually takes" in slow["stuck"].summary


def test_llm_steps_with_ttft_get_a_line_of_ttft_over_input_tokens(project):
    # Prefill follows the prompt: TTFT ≈ 60 ms + 0.05 ms a prompt token. Most prompts are short
    # (a first turn), some long (a late turn with the history), one call in eight slowed 2x.
    rng = random.Random(9)
    steps = []
    for i in range(240):
        prompt = rng.randint(800, 2000) if rng.random() < 0.7 else rng.randint(10_000, 30_000)
        ttft = (60 + 0.05 * prompt) * rng.uniform(0.93, 1.07) * (2 if i % 8 == 5 else 1)
        ms = ttft + 20 * 50
        steps.append(StepRecord(f"s{i}", f"t{i}", at(i * 60), at(i * 60 + ms / 1000), kind="llm", name="chat",
                                model="m", input_tokens=prompt, output_tokens=51, ttft_ms=ttft))
    batch_store(project=project, batch=Batch(steps=steps))
    baselines_refresh(project=project, full=True)
    stats = Baseline.objects.get(project=project, kind="llm", key="m", device="").stats
    assert stats["prefill_b"] == pytest.approx(0.05, rel=0.1)
    assert stats["prefill_a"] + 1400 * stats["prefill_b"] == pytest.approx(130, rel=0.1)
    assert stats["prefill_log_mad"] < 0.06
    assert stats["ttft_log_mad"] > 0.3  # around the median alone, short and long prompts are far apart


def test_the_prefill_line_counts_the_prompt_tokens_the_server_had_to_prefill(project):
    # Most calls reuse a cached 8k-token prefix (its TTFT ~ the new tokens only); a cache miss
    # prefills the whole prompt. Over input tokens the two would not fall on one line.
    rng = random.Random(4)
    steps = []
    for i in range(200):
        prompt = rng.randint(9000, 11_000)
        cached = 8000 if rng.random() < 0.75 else 0
        ttft = (40 + 0.04 * (prompt - cached)) * rng.uniform(0.95, 1.05)
        steps.append(StepRecord(f"s{i}", f"t{i}", at(i * 60), at(i * 60 + (ttft + 1000) / 1000), kind="llm",
                                name="chat", model="m", input_tokens=prompt, cached_tokens=cached, output_tokens=51,
                                ttft_ms=ttft))
    batch_store(project=project, batch=Batch(steps=steps))
    baselines_refresh(project=project, full=True)
    stats = Baseline.objects.get(project=project, kind="llm", key="m", device="").stats
    assert stats["prefill_b"] == pytest.approx(0.04, rel=0.1)
    assert stats["prefill_log_mad"] < 0.05
