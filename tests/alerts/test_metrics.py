"""Metric queries against numpy on the same data: the database computes what a user would."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from analysis.alerts.metrics import MetricSpec, measure
from analysis.models import Finding
from ingest.models import Task

from .conftest import NOW

WINDOW_START = NOW - timedelta(minutes=10)


def value(project, metric, *, filters=None, finding_kind="", start=WINDOW_START, end=NOW):
    return measure(project=project, spec=MetricSpec(metric, filters or {}, finding_kind), start=start, end=end)


@pytest.mark.parametrize("metric,q", [("task_duration_p50", 50), ("task_duration_p90", 90),
                                      ("task_duration_p95", 95), ("task_duration_p99", 99)])
def test_task_percentiles_match_numpy(db, project, store, metric, q):
    rng = np.random.default_rng(3)
    durations = rng.lognormal(mean=7, sigma=0.8, size=157).round(3)
    store(project, durations, start=WINDOW_START, spacing=timedelta(seconds=3))
    m = value(project, metric)
    assert m.sample_count == 157
    assert m.value == pytest.approx(np.percentile(durations, q), rel=1e-9)


def test_only_the_window_and_the_filters_count(db, project, other_project, store):
    inside = [100.0, 200.0, 300.0, 400.0]
    store(project, inside, start=WINDOW_START)
    store(project, [90_000.0] * 3, start=WINDOW_START - timedelta(minutes=5), prefix="old")  # before
    store(project, [90_000.0] * 3, start=NOW, prefix="late")  # the window is [start, end)
    store(project, [90_000.0] * 3, start=WINDOW_START, prefix="stg", environment="staging")
    store(project, [90_000.0] * 3, start=WINDOW_START, prefix="other", name="search-agent")
    store(other_project, [90_000.0] * 10, start=WINDOW_START)
    m = value(project, "task_duration_p95",
              filters={"task_name": "checkout-agent", "environment": "production"})
    assert m.sample_count == 4
    assert m.value == pytest.approx(np.percentile(inside, 95))


def test_step_ttft_and_tpot_percentiles_match_numpy(db, project, store):
    rng = np.random.default_rng(5)
    n = 60
    llm_durations = rng.uniform(500, 3000, n).round(2)
    ttfts = rng.uniform(50, 400, n).round(2)
    tokens = rng.integers(10, 400, n)
    for i in range(n):
        store(project, [5000.0], start=WINDOW_START + timedelta(seconds=5 * i), prefix=f"t{i}-", steps=[
            {"kind": "llm", "name": "chat", "model": "llama-3-70b", "device": "groq-lpu-01",
             "duration_ms": float(llm_durations[i]), "ttft_ms": float(ttfts[i]), "output_tokens": int(tokens[i])},
            {"kind": "tool", "name": "search", "duration_ms": 10_000.0},
        ])
    llm = {"step_kind": "llm", "device": "groq-lpu-01"}
    assert value(project, "step_duration_p99", filters=llm).value == pytest.approx(np.percentile(llm_durations, 99))
    assert value(project, "ttft_p99", filters={"device": "groq-lpu-01"}).value == pytest.approx(np.percentile(ttfts, 99))
    tpot = np.maximum(llm_durations - ttfts, 0) / (tokens - 1)  # docs/analysis.md, "TPOT"
    m = value(project, "tpot_p95", filters={"model": "llama-3-70b"})
    assert m.sample_count == n
    assert m.value == pytest.approx(np.percentile(tpot, 95))
    all_steps = np.concatenate([llm_durations, [10_000.0] * n])
    assert value(project, "step_duration_p95").value == pytest.approx(np.percentile(all_steps, 95))
    assert value(project, "ttft_p95", filters={"device": "gpu-01"}).sample_count == 0


def test_error_rate_is_the_percent_of_tasks_that_failed(db, project, store):
    store(project, [100.0] * 18, start=WINDOW_START)
    store(project, [100.0] * 1, start=WINDOW_START, prefix="e", status="error")
    store(project, [100.0] * 1, start=WINDOW_START, prefix="x", status="timeout")
    m = value(project, "error_rate")
    assert (m.value, m.sample_count) == (pytest.approx(10.0), 20)


def test_finding_rate_counts_tasks_once_and_wasted_share(db, project, store):
    ids = store(project, [1000.0] * 40, start=WINDOW_START, spacing=timedelta(seconds=10))
    tasks = {t.task_id: t for t in Task.objects.filter(project=project)}
    for task_id, wasted in ((ids[0], 300.0), (ids[0], 200.0), (ids[1], 100.0)):  # two in one task
        t = tasks[task_id]
        Finding.objects.create(project=project, task=t, kind="repeated_tool_call", wasted_ms=wasted,
                               summary="search called twice", task_started_at=t.started_at, release=t.release)
    t = tasks[ids[2]]
    Finding.objects.create(project=project, task=t, kind="serial_gap", wasted_ms=400.0, summary="idle",
                           task_started_at=t.started_at, release=t.release)
    repeated = value(project, "finding_rate", finding_kind="repeated_tool_call")
    assert (repeated.value, repeated.sample_count) == (pytest.approx(100 * 2 / 40), 40)
    assert value(project, "finding_rate").value == pytest.approx(100 * 3 / 40)
    assert value(project, "wasted_share").value == pytest.approx(100 * 1000.0 / 40_000.0)
    assert value(project, "wasted_share", finding_kind="serial_gap").value == pytest.approx(1.0)


def test_a_low_confidence_finding_raises_no_finding_rate_and_wastes_no_time(db, project, store):
    ids = store(project, [1000.0] * 20, start=WINDOW_START, spacing=timedelta(seconds=10))
    t = Task.objects.get(project=project, task_id=ids[0])
    Finding.objects.create(project=project, task=t, kind="repeated_tool_call", wasted_ms=100.0, summary="twice",
                           task_started_at=t.started_at, release=t.release)
    Finding.objects.create(project=project, task=t, kind="parallelizable_calls", wasted_ms=900.0,
                           summary="one after the other", confidence=Finding.CONFIDENCE_LOW,
                           confidence_reason="possible: nothing shows whether these calls were independent",
                           task_started_at=t.started_at, release=t.release)
    t = Task.objects.get(project=project, task_id=ids[1])
    Finding.objects.create(project=project, task=t, kind="parallelizable_calls", wasted_ms=500.0,
                           summary="one after the other", confidence=Finding.CONFIDENCE_LOW,
                           task_started_at=t.started_at, release=t.release)
    assert value(project, "wasted_share").value == pytest.approx(100 * 100.0 / 20_000.0)
    assert value(project, "finding_rate").value == pytest.approx(100 * 1 / 20)
    assert value(project, "finding_rate", finding_kind="parallelizable_calls").value == 0.0
    assert value(project, "wasted_share", finding_kind="parallelizable_calls").value == 0.0


def test_an_empty_window_has_no_value(db, project):
    m = value(project, "task_duration_p95")
    assert (m.value, m.sample_count) == (None, 0)
    assert value(project, "error_rate").value is None


def test_step_filters_scope_task_metrics_to_tasks_with_such_a_step(db, project, store):
    groq = [3000.0, 4000.0, 5000.0]
    store(project, groq, start=WINDOW_START, prefix="g",
          steps=[{"kind": "llm", "name": "chat", "device": "groq-lpu-03", "duration_ms": 100.0}])
    store(project, [90_000.0] * 5, start=WINDOW_START, prefix="h",
          steps=[{"kind": "llm", "name": "chat", "device": "h100-01", "duration_ms": 100.0}])
    m = value(project, "task_duration_p50", filters={"device": "groq-lpu-03"})
    assert (m.value, m.sample_count) == (4000.0, 3)
    t = Task.objects.get(project=project, task_id="h0")
    Finding.objects.create(project=project, task=t, kind="slow_step", wasted_ms=1.0, summary="slow",
                           task_started_at=t.started_at)
    assert value(project, "finding_rate", filters={"device": "groq-lpu-03"}).value == 0.0
    assert value(project, "finding_rate", filters={"device": "h100-01"}).value == pytest.approx(20.0)
