"""Benchmark of the dashboard queries the latency rollups serve, before and after.

    .venv/bin/python -m bench.rollups [--tasks 500000] [--steps 20] [--reuse] [--keep]

Loads a scratch database `agentops_bench_rollups` beside the product's (never the product's own)
with bench/loader.py (`--tasks` tasks × `--steps` steps over 30 days, 3 releases), then times each
dashboard selector and the releases list twice: on raw rows (rollups not built: every selector
falls back to the exact SQL) and after `rollups_rebuild` (whole hours from the rollup tables,
only the fresh tail from raw rows). Prints median and p95 of 5 warm runs each, the rebuild time
and the largest relative difference between the two answers' percentiles.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench import harness
from bench.harness import migrate, setup_django

DB_NAME = "agentops_bench_rollups"


def scratch_url(*, fresh: bool) -> str:
    return harness.bench_database_url(fresh=fresh, name=DB_NAME)


def drop_scratch() -> None:
    harness.drop_database(DB_NAME)


def suite(project) -> dict:
    from analysis.dashboard import aggregates
    from analysis.filters import TaskFilters
    from analysis.releases.compare import release_list

    f = TaskFilters()
    v2 = TaskFilters(release="v2")
    return {
        "overview totals (all time)": lambda: aggregates.overview_totals(project=project, filters=f),
        "overview series (all time)": lambda: aggregates.overview_series(project=project, filters=f),
        "overview series (v2)": lambda: aggregates.overview_series(project=project, filters=v2),
        "top findings (all time)": lambda: aggregates.top_findings(project=project, filters=f),
        "budget by release (all time)": lambda: aggregates.budget_by_release(project=project, filters=f),
        "latency: task percentiles": lambda: aggregates.duration_percentiles(project=project, filters=f),
        "latency: task histogram": lambda: aggregates.duration_histogram(project=project, filters=f),
        "latency: task ECDF": lambda: aggregates.duration_quantiles(project=project, filters=f),
        "latency: steps by kind": lambda: aggregates.duration_percentiles(project=project, filters=f,
                                                                          group_by="kind"),
        "latency: steps by model (v2)": lambda: aggregates.duration_percentiles(
            project=project, filters=v2, group_by="model"),
        "latency: step histogram (all)": lambda: aggregates.duration_histogram(
            project=project, filters=f, group_by="kind"),
        "latency: step ECDF by kind": lambda: aggregates.duration_quantiles(
            project=project, filters=f, group_by="kind", groups=["llm", "tool", "retrieval", "framework"]),
        "releases list": lambda: release_list(project=project),
    }


def timed(fn, runs: int = 5) -> tuple[dict, object]:
    """bench.queries.timed's figures, and the query's answer (to compare raw with rolled up)."""
    from bench.queries import timed as figures

    return figures(fn, runs=runs), fn()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=500_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--load-only", action="store_true")
    args = parser.parse_args(argv)
    url = scratch_url(fresh=not args.reuse)
    setup_django(url)
    migrate()
    from django.core.management import call_command
    from django.db import connection

    from analysis import rollups
    from bench import loader
    from ingest.models import Project, Release

    try:
        project = Project.objects.filter(name="bench").first()
        if project is None:
            project = Project.objects.create(name="bench")
            started = time.perf_counter()
            with connection.cursor() as cursor:
                counts = loader.load(cursor, project_id=project.pk, tasks=args.tasks,
                                     steps_per_task=args.steps, big_task_steps=0)
                if hasattr(loader, "decorate"):  # analyses and findings, when the loader has them
                    loader.decorate(cursor, project_id=project.pk)
                for name in loader.RELEASES:
                    Release.objects.get_or_create(project=project, name=name, defaults={
                        "first_seen": "2026-10-01T00:00:00Z", "last_seen": "2026-10-01T00:00:00Z"})
                cursor.execute("VACUUM ANALYZE ingest_task")
                cursor.execute("VACUUM ANALYZE ingest_step")
            print(f"loaded {counts} in {time.perf_counter() - started:.0f} s", flush=True)
        if args.load_only:
            return 0
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE analysis_rollup_state, " + ", ".join(rollups.TABLES))
        before = {}
        print("\nraw rows (no rollups)", flush=True)
        for name, fn in suite(project).items():
            before[name] = timed(fn)
            print(f"  {before[name][0]['median_ms']:8.0f} ms median {before[name][0]['p95_ms']:8.0f} ms max  {name}",
                  flush=True)
        started = time.perf_counter()
        call_command("rollups_rebuild", verbosity=0)
        print(f"\nrollups_rebuild: {time.perf_counter() - started:.1f} s", flush=True)
        started = time.perf_counter()
        rollups.rollups_refresh()
        print(f"rollups_refresh with nothing changed: {1000 * (time.perf_counter() - started):.0f} ms")
        print("\nwith rollups", flush=True)
        for name, fn in suite(project).items():
            after = timed(fn)
            print(f"  {after[0]['median_ms']:8.0f} ms median {after[0]['p95_ms']:8.0f} ms max  {name}"
                  f"   (was {before[name][0]['median_ms']:.0f} ms; max rel. diff "
                  f"{_max_diff(before[name][1], after[1]):.2%})", flush=True)
        return 0
    finally:
        if not args.keep:
            drop_scratch()


def _numbers(value, out):
    if isinstance(value, bool) or value is None:
        return out
    if isinstance(value, (int, float)):
        out.append(float(value))
    elif isinstance(value, dict):
        for v in value.values():
            _numbers(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _numbers(v, out)
    elif hasattr(value, "_asdict"):
        _numbers(value._asdict(), out)
    elif hasattr(value, "__dataclass_fields__"):
        _numbers({k: getattr(value, k) for k in value.__dataclass_fields__}, out)
    return out


def _max_diff(a, b) -> float:
    """Largest relative difference between the numbers of two answers of the same shape."""
    xs, ys = _numbers(a, []), _numbers(b, [])
    if len(xs) != len(ys):
        return float("nan")
    return max((abs(x - y) / max(abs(x), 1e-9) for x, y in zip(xs, ys, strict=True)), default=0.0)


if __name__ == "__main__":
    sys.exit(main())
