"""The concepts several rooms compute are computed one way (analysis/measures.py): a step's
baseline key in SQL and in Python, what counts as failed, what counts as a number in a budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from analysis import rollups
from analysis.alerts.metrics import MetricSpec, measure
from analysis.dashboard import aggregates
from analysis.engine import batch
from analysis.engine.baselines import DEVICE, baselines_refresh
from analysis.filters import TaskFilters
from analysis.measures import FAILED_SQL, baseline_key, baseline_key_sql
from analysis.models import Baseline, TaskAnalysis
from ingest.models import Step, Task
from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store

NOW = datetime.now(tz=UTC)
# Whole hours that are over before the test runs, so the rollups answer for them.
BASE = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)


def step(task_id: str, i: int, **fields) -> StepRecord:
    start = BASE + timedelta(minutes=i)
    return StepRecord(f"{task_id}-{i}", task_id, start, start + timedelta(milliseconds=100 + i), **fields)


def test_sql_and_python_give_every_step_the_same_baseline_key(project):
    steps = [
        step("k", 0, kind="llm", name="chat", model="llama-3-70b", tool_name="ignored"),
        step("k", 1, kind="llm", name="chat"),  # no model: the name
        step("k", 2, kind="tool", name="Search the web", tool_name="search"),
        step("k", 3, kind="tool", name="lookup"),  # no tool name: the name
        step("k", 4, kind="retrieval", name="docs", model="embedder", tool_name="vector"),
        step("k", 5, kind="agent", name="planner"),
        step("k", 6, kind="other", name="", model="m"),
    ]
    batch_store(project=project, batch=Batch(tasks=[TaskRecord("k", name="t", started_at=BASE,
                                                               ended_at=BASE + timedelta(minutes=10))],
                                             steps=steps))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT s.step_id, s.kind, {baseline_key_sql('s')} FROM ingest_step s"
                       " WHERE s.project_id = %s", [project.pk])
        in_sql = {step_id: (kind, key) for step_id, kind, key in cursor.fetchall()}
    assert in_sql == {"k-0": ("llm", "llama-3-70b"), "k-1": ("llm", "chat"), "k-2": ("tool", "search"),
                      "k-3": ("tool", "lookup"), "k-4": ("retrieval", "docs"), "k-5": ("agent", "planner"),
                      "k-6": ("other", "")}
    # The detectors' steps (StepData.key) and any row with the fields (baseline_key) agree.
    pk = Task.objects.get(project=project).pk
    assert {s.step_id: (s.kind, s.key) for s in batch.contexts_load([pk])[pk].steps} == in_sql
    assert {s.step_id: (s.kind, baseline_key(s)) for s in Step.objects.filter(project=project)} == in_sql
    # The baselines are stored under the keys the detectors look them up by.
    baselines_refresh(project=project, full=True)
    stored = set(Baseline.objects.filter(project=project).exclude(kind=DEVICE).values_list("kind", "key"))
    assert stored == set(in_sql.values())


def test_error_counts_count_the_same_statuses_everywhere(project):
    statuses = ["ok"] * 6 + ["error"] * 3 + ["timeout"] * 2 + [""]
    batch = Batch()
    for i, status in enumerate(statuses):
        batch.tasks.append(TaskRecord(f"t{i}", name="agent", release="v1", started_at=BASE + timedelta(minutes=i),
                                      ended_at=BASE + timedelta(minutes=i, seconds=1), status=status))
        batch.steps.append(step(f"t{i}", i, kind="tool", name="search", tool_name="search", status=status or "ok"))
    batch_store(project=project, batch=batch)
    failed = sum(status in Task.FAILED_STATUSES for status in statuses)
    assert failed == 5
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FILTER (WHERE status {FAILED_SQL}) FROM ingest_task WHERE project_id = %s",
                       [project.pk])
        assert cursor.fetchone()[0] == failed

    alert = measure(project=project, spec=MetricSpec("error_rate", {}), start=BASE, end=NOW)
    assert alert.value == pytest.approx(100 * failed / len(statuses))
    assert aggregates.overview_totals(project=project, filters=TaskFilters())["errors"] == failed  # raw
    rollups.rollups_refresh()
    assert aggregates.overview_totals(project=project, filters=TaskFilters())["errors"] == failed  # rolled up
    (tools,) = rollups.step_summaries(project=project, filters=TaskFilters(), group_by="tool").values()
    assert (tools.count, tools.errors) == (len(statuses), failed)


BUDGET = {"llm": 120, "tool": 2.5e3, "overhead": -3.5,  # numbers, in every JSON spelling
          "text": "1", "flag": True, "nested": {"ms": 5}, "nothing": None}  # not numbers
NUMBERS = {"llm": 120.0, "tool": 2500.0, "overhead": -3.5}


def analysed_task(project, task_id: str, started_at: datetime) -> None:
    batch_store(project=project, batch=Batch(tasks=[TaskRecord(
        task_id, name="agent", release="v1", started_at=started_at, ended_at=started_at + timedelta(seconds=3),
        status="ok")]))
    TaskAnalysis.objects.create(task=Task.objects.get(project=project, task_id=task_id), project=project,
                                analyzed_at=NOW - timedelta(hours=1), budget=BUDGET)


def test_budget_sums_add_json_numbers_and_nothing_else(project):
    analysed_task(project, "old", BASE)
    assert aggregates.budget_by_release(project=project, filters=TaskFilters()) == [("v1", NUMBERS)]  # raw
    rollups.rollups_refresh()
    assert rollups.budget_sums(project=project, filters=TaskFilters()) == {"v1": (1, NUMBERS)}  # rolled up
    # After the last refresh, in the hour in progress (not NOW, which is when the suite began): read raw.
    analysed_task(project, "fresh", datetime.now(tz=UTC))
    assert rollups.budget_sums(project=project, filters=TaskFilters()) == \
        {"v1": (2, {k: 2 * v for k, v in NUMBERS.items()})}


@pytest.mark.django_db
def test_the_percentile_is_one_definition_in_sql_in_python_and_over_the_histogram():
    """percentile_cont_sql, PercentileCont and percentiles give the same numbers; the histogram's
    percentile (the same rank and weight, bucket middles for order statistics) is within its bound."""
    import numpy as np

    from analysis.measures import percentile_cont_sql, percentiles
    from analysis.rollups.histograms import RELATIVE_ERROR, Summary, bin_sql

    values = np.random.default_rng(7).lognormal(7, 1.2, size=1001).round(3)
    fractions = (0.0, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)
    with connection.cursor() as cur:
        cur.execute(f"SELECT {percentile_cont_sql('v', fractions)}, {percentile_cont_sql('v', 0.5)},"
                    f" array_agg({bin_sql('v')}) FROM unnest(%s::float8[]) u(v)", [values.tolist()])
        in_sql, median, bins = cur.fetchone()
    assert in_sql == pytest.approx(list(percentiles(values, fractions)), rel=1e-12)
    assert median == pytest.approx(float(percentiles(values, 0.5)), rel=1e-12)
    summary = Summary(max_ms=float(values.max()))
    np.add.at(summary.bins, bins, 1)
    for exact, bucketed in zip(in_sql, summary.quantiles(fractions), strict=True):
        assert abs(bucketed - exact) <= RELATIVE_ERROR * exact * 1.0001
