"""`make bench` at toy size: every section runs on a fresh checkout, prints the table and writes
its JSON with a figure for every query, in scratch databases of its own beside this run's
(prefixed, so a real bench's kept dataset is never touched, and dropped afterwards)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.conftest import subprocess_database_url

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def bench_env(transactional_db):
    prefix = f"smoke{os.getpid()}_"
    env = {**os.environ, "DATABASE_URL": subprocess_database_url(), "AGENTOPS_BENCH_DB_PREFIX": prefix,
           "CELERY_BROKER_URL": settings.CELERY_BROKER_URL, "AGENTOPS_DATA_DIR": str(settings.DATA_DIR)}
    yield env
    admin = subprocess_database_url().rsplit("/", 1)
    admin = admin[0] + "/postgres" + (("?" + admin[1].split("?", 1)[1]) if "?" in admin[1] else "")
    with psycopg.connect(admin, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                            [prefix + "%"]).fetchall()]
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
    otlp = results["ingest"]["otlp"]
    assert otlp["spans"] == 2048 and otlp["spans_per_s"] > 0
    assert otlp["sender"].startswith("opentelemetry-exporter-otlp-proto-http")
    assert otlp["encode_in_loop"]["spans_per_s"] > 0 and otlp["copy"]["steps_per_s"] > 0
    assert results["ingest"]["peer"]["skipped"]
    assert results["analysis"]["steps_per_s_per_worker"] > 0
    queries = results["queries"]
    assert queries["steps"] == 1000 * 20 + 50_000 and queries["rollups_watermark"]
    failed = {name: q for name, q in queries["queries"].items() if "error" in q}
    assert not failed
    assert all(q["median_ms"] > 0 for q in queries["queries"].values())
    exported = results["export"]["steps_export"]  # the queries' dataset, every step, over HTTP
    for fmt in ("parquet", "csv"):
        assert exported[fmt]["complete"] and exported[fmt]["rows"] == 70_000, exported[fmt]
        assert exported[fmt]["rows_per_s"] > 0 and exported[fmt]["peak_rss_mib"] >= exported[fmt]["rss_before_mib"]
    assert "export of 70,000 steps as parquet" in table
