"""Rollup refresh and rebuild throughput: changed steps per second.

    .venv/bin/python -m bench.rollup_refresh [--tasks 50000] [--steps 20] [--reuse] [--days 3]
    .venv/bin/python -m bench.rollup_refresh --dataset agentops_bench_queries:bench-queries   # 10M steps

`--dataset DATABASE:PROJECT` runs on a dataset a previous benchmark left (the queries' 10M steps
after `bench/run.py --scale 1`) instead of loading one: the refreshes below leave its rollups true
(they recompute what they changed), and they change nothing else but the timestamps of `--changed`
tasks' last event and analysis.

On a scratch database (`agentops_bench_refresh`, bench/loader.py: `--tasks` × `--steps` over 30
days, an analysis per task, findings on 5 %), after `rollups_rebuild` (timed: steps/s), three
refreshes as the periodic job meets them:
- completed hours: the watermark moved back `--days` days, as if those hours had just completed
  (every row of them is new): steps of those hours / refresh seconds;
- late analyses: `--changed` tasks spread over old hours get a new analysis (analyzed_at now):
  only their slices' analysis figures are recomputed;
- late data: the same number of tasks get a new event (last_event_at now): their (hour, release,
  environment) groups are recomputed.
Prints one line per figure; `--json` for the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402

DB_NAME = "agentops_bench_refresh"


def dataset(*, tasks: int, steps: int, reuse: bool, existing: str | None = None):
    name, project_name = existing.split(":", 1) if existing else (DB_NAME, "bench-refresh")
    url = harness.bench_database_url(fresh=not (reuse or existing), name=name)
    harness.setup_django(url)
    harness.migrate()
    from django.db import connection

    from bench import loader
    from ingest.models import Project

    project = Project.objects.filter(name=project_name).first()
    if project is None and existing:
        raise SystemExit(f"no project {project_name!r} in {name}: run the benchmark that makes it first")
    if project is None:
        project = Project.objects.create(name="bench-refresh")
        with connection.cursor() as cursor:
            loader.load(cursor, project_id=project.pk, tasks=tasks, steps_per_task=steps, big_task_steps=1000)
            loader.decorate(cursor, project_id=project.pk)
            loader.catalog(cursor, project_id=project.pk)
    with connection.cursor() as cursor:
        # A live system's steady state: every task's last event and analysis shortly after it
        # started, long before the refreshes below (the loader stamps them all at load time).
        cursor.execute("UPDATE ingest_task SET last_event_at = started_at + interval '1 minute'"
                       " WHERE project_id = %s AND last_event_at IS DISTINCT FROM started_at + interval '1 minute'",
                       [project.pk])
        cursor.execute("UPDATE analysis_taskanalysis a SET analyzed_at = t.started_at + interval '2 minutes'"
                       " FROM ingest_task t WHERE t.id = a.task_id AND t.project_id = %s"
                       " AND a.analyzed_at IS DISTINCT FROM t.started_at + interval '2 minutes'", [project.pk])
    return project


def _one(cursor, sql, params=()):
    cursor.execute(sql, params)
    return cursor.fetchone()


def run(*, tasks: int, steps: int, reuse: bool, days: float, changed: int, existing: str | None = None) -> dict:
    project = dataset(tasks=tasks, steps=steps, reuse=reuse, existing=existing)
    from django.db import connection

    from analysis import rollups

    out: dict = {"load_average_before": os.getloadavg()}
    with connection.cursor() as cursor:
        newest, total = _one(cursor, "SELECT max(started_at), sum(step_count) FROM ingest_task WHERE project_id = %s",
                             [project.pk])
    started = time.perf_counter()
    rollups.rollups_rebuild(now=newest)
    seconds = time.perf_counter() - started
    out["rebuild"] = {"steps": int(total), "seconds": round(seconds, 1), "steps_per_s": round(total / seconds),
                      "workers": rollups.REBUILD_WORKERS}
    # 1. hours completed since the last run
    now = rollups.hour_floor(newest) + timedelta(minutes=1)
    mark = now - timedelta(days=days)
    rollups.watermark_set(mark)
    with connection.cursor() as cursor:
        n = _one(cursor, "SELECT coalesce(sum(step_count), 0) FROM ingest_task WHERE project_id = %s AND started_at"
                         " >= %s AND started_at < %s", [project.pk, rollups.hour_floor(mark), rollups.hour_floor(now)])[0]
    started = time.perf_counter()
    result = rollups.rollups_refresh(now=now)
    seconds = time.perf_counter() - started
    out["completed_hours"] = {"hours": result["hours"], "steps": int(n), "seconds": round(seconds, 2),
                              "steps_per_s": round(n / seconds)}
    # 2. late analyses and 3. late data, on `changed` tasks spread over the older hours
    for name, column in (("late_analyses", "analyzed_at"), ("late_data", "last_event_at")):
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, step_count FROM ingest_task WHERE project_id = %s AND started_at < %s"
                           " ORDER BY md5(id::text) LIMIT %s", [project.pk, mark - timedelta(days=1), changed])
            rows = cursor.fetchall()
            ids = [r[0] for r in rows]
            table, key = (("analysis_taskanalysis", "task_id") if column == "analyzed_at" else ("ingest_task", "id"))
            cursor.execute(f"UPDATE {table} SET {column} = %s WHERE {key} = ANY(%s)", [now, ids])
        rollups.watermark_set(now - timedelta(seconds=30))
        started = time.perf_counter()
        result = rollups.rollups_refresh(now=now + timedelta(seconds=1))
        seconds = time.perf_counter() - started
        changed_steps = sum(r[1] for r in rows)
        out[name] = {"tasks": len(rows), "steps": changed_steps, "seconds": round(seconds, 2),
                     "steps_per_s": round(changed_steps / seconds), **result}
    out["load_average_after"] = os.getloadavg()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reuse", action="store_true", help="keep the dataset of a previous run")
    parser.add_argument("--days", type=float, default=3, help="days of hours that completed since the last run")
    parser.add_argument("--changed", type=int, default=200, help="tasks with a late analysis (then late data)")
    parser.add_argument("--dataset", metavar="DATABASE:PROJECT", help="a dataset a previous benchmark left")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = run(tasks=args.tasks, steps=args.steps, reuse=args.reuse, days=args.days, changed=args.changed,
              existing=args.dataset)
    if args.json:
        print(json.dumps(out, default=str))
        return
    r = out["rebuild"]
    print(f"rollups_rebuild: {r['steps']:,} steps in {r['seconds']} s = {r['steps_per_s']:,} steps/s"
          f" ({r['workers']} connections)")
    c = out["completed_hours"]
    print(f"refresh, {c['hours']} completed hours: {c['steps']:,} steps in {c['seconds']} s = {c['steps_per_s']:,}"
          " changed steps/s")
    for name in ("late_analyses", "late_data"):
        x = out[name]
        print(f"refresh, {name.replace('_', ' ')} of {x['tasks']} tasks ({x['steps']:,} steps): {x['seconds']} s"
              f" = {x['steps_per_s']:,} changed steps/s (hours {x['hours']}, groups {x['groups']}, slices"
              f" {x['slices']})")
    print(f"load average {out['load_average_before']} → {out['load_average_after']}")


if __name__ == "__main__":
    main()
