"""The physical limit for ingest on this machine: a raw COPY of the same rows, into the same
tables with the same indexes, with no HTTP, parsing or upsert.

`copy_stored` is what `make bench` uses: after the OTLP (or native) benchmark it reads back
exactly the task and step rows that benchmark stored, empties the tables and times COPY of
those rows as a new project — so the ratio compares like with like. `run` (the command line)
generates the native benchmark's rows itself.

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


def _columns(cursor, table: str) -> list[str]:
    cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                   "AND column_name <> 'id' ORDER BY ordinal_position", [table])
    return [row[0] for row in cursor.fetchall()]


def _copy_out(cursor, sql: str, params: list) -> list[list[bytes]]:
    query = cursor.mogrify(sql, params)
    chunks = []
    with cursor.copy(f"COPY ({query}) TO STDOUT") as copy:
        for data in copy:
            chunks.append(bytes(data))
    return [line.split(b"\t") for line in b"".join(chunks).split(b"\n") if line]


def _copy_in(cursor, table: str, columns: list[str], rows: list[list[bytes]]) -> float:
    payload = b"\n".join(b"\t".join(row) for row in rows) + b"\n"
    started = time.perf_counter()
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for first in range(0, len(payload), 1 << 20):
            copy.write(payload[first:first + (1 << 20)])
    return time.perf_counter() - started


def copy_stored(*, project_name: str, projects: int = 1) -> dict:
    """Time COPY of the rows a benchmark stored for `project_name` (in the current database), or
    for each of its `projects` (bench.otlp_ingest.project_names): they are read out, the tables
    emptied (partitions kept), and copied back as as many new projects (on Citus spread over the
    workers as the benchmark's were), each table in one COPY."""
    from django.db import connection

    from bench.otlp_ingest import project_names
    from ingest.models import Project

    sources = []
    for name in project_names(project_name, projects):
        source = Project.objects.filter(name=name).order_by("-pk").first()
        if source is None:
            raise RuntimeError(f"no project {name!r} to copy rows from")
        sources.append(source)
    source_ids = [p.pk for p in sources]
    raw = connection.cursor().connection  # psycopg's own connection: COPY needs it
    with raw.cursor() as cursor:
        task_cols, step_cols = _columns(cursor, "ingest_task"), _columns(cursor, "ingest_step")
        tasks = _copy_out(cursor, f"SELECT {', '.join(task_cols)} FROM ingest_task WHERE project_id = ANY(%s)",
                          [source_ids])
        steps = _copy_out(cursor, f"SELECT {', '.join(step_cols)} FROM ingest_step WHERE project_id = ANY(%s)",
                          [source_ids])
        cursor.execute("SELECT id, project_id, task_id FROM ingest_task WHERE project_id = ANY(%s)", [source_ids])
        old_task_id = {pk: (project_id, task_id) for pk, project_id, task_id in cursor.fetchall()}
        cursor.execute("TRUNCATE ingest_task, ingest_step CASCADE")
    raw.commit()
    stamp = time.time_ns()
    targets = harness.projects_create([f"{p.name}-copy-{stamp}" for p in sources])
    new_project = {str(old.pk).encode(): str(new.pk).encode() for old, (new, _key) in zip(sources, targets, strict=True)}
    target_ids = [new.pk for new, _key in targets]
    with raw.cursor() as cursor:
        project_at = task_cols.index("project_id")
        for row in tasks:
            row[project_at] = new_project[row[project_at]]
        seconds = _copy_in(cursor, "ingest_task", task_cols, tasks)
        cursor.execute("SELECT project_id, task_id, id FROM ingest_task WHERE project_id = ANY(%s)", [target_ids])
        new_pk = {(project_id, task_id): str(pk).encode() for project_id, task_id, pk in cursor.fetchall()}
        project_at, task_at = step_cols.index("project_id"), step_cols.index("task_id")
        for row in steps:
            source_project, task_id = old_task_id[int(row[task_at])]
            row[project_at] = new_project[row[project_at]]
            row[task_at] = new_pk[(int(new_project[str(source_project).encode()]), task_id)]
        seconds += _copy_in(cursor, "ingest_step", step_cols, steps)
    raw.commit()
    return {"tasks": len(tasks), "steps": len(steps), "seconds": round(seconds, 2),
            "steps_per_s": round(len(steps) / seconds)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    print(json.dumps(run(steps=args.steps)))
