"""Cold weeks in columnar form (issue 26, item 6): a closed weekly partition of `ingest_step` stored
by `citus_columnar` against the same week and a neighbouring one as heap, on the local Citus
cluster (`make citus`): bytes per step, the dashboard's step reads restricted to the week, the
conversion time, and what the product does to a step of that week, statement by statement.

    make citus
    .venv/bin/python bench/columnar.py --scale 1             # 10M steps: ~15 min on 2 cores, 8 loading
    .venv/bin/python bench/columnar.py --scale 0.01 --runs 2 # a quick look

It runs in a scratch database of the cluster (`agentops_bench_columnar`, joined to the workers
with `agentops.citus.join_database`), never the product's. A run ends with retention dropping the
columnar week, so the next one loads again (one cut short before that reuses the load, or says
to `--reload` if it left the week columnar). Citus refuses a columnar partition of the table as
the product defines it (GIN and BRIN indexes and foreign keys on the parent): to measure at all,
the scratch database drops those from the parent and gives every other week the GIN and BRIN
indexes as its own (docs/scaling.md, step 6, "Cold weeks in columnar form")."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import harness  # noqa: E402

DB = "agentops_bench_columnar"
FULL_TASKS = 500_000  # --scale 1: 500k tasks of 20 steps = 10M steps, as bench/run.py
STEPS_PER_TASK = 20
# On the parent, and refused by columnar (btree and hash only) or by its partitions (no foreign key).
PARENT_GIN_BRIN = ("step_attributes", "step_search_text", "step_started_brin")
PARENT_FOREIGN_KEYS = ("ingest_step_task_fk", "ingest_step_project_fk")


# --- the scratch database on the cluster --------------------------------------------------------


def cluster() -> tuple[tuple[str, int], list[tuple[str, int]]]:
    from agentops import citus

    found = citus.ports(harness.data_dir())
    if "coordinator" not in found:
        sys.exit(f"no Citus cluster running under {citus.cluster_dir(harness.data_dir())}: run `make citus`")
    workers = [(citus.HOST, port) for node, port in sorted(found.items()) if node != "coordinator"]
    return (citus.HOST, found["coordinator"]), workers


def scratch_database(name: str, *, fresh: bool) -> str:
    from agentops import citus

    coordinator, workers = cluster()
    if fresh:
        citus.drop_database([coordinator, *workers], name)
    citus.join_database(coordinator, workers, name)
    return citus.url(harness.data_dir(), name)


def dataset(scale: float, *, database: str, reload: bool):
    """The loaded project (bench/loader.py's dataset), loading it when missing or of another size."""
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")  # nothing here is queued
    tasks = int(FULL_TASKS * scale)
    wanted = tasks * STEPS_PER_TASK + 50_000
    harness.setup_django(scratch_database(database, fresh=False))
    from django.db import connection

    from bench import loader
    from ingest import partitions
    from ingest.models import Project

    harness.migrate()
    project = Project.objects.filter(name="bench-columnar").first()
    have = 0
    if project is not None and not reload:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [project.pk])
            have = cursor.fetchone()[0]
    if have == wanted:
        print(f"   reusing the loaded {have:,} steps in {database}", file=sys.stderr, flush=True)
        return project, None
    connection.close()
    scratch_database(database, fresh=True)
    partitions.forget_cache()
    harness.migrate()
    project = Project.objects.create(name="bench-columnar")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        loader.load(cursor, project_id=project.pk, tasks=tasks, steps_per_task=STEPS_PER_TASK)
    return project, round(time.perf_counter() - started, 1)


# --- weeks, sizes, reads ------------------------------------------------------------------------


def closed_weeks(project) -> list[tuple[str, object, object, int]]:
    """(partition, start, end, steps of the project) of each week that ended before now."""
    from django.db import connection
    from django.utils import timezone

    from ingest import partitions

    now = timezone.now()
    out = []
    with connection.cursor() as cursor:
        for name, start, end in partitions.partitions("ingest_step"):
            if end is None or end > now:
                continue
            cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s AND started_at >= %s "
                           "AND started_at < %s", [project.pk, start, end])
            out.append((name, start, end, cursor.fetchone()[0]))
    return out


def size(partition: str, rows: int) -> dict:
    """Bytes on disk of one week on every shard: table (with TOAST), its indexes, and per step."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT citus_table_size(%s), citus_total_relation_size(%s)", [partition, partition])
        table, total = cursor.fetchone()
        cursor.execute("SELECT amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.oid = %s::regclass",
                       [partition])
        method = cursor.fetchone()[0]
    return {"partition": partition, "method": method, "rows": rows, "table_bytes": table,
            "index_bytes": total - table, "total_bytes": total, "bytes_per_step": round(total / rows)}


def week_reads(project, start, end) -> dict:
    """The reads of the product that touch a week's steps, restricted to that week: the task page's
    steps, the task searches over steps, the Latency page's step figures computed from raw steps
    (no rollups in this database, as for filters the rollups have no dimension for; they look the
    steps up task by task, so one hour of the week: on the columnar week each task's lookup is a
    columnar scan, and a day takes minutes a run),
    and one statement over the week's steps alone (what a partition's storage decides most)."""
    from dataclasses import replace

    from django.db import connection

    from analysis.dashboard import aggregates, selectors
    from analysis.filters import TaskFilters
    from ingest.models import Task

    f = TaskFilters(since=start, until=end)
    hour = TaskFilters(since=start + timedelta(days=2), until=start + timedelta(days=2, hours=1))
    tasks = list(Task.objects.filter(project=project, started_at__gte=start, started_at__lt=end)
                 .exclude(task_id="big-task").order_by("started_at")[::5_000][:20])

    def week_sql():
        with connection.cursor() as cursor:
            cursor.execute("SELECT kind, count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms), "
                           "percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) FROM ingest_step "
                           "WHERE project_id = %s AND started_at >= %s AND started_at < %s GROUP BY kind",
                           [project.pk, start, end])
            return cursor.fetchall()

    def search(**kwargs):
        return lambda: selectors.task_list(project=project, filters=replace(f, **kwargs), limit=50)

    return {
        "task page: the steps of 20 tasks of the week (task_steps_json)":
            lambda: [selectors.task_steps_json(task=t) for t in tasks],
        "latency percentiles by kind, one hour (raw steps)":
            lambda: aggregates.duration_percentiles(project=project, filters=hour, group_by="kind"),
        "latency histogram, llm steps, one hour (raw steps)":
            lambda: aggregates.duration_histogram(project=project, filters=hour, group_by="kind", group="llm"),
        "search: a step over 2 s (min_step_ms=2000)": search(min_step_ms=2000.0),
        "search: tool + step over 1 s": search(tool="search_inventory", min_step_ms=1000.0),
        "search text: a common word (q=id)": search(q="id"),
        "the week's steps by kind: count, p50, p95 (one SQL statement)": week_sql,
    }


def time_reads(project, start, end, *, runs: int) -> dict:
    from bench import queries

    out = {}
    for name, fn in week_reads(project, start, end).items():
        out[name] = queries.timed(fn, runs=runs)
        print(f"   {start:%Y-%m-%d} {name}: {out[name]['median_ms']:,.1f} ms", file=sys.stderr, flush=True)
    return out


# --- making a week columnar ---------------------------------------------------------------------


def make_room(heap_weeks: list[str]) -> None:
    """What Citus needs before a partition of ingest_step can be columnar, in this scratch database
    only: the parent's GIN and BRIN indexes and its foreign keys go (a partition has every index
    and foreign key of its parent; columnar takes neither). The other partitions, heap, get the GIN
    and BRIN indexes back as indexes of their own, so that reads of them (and a task's lookups,
    which probe every week) stay as in the product."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS citus_columnar")
        cursor.execute("SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
                       "WHERE indexrelid = ANY(%s::regclass[])", [list(PARENT_GIN_BRIN)])
        definitions = cursor.fetchall()
        for name, _ in definitions:
            cursor.execute(f"DROP INDEX {name}")
        for name in PARENT_FOREIGN_KEYS:
            cursor.execute(f"ALTER TABLE ingest_step DROP CONSTRAINT IF EXISTS {name}")
        for week in heap_weeks:
            for name, definition in definitions:
                method_and_columns = definition.split(" USING ", 1)[1]
                cursor.execute(f"CREATE INDEX {week}_{name} ON {week} USING {method_and_columns}")


def convert(partition: str) -> float:
    """alter_table_set_access_method to columnar (Citus rewrites every shard of the week); seconds."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT alter_table_set_access_method(%s, 'columnar')", [partition])
        cursor.execute(f"ANALYZE {partition}")
    return round(time.perf_counter() - started, 1)


def refused_as_defined(partition: str) -> str:
    """What Citus says to converting a week of ingest_step as the product defines the table."""
    from django.db import DatabaseError, connection, transaction

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS citus_columnar")
            cursor.execute("SELECT alter_table_set_access_method(%s, 'columnar')", [partition])
    except DatabaseError as exc:
        return str(exc).splitlines()[0]
    return "converted"


# --- what the product does to a step of a columnar week -----------------------------------------


class _Undo(Exception):
    pass


def _attempt(fn) -> str:
    """Run `fn` in a transaction that is rolled back: "works", or the database's first line."""
    from django.db import DatabaseError, transaction

    try:
        with transaction.atomic():
            fn()
            raise _Undo
    except _Undo:
        return "works"
    except DatabaseError as exc:
        return str(exc).splitlines()[0]


def product_operations(project, *, cold: tuple, hot: tuple) -> dict[str, str]:
    """Each thing the product does to steps, on a task of the columnar week (`cold`: start, end)
    and on a task of a heap week (`hot`), each rolled back."""
    from datetime import datetime

    from django.db import connection

    from analysis.dashboard import selectors
    from ingest.models import Task
    from ingest.records import Batch, StepRecord
    from ingest.services import batch_store

    def task_in(start, end) -> Task:
        return (Task.objects.filter(project=project, started_at__gte=start, started_at__lt=end)
                .exclude(task_id="big-task").order_by("started_at").first())

    cold_task, hot_task = task_in(*cold[:2]), task_in(*hot[:2])

    def step(task: Task, step_id: str, started: datetime) -> Batch:
        return Batch(steps=[StepRecord(step_id=step_id, task_id=task.task_id, started_at=started,
                                       ended_at=started + timedelta(milliseconds=250), kind="tool",
                                       name="late_tool", tool_name="late_tool")])

    def store(task: Task, step_id: str, started: datetime, *, twice: bool = False):
        def run():
            batch_store(project=project, batch=step(task, step_id, started))
            if twice:
                batch_store(project=project, batch=step(task, step_id, started))
        return run

    def moved(task: Task):
        """A step sent again with a corrected start: ingest deletes its row at the old start."""
        def run():
            first = task.steps.order_by("started_at").first()
            batch_store(project=project, batch=step(task, first.step_id, first.started_at + timedelta(seconds=1)))
        return run

    def update(task: Task):
        def run():
            with connection.cursor() as cursor:
                cursor.execute("UPDATE ingest_step SET status = 'error' WHERE project_id = %s AND task_id = %s",
                               [project.pk, task.pk])
        return run

    def delete(task: Task):
        return lambda: Task.objects.filter(project=project, pk=task.pk).delete()

    cold_at = cold_task.started_at + timedelta(milliseconds=10)
    hot_at = hot_task.started_at + timedelta(milliseconds=10)
    return {
        "read a task's steps (task page)": _attempt(lambda: selectors.task_steps_json(task=cold_task)),
        "ingest a late step of a task of the week (new row)": _attempt(store(cold_task, "late-1", cold_at)),
        "ingest the same late step again (a resent batch)": _attempt(store(cold_task, "late-2", cold_at, twice=True)),
        "ingest a step of a task of a heap week (its task has steps)": _attempt(store(hot_task, "late-3", hot_at)),
        "ingest a step sent again with a corrected start": _attempt(moved(cold_task)),
        "UPDATE a step of the week": _attempt(update(cold_task)),
        "delete a task of the week (project deletion, retention of tasks)": _attempt(delete(cold_task)),
        "delete a task of a heap week": _attempt(delete(hot_task)),
    }


def retention_drops(partition: str, end) -> str:
    """Retention (partitions.drop_before) dropping the columnar week: done for real, last."""
    from ingest import partitions

    dropped = partitions.drop_before(end)
    return "works" if partition in dropped else f"not dropped ({', '.join(dropped) or 'none'})"


# --- the run and its table ----------------------------------------------------------------------


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def print_tables(out: dict) -> None:
    cold, hot = out["cold_week"], out["hot_week"]
    print(f"\ncolumnar week {cold} vs heap week {hot}, project of {out['steps']:,} steps on "
          f"{out['workers']} workers; median (p95) of {out['runs']} runs, ms\n")
    print(f"{'week':<28} {'storage':<9} {'steps':>10} {'table MiB':>10} {'index MiB':>10} {'bytes/step':>11}")
    for label, s in (("cold week as heap", out["size_before"]), ("cold week as columnar", out["size_after"]),
                     ("heap week", out["size_hot"])):
        print(f"{label:<28} {s['method']:<9} {s['rows']:>10,} {_mib(s['table_bytes']):>10} "
              f"{_mib(s['index_bytes']):>10} {s['bytes_per_step']:>11,}")
    print(f"\nconversion of the week (alter_table_set_access_method, then ANALYZE): {out['convert_seconds']} s")
    print(f"as the product defines the table: {out['refused']}\n")
    before, after = out["reads_before"], out["reads_after"]
    dropped = out["reads_dropped"]
    cols = ("cold as heap", "heap week", "cold columnar", "heap week", "heap week", "columnar/heap")
    width = max(len(n) for n in before)
    print(f"{'read, restricted to the week':<{width}}  " + "  ".join(f"{c:>15}" for c in cols))
    print(f"{'':<{width}}  {'(before)':>15}  {'(before)':>15}  {'(after)':>15}  {'(after)':>15}  "
          f"{'(cold dropped)':>15}")
    for name in before:
        cells = [before[name]["cold"], before[name]["hot"], after[name]["cold"], after[name]["hot"], dropped[name]]
        ratio = cells[2]["median_ms"] / cells[0]["median_ms"] if cells[0]["median_ms"] else float("nan")
        print(f"{name:<{width}}  " + "  ".join(f"{c['median_ms']:>8,.1f} ({c['p95_ms']:>4,.0f})" for c in cells)
              + f"  {ratio:>15.2f}")
    print("\nwhat the product does to a step of the columnar week:")
    for name, result in out["operations"].items():
        print(f"  {name:<66} {result}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1 = 10M steps / 500k tasks, as bench/run.py")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each read")
    parser.add_argument("--reload", action="store_true", help="load the dataset again even if it is there")
    parser.add_argument("--database", default=DB, help="the scratch database's name on the cluster")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "columnar.json"))
    args = parser.parse_args()
    harness.stop_on_signals()
    _, workers = cluster()
    project, load_s = dataset(args.scale, database=args.database, reload=args.reload)
    weeks = sorted(closed_weeks(project), key=lambda w: -w[3])[:2]
    if len(weeks) < 2:
        sys.exit("the dataset has fewer than two closed weeks: use --scale with 30 days of data")
    cold, hot = sorted(weeks, key=lambda w: w[1])  # the older is made columnar, as the upkeep would
    from django.db import connection

    from ingest import partitions

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [project.pk])
        steps = cursor.fetchone()[0]
        cursor.execute("SELECT amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.oid = %s::regclass",
                       [cold[0]])
        if cursor.fetchone()[0] != "heap":
            sys.exit(f"{cold[0]} is columnar already (an interrupted run): run again with --reload")
    out = {"scale": args.scale, "load_seconds": load_s, "workers": len(workers), "runs": args.runs,
           "steps": steps, "cold_week": cold[0], "hot_week": hot[0]}
    print(f"   weeks: {cold[0]} ({cold[3]:,} steps) to columnar, {hot[0]} ({hot[3]:,}) stays heap",
          file=sys.stderr, flush=True)
    out["refused"] = refused_as_defined(cold[0])
    out["size_before"], out["size_hot"] = size(cold[0], cold[3]), size(hot[0], hot[3])
    out["reads_before"] = _both(project, cold, hot, runs=args.runs)
    make_room([name for name, _, _ in partitions.partitions("ingest_step") if name != cold[0]])
    out["convert_seconds"] = convert(cold[0])
    print(f"   converted {cold[0]} in {out['convert_seconds']} s", file=sys.stderr, flush=True)
    out["size_after"] = size(cold[0], cold[3])
    out["reads_after"] = _both(project, cold, hot, runs=args.runs)
    out["operations"] = product_operations(project, cold=cold[1:3], hot=hot[1:3])
    out["operations"]["retention drops the week (partitions.drop_before)"] = retention_drops(cold[0], cold[2])
    # The heap week once more without the columnar week: what it costs the other weeks' reads.
    out["reads_dropped"] = time_reads(project, hot[1], hot[2], runs=args.runs)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2, default=str))
    print_tables(out)
    print(f"\nresults in {args.out}; the scratch database {args.database} has lost its columnar week: the next run "
          "loads again")


def _both(project, cold, hot, *, runs: int) -> dict:
    cold_reads = time_reads(project, cold[1], cold[2], runs=runs)
    hot_reads = time_reads(project, hot[1], hot[2], runs=runs)
    both = {name: {"cold": cold_reads[name], "hot": hot_reads[name]} for name in cold_reads}
    print(f"   {json.dumps(both)}", file=sys.stderr, flush=True)  # kept if the run is cut short
    return both


if __name__ == "__main__":
    main()
