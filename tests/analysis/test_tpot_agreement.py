"""TPOT (time per output token) is one number whoever computes it: an alert on `tpot_p95`, the
Devices page, the rollups and the baselines give the same figure for the same steps
(docs/analysis.md, "TPOT")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from analysis import rollups
from analysis.alerts.metrics import MetricSpec, measure
from analysis.dashboard import aggregates
from analysis.engine.baselines import baselines_refresh
from analysis.filters import TaskFilters
from analysis.models import Baseline
from ingest.models import Step
from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store

# Whole hours that are over before the test runs, so the rollups answer for them.
BASE = datetime.now(tz=UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
DEVICE, MODEL = "gpu-a", "llama-3-70b"


def expected_tpot(duration_ms: float, ttft_ms: float | None, output_tokens: int | None) -> float | None:
    """The definition, written out independently of the code under test: decode time
    (duration − TTFT, at least 0) over the tokens after the first; undefined without a TTFT or
    with fewer than two output tokens."""
    if ttft_ms is None or output_tokens is None or output_tokens <= 1:
        return None
    return max(duration_ms - ttft_ms, 0.0) / (output_tokens - 1)


def llm_steps() -> list[tuple[float, float | None, int | None]]:
    """(duration ms, TTFT ms, output tokens) of the steps: short answers, where dividing by n
    or by n − 1 differs most, and the edge cases, three of each."""
    rng = np.random.default_rng(16)
    steps = []
    for _ in range(60):
        tokens = int(rng.integers(3, 13))
        ttft = float(rng.uniform(80, 300))
        steps.append((ttft + float(rng.uniform(15, 40)) * (tokens - 1), ttft, tokens))
    edges = [
        (900.0, 200.0, 0),      # no output: undefined
        (2500.0, 150.0, 1),     # one token: no decode interval, undefined
        (700.0, 100.0, 2),      # two tokens: the whole decode is one interval
        (3000.0, None, 40),     # no TTFT (not streamed): undefined
        (250.0, 400.0, 10),     # TTFT reported past the end (clock skew): decode 0, not negative
        (1200.0, 100.0, None),  # no token count: undefined
    ]
    return steps + edges * 3


def store(project) -> None:
    batch = Batch()
    for i, (duration, ttft, tokens) in enumerate(llm_steps()):
        start = BASE + timedelta(minutes=i)
        end = start + timedelta(milliseconds=duration)
        batch.tasks.append(TaskRecord(f"t{i}", name="chat-agent", release="v1", environment="prod",
                                      started_at=start, ended_at=end, status="ok"))
        batch.steps.append(StepRecord(f"t{i}-llm", f"t{i}", start, end, kind="llm", name="chat", model=MODEL,
                                      device=DEVICE, input_tokens=1000, output_tokens=tokens, ttft_ms=ttft))
    batch_store(project=project, batch=batch)


def stored_tpots(project) -> np.ndarray:
    """The definition applied to the rows as stored (durations as ingest computed them)."""
    rows = Step.objects.filter(project=project).values_list("duration_ms", "ttft_ms", "output_tokens")
    values = [expected_tpot(*row) for row in rows]
    return np.array([v for v in values if v is not None])


def test_alerts_devices_page_rollups_and_baselines_agree_on_tpot(project):
    store(project)
    truth = stored_tpots(project)
    assert len(truth) == 60 + 3 * 2 and truth.min() == 0.0  # the two-token and the clamped steps count
    p95, median = float(np.percentile(truth, 95)), float(np.median(truth))

    alert = measure(project=project, spec=MetricSpec("tpot_p95", {"device": DEVICE}),
                    start=BASE - timedelta(hours=1), end=datetime.now(tz=UTC))
    assert alert.sample_count == len(truth)
    assert alert.value == pytest.approx(p95, rel=1e-9)

    # The Devices page before any rollup exists: the raw steps binned as the rollups bin them.
    (raw_row,) = aggregates.device_table(project=project, filters=TaskFilters())
    bound = rollups.RELATIVE_ERROR * 1.001
    assert (raw_row["tpot_p50"], raw_row["tpot_p95"]) == (pytest.approx(median, rel=bound), pytest.approx(p95, rel=bound))
    (_, _, ecdf), = aggregates.device_quantiles(project=project, filters=TaskFilters(), metric="tpot", devices=[DEVICE])
    assert ecdf[0] == 0.0  # the smallest TPOT is the clamped one

    rollups.rollups_refresh()
    summary = rollups.step_summaries(project=project, filters=TaskFilters(), group_by="device",
                                     metric="tpot")[DEVICE]
    assert summary.timed == len(truth)
    (rolled_p95,) = summary.quantiles((0.95,))
    assert rolled_p95 == pytest.approx(p95, rel=rollups.RELATIVE_ERROR)
    (rolled_row,) = aggregates.device_table(project=project, filters=TaskFilters())  # now from the rollups
    assert rolled_row["tpot_p95"] == pytest.approx(p95, rel=rollups.RELATIVE_ERROR)
    assert (rolled_row["tpot_p50"], rolled_row["tpot_p95"]) == (raw_row["tpot_p50"], raw_row["tpot_p95"])  # one number

    baselines_refresh(project=project, full=True)
    for device in (DEVICE, ""):  # per device and the model's fallback across devices
        baseline = Baseline.objects.get(project=project, kind="llm", key=MODEL, device=device)
        assert baseline.stats["tpot_median"] == pytest.approx(median, rel=1e-9)


def test_python_sql_and_orm_give_each_step_the_same_tpot(project):
    from django.db import connection

    from analysis.measures import Tpot, tpot_ms, tpot_sql

    store(project)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT s.id, {tpot_sql('s')} FROM ingest_step s WHERE s.project_id = %s", [project.pk])
        in_sql = dict(cursor.fetchall())
    in_orm = dict(Step.objects.filter(project=project).annotate(tpot=Tpot()).values_list("pk", "tpot"))
    rows = Step.objects.filter(project=project).values_list("pk", "duration_ms", "ttft_ms", "output_tokens")
    assert len(rows) == len(llm_steps())
    for pk, duration, ttft, tokens in rows:
        expected = expected_tpot(duration, ttft, tokens)
        in_python = tpot_ms(duration_ms=duration, ttft_ms=ttft, output_tokens=tokens)
        for value in (in_python, in_sql[pk], in_orm[pk]):
            assert value == (None if expected is None else pytest.approx(expected, rel=1e-12)), (duration, ttft, tokens)
