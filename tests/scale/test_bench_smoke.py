"""`make bench` at toy size: every section runs on a fresh checkout, prints the table and writes
its JSON with a figure for every query, in scratch databases of its own beside this run's
(prefixed, so a real bench's kept dataset is never touched, and dropped afterwards)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.queries import PAIR_PER_TURN, PAIR_TURNS
from tests.conftest import bench_scratch, faults_pass

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, faults_pass]


@pytest.fixture
def bench_env(transactional_db):
    with bench_scratch(f"smoke{os.getpid()}_") as env:
        yield env


def test_make_bench_runs_every_section_and_reports_every_figure(bench_env, tmp_path):
    out = tmp_path / "latest.json"
    run = subprocess.run(
        [sys.executable, "bench/run.py", "--spans", "2048", "--skip-peer", "--analysis-steps", "1500",
         "--scale", "0.002", "--runs", "1", "--out", str(out)],
        cwd=ROOT, env=bench_env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    table = run.stdout
    for label in ("OTLP ingest, spans/s stored", "raw COPY of the same rows", "native ingest",
                  "analysis, steps/s per worker", "task detail API (50,000 steps)", "release compare",
                  "bytes per step"):
        assert label in table, (label, table[-3000:])
    results = json.loads(out.read_text())
    line = lambda label: next(row for row in table.splitlines() if label in row)  # noqa: E731
    # Ingest: every span and step sent is stored (counted in the database), and the raw COPY
    # reference copied exactly those rows, faster than HTTP ingest can ever be.
    otlp, native = results["ingest"]["otlp"], results["ingest"]["native"]
    assert otlp["spans"] == otlp["storage"]["rows"] == otlp["copy"]["steps"] == 2048
    assert otlp["copy"]["tasks"] == 2048 // 16  # one task per trace of 16 spans
    assert otlp["encode_in_loop"]["spans"] == 2048
    assert native["steps"] == native["copy"]["steps"] == 2048
    for figure in (otlp, otlp["encode_in_loop"], native):  # each rate is the rows over the time it took
        rate, count = figure.get("spans_per_s") or figure["steps_per_s"], figure.get("spans") or figure["steps"]
        assert figure["seconds"] > 0 and count / rate == pytest.approx(figure["seconds"], abs=0.006), figure
    assert otlp["copy"]["steps_per_s"] > otlp["spans_per_s"] and native["copy"]["steps_per_s"] > native["steps_per_s"]
    assert otlp["sender"].startswith("opentelemetry-exporter-otlp-proto-http")
    assert f"{otlp['spans_per_s']:,}" in line("OTLP ingest, spans/s stored (2,048 spans")  # the table says it
    assert results["ingest"]["peer"]["skipped"]
    # Analysis: the tasks simulated (1500 steps / ~11 per task), all analysed, none failed.
    analysis = results["analysis"]
    assert analysis["tasks"] == 1500 // 11 and analysis["simulate_failures"] == []
    assert 5 * analysis["tasks"] < analysis["steps"] < 20 * analysis["tasks"]
    assert analysis["steps"] / analysis["steps_per_s_per_worker"] == pytest.approx(analysis["analyse_seconds"], abs=0.051)
    assert f"{analysis['steps']:,} steps" in line("analysis, steps/s per worker")
    # Queries: timed on the dataset asked for, every one answered, medians below their p95. The
    # storage figure counts every step on disk: the dataset and the diff query's two tasks.
    queries = results["queries"]
    assert queries["steps"] == 1000 * 20 + 50_000 and queries["rollups_watermark"]
    assert queries["storage"]["rows"] == queries["steps"] + 2 * (PAIR_TURNS * PAIR_PER_TURN + 1) + 1
    failed = {name: q for name, q in queries["queries"].items() if "error" in q}
    assert not failed
    assert all(0 < q["median_ms"] <= q["p95_ms"] for q in queries["queries"].values()), queries["queries"]
    assert 100 < queries["storage"]["bytes_per_step"] < 10_000  # a step row with its indexes: hundreds of bytes
    exported = results["export"]["steps_export"]  # the queries' dataset, every step, over HTTP
    for fmt in ("parquet", "csv"):
        assert exported[fmt]["complete"] and exported[fmt]["rows"] == 70_000, exported[fmt]
        assert 70_000 / exported[fmt]["rows_per_s"] == pytest.approx(exported[fmt]["seconds"], abs=0.051)
        assert exported[fmt]["peak_rss_mib"] >= exported[fmt]["rss_before_mib"]
    assert "export of 70,000 steps as parquet" in table
