"""Server-time benchmark of the dashboard on a big project; not part of the suite (the file name
does not start with test_). Run it explicitly; it fills this run's throwaway test database:

    BENCH_TASKS=1000000 .venv/bin/python -m pytest tests/analysis/bench_dashboard.py -s -q

Tasks are bulk-inserted with one generate_series statement (30 days, 3 releases, 2% errors,
log-normal-ish durations, one in ten analysed with a finding), then each page and chart
endpoint is timed through the Django test client (first and best of 3, no network). Results print and
land in test-artifacts/bench-dashboard.json.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from tests.analysis.factories import T0, insert_big_task
from tests.browser.conftest import ARTIFACTS

N_TASKS = int(os.environ.get("BENCH_TASKS", "200000"))


def fill(project, n: int) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO ingest_task (project_id, task_id, name, release, environment, session_id, started_at,"
            " ended_at, duration_ms, status, attributes, reported, step_count, input_tokens, output_tokens,"
            " error_count, last_event_at)"
            " SELECT %s, 'task-' || i, 'agent-' || (i %% 20), 'v' || (1 + i %% 3), 'prod', '',"
            "  %s + make_interval(secs => i * (2592000.0 / %s)), %s + make_interval(secs => i * (2592000.0 / %s)) + make_interval(secs => d / 1000),"
            "  d, CASE WHEN i %% 50 = 0 THEN 'error' ELSE 'ok' END, '{}', true, 12, 4000, 600, 0, now()"
            " FROM (SELECT i, round((200 * exp(random() * 4))::numeric, 1)::float8 AS d"
            "       FROM generate_series(1, %s) i) g",
            [project.pk, T0, n, T0, n, n])
        cur.execute(
            "INSERT INTO analysis_taskanalysis (task_id, project_id, analyzed_at, claim_token, critical_path,"
            " budget, whatif, wasted_ms, top_finding, finding_kinds)"
            " SELECT id, project_id, now(), '', '{}', '{\"prefill\": 300, \"decode\": 900, \"tool\": 700}',"
            "  '{}', 500, 'slow_step', '{slow_step}' FROM ingest_task WHERE project_id = %s AND id %% 10 = 0",
            [project.pk])
        cur.execute(
            "INSERT INTO analysis_finding (project_id, task_id, kind, step_ids, wasted_ms, severity, summary,"
            " evidence, task_started_at, release, created_at)"
            " SELECT t.project_id, t.id, 'slow_step', '{s1}', 500, 'medium', 'slow', '{}', t.started_at,"
            "  t.release, now() FROM ingest_task t WHERE t.project_id = %s AND t.id %% 10 = 0", [project.pk])
        cur.execute("ANALYZE ingest_task; ANALYZE analysis_taskanalysis; ANALYZE analysis_finding")


def timings(client, url, n=3) -> list[float]:
    """Seconds of n requests: the first is cold (nothing cached in the process)."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        response = client.get(url, HTTP_ACCEPT_ENCODING="gzip")
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    return times


@pytest.mark.django_db(transaction=True)
def test_bench(project, client):
    started = time.perf_counter()
    fill(project, N_TASKS)
    insert_big_task(project, "huge", turns=500, per_turn=99)
    insert_big_task(project, "flat", turns=0, per_turn=50_000)
    print(f"\ninserted {N_TASKS} tasks + two 50,001-step tasks in {time.perf_counter() - started:.1f} s")
    client.force_login(get_user_model().objects.create_superuser("bench", password="x"))
    page = client.get("/tasks", {"sort": "-started_at"})
    cursor = page.content.decode().split('cursor=')[1].split('"')[0].split("&")[0]
    for _ in range(48):  # walk ~50 pages deep for the keyset check
        body = client.get(f"/tasks?cursor={cursor}").content.decode()
        cursor = body.split('cursor=')[1].split('"')[0].split("&")[0]
    urls = [
        "/tasks", f"/tasks?cursor={cursor}", "/tasks?release=v2&status=error", "/tasks?min_duration_ms=5000",
        "/tasks?finding=slow_step", "/tasks?q=agent-7", "/tasks?name=agent-7", "/tasks?sort=-duration_ms",
        "/tasks?range=24h", "/", "/charts/overview.json", "/charts/overview.json?range=24h",
        "/latency?group_by=task", "/charts/latency.json?group_by=task",
        "/tasks/huge", "/tasks/huge/waterfall.json", "/tasks/huge/waterfall.json?mode=all",
        "/tasks/flat/waterfall.json",
    ]
    results = {}
    print("   first     best")
    for url in urls:
        times = timings(client, url)
        results[url] = {"first_s": round(times[0], 3), "best_s": round(min(times), 3)}
        print(f"{times[0] * 1000:6.0f} ms {min(times) * 1000:6.0f} ms  {url}")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "bench-dashboard.json").write_text(json.dumps({"tasks": N_TASKS, "seconds": results}, indent=2))
