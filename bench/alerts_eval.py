"""Alert evaluation time per rule on a large table (outside the test suite).

    .venv/bin/python -m bench.alerts_eval                  # 1M tasks × 10 steps = 10M steps
    .venv/bin/python -m bench.alerts_eval --reuse          # skip the load, time again
    .venv/bin/python -m bench.alerts_eval --tasks 100000   # a quicker, smaller run

Loads a scratch database `agentops_bench_alerts` (never the product's) with bench.loader —
30 days of traffic, so a 10-minute window holds ~230 tasks and ~2,300 steps of the 10M — plus findings
on 5% of tasks, creates one rule per metric in the shapes the issue asks for, and times a full
evaluation of each (measure, baseline if any, state update, history), repeated, median and
max. Prints the plan of each metric query, so an index (not a full scan) can be checked."""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

from bench import harness

DB_NAME = "agentops_bench_alerts"

RULES = [
    ("checkout p95 over 5 s", "task_duration_p95", 5000,
     {"task_name": "checkout-agent", "environment": "production"}, "none", ""),
    ("all tasks p99", "task_duration_p99", 9000, {}, "none", ""),
    ("chat step p99", "step_duration_p99", 3000, {"step_kind": "llm", "step_name": "chat"}, "none", ""),
    ("groq TTFT p99 doubled", "ttft_p99", 100, {"device": "groq-0"}, "previous_week", ""),
    ("llama-8b TPOT p95", "tpot_p95", 50, {"model": "llama-3.1-8b"}, "none", ""),
    ("error rate over 5%", "error_rate", 5, {}, "none", ""),
    ("repeated tool calls over 5% of tasks", "finding_rate", 5, {}, "none", ""),
    ("wasted share over 20%", "wasted_share", 20, {"release": "v3"}, "none", ""),
    ("v3 p95 vs v2 +20%", "task_duration_p95", 20, {"release": "v3"}, "release", "v2"),
    # The worst case: a step metric against a release baseline reads 7 days of that release's
    # steps (the baseline window), joined to their tasks.
    ("v3 chat p99 vs v2 (worst case)", "step_duration_p99", 20, {"release": "v3", "step_name": "chat"},
     "release", "v2"),
]


def load(cursor, project_id: int, tasks: int) -> None:
    from bench import loader

    started = time.perf_counter()
    counts = loader.load(cursor, project_id=project_id, tasks=tasks, steps_per_task=10, big_task_steps=0)
    cursor.execute("""
        INSERT INTO analysis_finding (project_id, task_id, kind, step_ids, wasted_ms, severity, summary,
                                      evidence, task_started_at, release, created_at)
        SELECT project_id, id, 'repeated_tool_call', '{s1}', duration_ms * 0.2, 'medium', 'repeat', '{}',
               started_at, release, now()
        FROM ingest_task WHERE project_id = %s AND id %% 20 = 0
    """, [project_id])
    cursor.execute("ANALYZE analysis_finding")
    print(f"loaded {counts['tasks']:,} tasks, {counts['steps']:,} steps in {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true", help="keep the loaded database")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    harness.BENCH_DB = DB_NAME
    url = harness.bench_database_url(fresh=not args.reuse)
    harness.setup_django(url)
    if not args.reuse:
        harness.migrate()

    from django.db import connection

    from analysis.alerts.evaluation import rule_spec, rules_evaluate
    from analysis.alerts.metrics import measure
    from analysis.alerts.models import AlertRule
    from ingest.models import Project

    project, created = Project.objects.get_or_create(name="bench")
    if created or not args.reuse:
        with connection.cursor() as cursor:
            load(cursor, project.pk, args.tasks)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_step")
        steps = cursor.fetchone()[0]
    AlertRule.objects.filter(project=project).delete()
    rules = [AlertRule.objects.create(project=project, name=name, metric=metric, threshold=threshold,
                                      filters=filters, baseline=baseline, baseline_release=base_release,
                                      finding_kind="repeated_tool_call" if metric == "finding_rate" else "",
                                      window_minutes=10, min_samples=20, for_minutes=10)
             for name, metric, threshold, filters, baseline, base_release in RULES]

    print(f"\n{steps:,} steps in ingest_step; window 10 min; {args.runs} runs per rule\n")
    print(f"{'rule':<40} {'metric':<18} {'median ms':>10} {'max ms':>8} {'samples':>8}")
    all_seconds = []
    for rule in rules:
        samples = []
        for _ in range(args.runs + 1):
            AlertRule.objects.filter(pk=rule.pk).update(last_evaluated_at=None)  # not a duplicate tick
            samples += rules_evaluate(now=datetime.now(tz=UTC), rule_ids=[rule.pk], deliver=False)["seconds"]
        samples = samples[1:]  # the first run warms the cache, as the minute before would have
        all_seconds += samples
        rule.refresh_from_db()
        print(f"{rule.name:<40} {rule.metric:<18} {1000 * statistics.median(samples):>10.1f} "
              f"{1000 * max(samples):>8.1f} {rule.last_sample_count or 0:>8}")
    print(f"\nall rules: median {1000 * statistics.median(all_seconds):.1f} ms, "
          f"max {1000 * max(all_seconds):.1f} ms per rule evaluation")

    print("\nquery plans (the window's rows through an index, never a full scan):")
    now = datetime.now(tz=UTC)
    for rule in rules[:5]:
        with connection.execute_wrapper(_explain):
            measure(project=project, spec=rule_spec(rule), start=now - timedelta(minutes=10), end=now)


def _explain(execute, sql, params, many, context):
    if sql.lstrip().upper().startswith("SELECT"):
        cursor = context["cursor"]
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
        plan = [row[0] for row in cursor.fetchall()]
        scans = [line.strip() for line in plan if "Scan" in line]
        timing = [line.strip() for line in plan if line.strip().startswith("Execution Time")]
        print("  " + " | ".join(scans[:3]) + "  — " + (timing[0] if timing else ""))
    return execute(sql, params, many, context)


if __name__ == "__main__":
    main()
