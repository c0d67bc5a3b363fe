"""The physical limit for ingest on this machine: a raw COPY of the same step rows the native
benchmark sends, into the same table with the same indexes, with no HTTP, parsing or upsert.

    .venv/bin/python bench/ingest_copy.py --steps 100000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402
from bench.ingest_native import STEPS_PER_TASK  # noqa: E402

COLUMNS = ("project_id", "task_id", "step_id", "parent_step_id", "kind", "name", "started_at",
           "ended_at", "duration_ms", "status", "error", "depends_on", "attributes", "events",
           "model", "provider", "device", "input_tokens", "output_tokens", "cached_tokens",
           "ttft_ms", "streamed", "tool_name", "tool_args")


def run(*, steps: int, fresh: bool = True) -> dict:
    url = harness.bench_database_url(fresh=fresh)
    harness.setup_django(url)
    harness.migrate()
    from django.db import connection
    from django.utils import timezone

    from ingest.models import Project, Task

    project = Project.objects.create(name=f"bench-copy-{time.time_ns()}")
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    tasks = Task.objects.bulk_create([
        Task(project=project, task_id=f"task-{n}", name="customer-support", release="v1",
             started_at=t0 + timedelta(seconds=n * 10), last_event_at=timezone.now())
        for n in range(steps // STEPS_PER_TASK + 1)])
    task_pk = {t.task_id: t.pk for t in tasks}
    rows = []
    for i in range(steps):
        task = i // STEPS_PER_TASK
        start = t0 + timedelta(seconds=task * 10 + (i % STEPS_PER_TASK) * 0.4)
        llm = i % 2 == 0
        rows.append((project.pk, task_pk[f"task-{task}"], f"s{i}", "", "llm" if llm else "tool",
                     "chat" if llm else "search_orders", start, start + timedelta(seconds=0.35), 350.0,
                     "ok", "", [], "{}", "[]", "llama-3.1-70b" if llm else "", "",
                     f"gpu-{task % 4}" if llm else "", 1200 + i % 500 if llm else None,
                     150 if llm else None, None, 180.0 if llm else None, None,
                     "" if llm else "search_orders",
                     None if llm else json.dumps({"order_id": task, "q": "late delivery"})))
    started = time.perf_counter()
    with connection.cursor() as cursor:
        with cursor.connection.cursor().copy(
                f"COPY ingest_step ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    elapsed = time.perf_counter() - started
    return {"steps": steps, "seconds": round(elapsed, 2), "steps_per_s": round(steps / elapsed)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    print(json.dumps(run(steps=args.steps)))
