"""`bench/run.py --citus` at toy size: the queries' dataset loaded and read on the single node and
on the local Citus cluster in one run, the table giving both sides and their ratio, the same
answers on both, the reads routed to the one worker that holds the project. Runs only when a
cluster is running under the data folder (`make citus`); its scratch databases are prefixed and
dropped afterwards, on every node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from agentops import citus
from bench.run import ANSWER_FILTERS, citus_rows
from tests.conftest import bench_scratch

ROOT = Path(__file__).resolve().parents[2]


def _cluster_running() -> bool:
    return set(citus.ports(Path(settings.DATA_DIR))) == set(citus.NODES)


needs_cluster = pytest.mark.skipif(not _cluster_running(),
                                   reason=f"no Citus cluster running under {settings.DATA_DIR}/citus "
                                          "(`make citus` starts one)")


@pytest.fixture
def bench_env(transactional_db):
    prefix = f"citusbench{os.getpid()}_"
    with bench_scratch(prefix) as env:
        yield env
    nodes = [(citus.HOST, port) for port in citus.ports(Path(settings.DATA_DIR)).values()]
    for _host, port in nodes:
        with psycopg.connect(host=citus.HOST, port=port, user="postgres", dbname="postgres") as conn:
            names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                                [prefix + "%"])]
        for name in names:
            citus.drop_database(nodes, name)


@pytest.mark.slow
@needs_cluster
def test_the_citus_bench_gives_both_sides_their_ratio_and_the_same_answers(bench_env, tmp_path):
    out = tmp_path / "citus.json"
    run = subprocess.run(
        [sys.executable, "bench/run.py", "--citus", "--only", "queries", "--scale", "0.002", "--runs", "1",
         "--queries", "task list", "--out", str(out)],
        cwd=ROOT, env=bench_env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads(out.read_text())
    single, on_citus = results["single"]["queries"], results["citus"]["queries"]
    # Both sides timed the same queries on the same dataset, and gave the same answers.
    assert set(single["queries"]) == set(on_citus["queries"]) == {
        "task list (first page)", "task list (filtered: release+name)", "task list (sorted by duration)"}
    assert all("median_ms" in q for q in [*single["queries"].values(), *on_citus["queries"].values()])
    assert single["answers"] == on_citus["answers"]
    assert single["answers"]["steps"] == 1000 * 20 + 50_000
    assert set(single["answers"]) >= {f"task list count: {label}" for label in ANSWER_FILTERS}
    # On Citus the project's reads ran on one worker, the one that holds it; the single node has none.
    worker = on_citus["placement"]["bench-queries"].removeprefix("worker ")
    assert on_citus["routing"] == {"task list (first page)": f"1 task(s), on worker {worker}",
                                   "the project's steps (count)": f"1 task(s), on worker {worker}"}
    assert single["routing"] == {} and single["placement"]["bench-queries"] == "single node"
    # The table: each query on both sides with the ratio Citus / single, the median ratio, the answers.
    table = run.stdout
    line = lambda label: next(row for row in table.splitlines() if label in row)  # noqa: E731
    assert "single node" in line("figure") and "Citus / single" in line("figure")
    a, b = (side["queries"]["task list (first page)"]["median_ms"] for side in (single, on_citus))
    assert line("task list (first page)").split()[-1] == f"{b / a:.2f}"
    assert "median of the 3 queries' ratios" in table
    assert line("answer: steps").split()[-1] == "same"
    assert f"bench-queries on worker {worker}" in table


def test_the_citus_table_sets_each_figure_beside_its_counterpart():
    single = {"ingest": {"otlp": {"spans": 1000, "senders": 4, "spans_per_s": 2000, "placement": {"a": 1, "b": 2},
                                  "copy": {"steps_per_s": 40_000}},
                         "native": {"steps_per_s": 1000}},
              "analysis": {"steps": 5000, "placement": {"a": 1}, "steps_per_s_per_worker": 500}}
    on_citus = {"ingest": {"otlp": {"spans_per_s": 1000, "copy": {"steps_per_s": 30_000}},
                           "native": {"error": "exit 1"}},
                "analysis": {"steps_per_s_per_worker": 400}}
    rows = {label.strip(): rest for label, *rest in citus_rows(single, on_citus)}
    assert rows["OTLP /v1/traces, spans/s stored"] == ["2,000", "1,000", "0.50"]
    assert rows["raw COPY of the OTLP rows, rows/s"] == ["40,000", "30,000", "0.75"]
    assert rows["native /api/v1/ingest, steps/s stored"] == ["1,000", "—", "—"]  # a side that failed
    assert rows["analyze --all, steps/s per worker"] == ["500", "400", "0.80"]
    assert "ingest: 1,000 spans / steps each, 2 projects, 4 senders" in rows
