"""Benchmark of the release comparison on two releases of a million tasks each.

    .venv/bin/python -m bench.release_compare [--tasks 1000000] [--keep] [--reuse] [--no-rollups]

Loads a scratch database `agentops_bench_releases` beside the product's (embedded Postgres or
DATABASE_URL; the product's own database is never touched) with generate_series: per release,
`--tasks` tasks of five task names, each an agent step wrapping an LLM call and two tool calls,
a TaskAnalysis (budget, what-if) per task and a finding on 5% of tasks (15% in r2). Release r2
makes the `search_inventory` tool twice as slow, like the simulator's v3. It builds the rollups
as of the newest task (unless --no-rollups: then "where it changed" samples raw steps), then
times `release_compare` computed twice (cold and warm database cache), per SQL query, plus the
figures and the releases list, and
checks that the comparison names `tool:search_inventory` first. The database is dropped at the
end unless --keep; --reuse skips the load when a previous --keep left one.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager

from bench import harness
from bench.harness import migrate, progress, setup_django

DB_NAME = "agentops_bench_releases"
CHUNK = 100_000
# (task name, its two tools, mean ms of llm, tool 1, tool 2)
SHAPES = [
    ("checkout-agent", "search_inventory", "reserve_item", 700, 250, 300),
    ("customer-support", "search_orders", "refund", 900, 150, 200),
    ("coding-agent", "run_tests", "read_file", 1500, 2500, 40),
    ("travel-planner", "search_inventory", "book_flight", 800, 250, 600),
    ("research-agent", "web_search", "fetch_page", 1200, 800, 600),
]


def scratch_url(*, fresh: bool) -> str:
    return harness.bench_database_url(fresh=fresh, name=DB_NAME)


def drop_scratch() -> None:
    harness.drop_database(DB_NAME)


def _shape_sql(column: int) -> str:
    """CASE over the task-name index `k` (0..4) picking one column of SHAPES."""
    whens = " ".join(f"WHEN {i} THEN " + (f"'{s[column]}'" if isinstance(s[column], str) else str(s[column]))
                     for i, s in enumerate(SHAPES))
    return f"(CASE k {whens} END)"


def load(cursor, *, project_id: int, release: str, tasks: int, slow_tool: str, slow_factor: float,
         finding_share: float, day: int) -> None:
    """`tasks` tasks of `release`, chunk by chunk, through an unlogged staging table that holds
    each task's step durations (lognormal: exp of a Box-Muller normal)."""
    name, tool1, tool2 = _shape_sql(0), _shape_sql(1), _shape_sql(2)
    llm_ms, tool1_ms, tool2_ms = _shape_sql(3), _shape_sql(4), _shape_sql(5)
    normal = "sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random())"
    cursor.execute("CREATE UNLOGGED TABLE IF NOT EXISTS bench_stage (g bigint, k int, name text, "
                   "tool1 text, tool2 text, llm float8, t1 float8, t2 float8, total float8, "
                   "started timestamptz)")
    for first in range(0, tasks, CHUNK):
        last = min(first + CHUNK, tasks)
        cursor.execute("TRUNCATE bench_stage")
        cursor.execute(f"""
            INSERT INTO bench_stage
            SELECT g, k, {name}, {tool1}, {tool2}, llm, t1, t2, llm + t1 + t2 + 25, started
            FROM (
                SELECT g, k, started,
                       {llm_ms} * exp(0.35 * {normal}) AS llm,
                       {tool1_ms} * exp(0.45 * {normal})
                           * (CASE WHEN {tool1} = %(slow)s THEN %(factor)s ELSE 1 END) AS t1,
                       {tool2_ms} * exp(0.45 * {normal})
                           * (CASE WHEN {tool2} = %(slow)s THEN %(factor)s ELSE 1 END) AS t2
                FROM (SELECT g, (g %% 5)::int AS k,
                             timestamptz '2026-10-01' + (%(day)s || ' days')::interval
                                 + (g::float8 / %(n)s) * interval '3 days' AS started
                      FROM generate_series(%(a)s, %(b)s - 1) g) s
            ) d""", {"slow": slow_tool, "factor": slow_factor, "day": day, "n": tasks,
                     "a": first, "b": last})
        cursor.execute("""
            INSERT INTO ingest_task (project_id, task_id, name, release, environment, session_id,
                started_at, ended_at, duration_ms, status, attributes, reported, step_count,
                input_tokens, output_tokens, error_count, last_event_at)
            SELECT %(p)s, %(r)s || '-' || g, name, %(r)s, 'production', '', started,
                   started + (total || ' milliseconds')::interval, total,
                   CASE WHEN g %% 100 = 0 THEN 'error' ELSE 'ok' END, '{}', true, 4, 1200, 150,
                   (g %% 100 = 0)::int, started
            FROM bench_stage""", {"p": project_id, "r": release})
        cursor.execute("""
            INSERT INTO ingest_step (project_id, task_id, step_id, parent_step_id, kind, name,
                started_at, ended_at, duration_ms, status, error, depends_on, attributes, events,
                model, provider, device, input_tokens, output_tokens, tool_name)
            SELECT t.project_id, t.id, x.step_id, x.parent, x.kind, x.name,
                   t.started_at + (x.offset_ms || ' milliseconds')::interval,
                   t.started_at + ((x.offset_ms + x.ms) || ' milliseconds')::interval, x.ms,
                   'ok', '', '{}', '{}', '[]', x.model, '', x.device, x.tin, x.tout, x.tool
            FROM bench_stage s
            JOIN ingest_task t ON t.project_id = %(p)s AND t.task_id = %(r)s || '-' || s.g
            CROSS JOIN LATERAL (VALUES
                ('agent', '', 'agent', s.name, 0.0, s.total - 25, '', '', NULL::int, NULL::int, ''),
                ('llm', 'agent', 'llm', 'chat', 0.0, s.llm, 'llama-3.1-70b',
                 CASE WHEN s.g %% 2 = 0 THEN 'groq-0' ELSE 'gpu-0' END, 1200, 150, ''),
                ('tool1', 'agent', 'tool', s.tool1, s.llm, s.t1, '', '', NULL, NULL, s.tool1),
                ('tool2', 'agent', 'tool', s.tool2, s.llm + s.t1, s.t2, '', '', NULL, NULL, s.tool2)
            ) x(step_id, parent, kind, name, offset_ms, ms, model, device, tin, tout, tool)""",
                       {"p": project_id, "r": release})
        cursor.execute("""
            INSERT INTO analysis_taskanalysis (task_id, project_id, analyzed_at, claim_token,
                critical_path, budget, whatif, wasted_ms, top_finding, finding_kinds)
            SELECT t.id, t.project_id, now(), '', '{}',
                   jsonb_build_object('prefill', s.llm * 0.3, 'decode', s.llm * 0.7,
                                      'tool', s.t1 + s.t2, 'framework', 25),
                   jsonb_build_object('actual_ms', s.total, 'cached_ms', s.total,
                                      'hardware', jsonb_build_object('groq', jsonb_build_object(
                                          'ms', s.total - s.llm * 0.6, 'llm_ms', s.llm * 0.4,
                                          'with_fixes_ms', s.total - s.llm * 0.6))),
                   0, '', '{}'
            FROM bench_stage s
            JOIN ingest_task t ON t.project_id = %(p)s AND t.task_id = %(r)s || '-' || s.g""",
                       {"p": project_id, "r": release})
        cursor.execute("""
            INSERT INTO analysis_finding (project_id, task_id, kind, step_ids, wasted_ms, severity,
                summary, evidence, task_started_at, release, created_at)
            SELECT t.project_id, t.id, 'repeated_tool_call', '{tool1}', s.t1, 'medium',
                   'tool called twice', '{}', t.started_at, %(r)s, now()
            FROM bench_stage s
            JOIN ingest_task t ON t.project_id = %(p)s AND t.task_id = %(r)s || '-' || s.g
            WHERE random() < %(share)s""", {"p": project_id, "r": release, "share": finding_share})
        progress(f"load {release}", last, tasks)
    cursor.execute("DROP TABLE bench_stage")


@contextmanager
def query_timer(log: list):
    from django.db import connection

    def wrapper(execute, sql, params, many, context):
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            log.append((time.perf_counter() - start, " ".join(sql.split())[:90]))

    with connection.execute_wrapper(wrapper):
        yield


def measure(project, *, a: str, b: str) -> dict:
    from django.core.cache import cache

    from analysis.releases import charts
    from analysis.releases.compare import release_compare, release_list

    timings = {}
    for run in ("cold", "warm"):
        cache.clear()  # computed both times: a finished comparison is cached
        queries: list = []
        start = time.perf_counter()
        with query_timer(queries):
            comparison = release_compare(project=project, a=a, b=b)
        timings[f"release_compare ({run})"] = time.perf_counter() - start
        if run == "warm":
            print("\nSQL of the warm run (seconds):")
            for seconds, sql in sorted(queries, reverse=True)[:8]:
                print(f"  {seconds:7.3f}  {sql}")
    start = time.perf_counter()
    series = [("a", a, comparison.durations[a]), ("b", b, comparison.durations[b])]
    charts.ecdf_figure(series)
    charts.histogram_figure(series)
    timings["figures"] = time.perf_counter() - start
    from analysis.releases.serializers import ReleaseComparisonSerializer

    start = time.perf_counter()
    ReleaseComparisonSerializer(comparison.report).data  # noqa: B018 (the API's serialisation)
    timings["API JSON serialisation"] = time.perf_counter() - start
    start = time.perf_counter()
    release_list(project=project)
    timings["release_list"] = time.perf_counter() - start
    report = comparison.report
    print("\nTimings (seconds):")
    for label, seconds in timings.items():
        print(f"  {label:<28} {seconds:7.2f}")
    print("\nVerdicts:")
    for row in [*report["tasks"], report["overall"]]:
        p95 = next(p for p in row["percentiles"] if p["q"] == 95)
        print(f"  {row['name'] or '(all tasks)':<18} n={row['n_a']}/{row['n_b']} p95 "
              f"{p95['a_ms']:.0f} → {p95['b_ms']:.0f} ms CI [{p95['ci_low_ms']:.1f}, "
              f"{p95['ci_high_ms']:.1f}]  {row['label']}")
    top = report["attribution"]["steps"][0]
    print(f"\nTop attribution row: {top['key']} ({top['contribution_ms']:+.0f} ms per task; sample "
          f"{report['attribution']['sample']['tasks_a']}/{report['attribution']['sample']['tasks_b']} tasks)")
    return {"timings": timings, "top": top["key"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1_000_000, help="tasks per release")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--reuse", action="store_true", help="reuse a kept scratch database")
    parser.add_argument("--no-rollups", action="store_true",
                        help="leave the rollups out: 'where it changed' samples raw steps")
    args = parser.parse_args(argv)
    url = scratch_url(fresh=not args.reuse)
    setup_django(url)
    from django.db import connection

    from ingest.models import Project, Release

    try:
        if not args.reuse or not Project.objects.filter(name="bench").exists():
            migrate()
            project = Project.objects.create(name="bench")
            start = time.perf_counter()
            with connection.cursor() as cursor:
                for day, (release, factor, share) in enumerate((("r1", 1.0, 0.05), ("r2", 2.0, 0.15))):
                    load(cursor, project_id=project.pk, release=release, tasks=args.tasks,
                         slow_tool="search_inventory", slow_factor=factor, finding_share=share,
                         day=3 * day)
                    Release.objects.create(project=project, name=release,
                                           first_seen=f"2026-10-{1 + 3 * day:02d}T00:00:00Z",
                                           last_seen=f"2026-10-{4 + 3 * day:02d}T00:00:00Z")
                cursor.execute("VACUUM ANALYZE ingest_task")
                cursor.execute("VACUUM ANALYZE ingest_step")
                cursor.execute("VACUUM ANALYZE analysis_taskanalysis")
                cursor.execute("VACUUM ANALYZE analysis_finding")
            print(f"loaded 2 × {args.tasks:,} tasks, {8 * args.tasks:,} steps in "
                  f"{time.perf_counter() - start:.0f} s")
        project = Project.objects.get(name="bench")
        from analysis import rollups

        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE analysis_rollup_state, " + ", ".join(rollups.TABLES))
        if not args.no_rollups:  # as an operator would after a backfill, as of the newest task
            start = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute("SELECT max(started_at) FROM ingest_task WHERE project_id = %s", [project.pk])
                newest = cursor.fetchone()[0]
            rollups.rollups_rebuild(now=newest)
            print(f"rollups_rebuild: {time.perf_counter() - start:.0f} s")
        result = measure(project, a="r1", b="r2")
        ok = result["top"] == "tool:search_inventory"
        print("\nOK: the top row names the slowed tool" if ok else "\nFAIL: wrong top row")
        return 0 if ok else 1
    finally:
        if not args.keep:
            drop_scratch()


if __name__ == "__main__":
    sys.exit(main())
