"""One huge task against the analysis pool (issue #39 item 4): how long a task of N steps takes to
analyse and the peak RSS of the process that analyses it, and how long another project's 2-step
task waits for its analysis meanwhile, with a real Celery worker of 2 processes.

    .venv/bin/python bench/huge_task.py --steps 200000            # analysis time and peak RSS
    .venv/bin/python bench/huge_task.py --steps 200000 --lag      # + the other project's lag

Runs on a scratch database beside the product's (bench/harness.py), dropped at the end. The task is
written by one INSERT … SELECT over generate_series (`insert_huge_task`, also the tests' factory):
a root agent step, then turns of an LLM call requesting two tool calls, a search whose result feeds
a fetch, and a framework step, with repeated search arguments and an idle gap every turn."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402

# The generated task's turns: an LLM call, `calls` pairs of (search, fetch) one after another, a
# framework step, then an idle gap; each call CALL_MS apart.
CALL_MS = 150
GAP_MS = 600


def insert_huge_task(project, task_id: str, *, steps: int, calls: int = 1, start: datetime | None = None,
                     last_event_at: datetime | None = None):
    """A task of about `steps` steps (1 + (2 + 2 × calls) × turns) stored with a handful of INSERT …
    SELECT statements, ended and quiet (due now unless `last_event_at` says otherwise). `calls`: the
    tool calls each model turn requests, in pairs (a large value makes one flat turn of a batch job)."""
    from django.db import connection

    from ingest.models import Task

    per_turn = 2 + 2 * calls
    turns = max(1, (steps - 1) // per_turn)
    turn_ms = 400 + calls * CALL_MS + GAP_MS
    start = start or datetime.now(UTC) - timedelta(milliseconds=turns * turn_ms + 60_000)
    end = start + timedelta(milliseconds=turns * turn_ms)
    task = Task.objects.create(
        project=project, task_id=task_id, name="huge agent", release="v1", environment="prod", status="ok",
        started_at=start, ended_at=end, duration_ms=turns * turn_ms, reported=True,
        last_event_at=last_event_at or datetime.now(UTC) - timedelta(seconds=60), step_count=1 + per_turn * turns)
    common = ("project_id, task_id, status, error, depends_on, attributes, events, provider, device, step_id,"
              " parent_step_id, kind, name, started_at, ended_at, duration_ms, model, input_tokens, output_tokens,"
              " ttft_ms, tool_name, tool_args, tool_result, tool_call_id, tool_call_ids")
    fixed = "%(project)s, %(task)s, 'ok', '', '{}', '{}', '[]', '', ''"
    params = {"project": project.pk, "task": task.pk, "start": start, "end": end, "turns": turns,
              "calls": calls, "turn_ms": turn_ms, "call_ms": CALL_MS, "total": turns * turn_ms}
    at = "%(start)s + make_interval(secs => (k * %(turn_ms)s + {ms}) / 1000.0)"
    call = "200 + j * %(call_ms)s"
    series = "generate_series(0, %(turns)s - 1) k"
    calls_series = series + ", generate_series(0, %(calls)s - 1) j"
    # (step id, kind, name, start and end ms in the turn, duration, model columns, tool columns, rows)
    shapes = [
        ("'l' || k", "'llm'", "'chat'", "0", "190", 190,
         "'m-huge', 400 + k %% 200, 20, 50.0", "'', NULL, '', '', ARRAY['ca' || k || '.0', 'cb' || k || '.0']", series),
        ("'a' || k || '.' || j", "'tool'", "'search'", call, f"{call} + 90", 90,
         "'', NULL, NULL, NULL",
         "'search', jsonb_build_object('q', (k + j) %% 50), '{\"id\": \"ID' || k || 'X' || j || '\"}',"
         " 'ca' || k || '.' || j, '{}'", calls_series),
        ("'b' || k || '.' || j", "'tool'", "'fetch'", f"{call} + 90", f"{call} + 140", 50,
         "'', NULL, NULL, NULL",
         "'fetch', jsonb_build_object('id', 'ID' || k || 'X' || j), 'ok', 'cb' || k || '.' || j, '{}'", calls_series),
        ("'f' || k", "'framework'", "'format'", "200 + %(calls)s * %(call_ms)s",
         "250 + %(calls)s * %(call_ms)s", 50, "'', NULL, NULL, NULL", "'', NULL, '', '', '{}'", series),
    ]
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO ingest_step ({common}) SELECT {fixed}, 'root', '', 'agent', 'huge agent',"
                    " %(start)s, %(end)s, %(total)s, '', NULL, NULL, NULL, '', NULL, '', '', '{}'", params)
        for sid, kind, name, lo, hi, ms, model, tool, rows in shapes:
            cur.execute(
                f"INSERT INTO ingest_step ({common}) SELECT {fixed}, {sid}, 'root', {kind}, {name},"
                f" {at.format(ms=lo)}, {at.format(ms=hi)}, {float(ms)}, {model}, {tool} FROM {rows}", params)
    return task


def child_analyse(task_pk: int) -> None:
    """In a fresh process: analyse the task as a worker would (a batch of one), print the figures."""
    from analysis.engine import pipeline
    from analysis.models import TaskAnalysis

    started = time.monotonic()
    outcome = pipeline.run(task_pk, force=True)
    seconds = time.monotonic() - started
    row = TaskAnalysis.objects.filter(task_id=task_pk).values("finding_kinds", "wasted_ms").first() or {}
    limited = getattr(TaskAnalysis, "limited", None)
    print(json.dumps({"outcome": outcome, "seconds": round(seconds, 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                      "finding_kinds": row.get("finding_kinds"),
                      "limited": None if limited is None else TaskAnalysis.objects.get(task_id=task_pk).limited}))


def start_worker(url: str, concurrency: int = 2) -> subprocess.Popen:
    env = {**harness.bench_env(url), "AGENTOPS_ANALYSIS_QUIET_SECONDS": "1", "LOG_LEVEL": "INFO"}
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "prefork", "--concurrency",
         str(concurrency), "-Q", harness.BENCH_QUEUE, "--without-gossip", "--without-mingle", "--without-heartbeat",
         "-l", "info"], cwd=harness.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)


def lag(url: str, huge_pk: int, project, other) -> dict:
    """With the huge task's analysis running on a 2-process worker, the other project's 2-step task:
    seconds from due (ended + quiet) to analysed."""
    from analysis.engine.tasks import analyse_tasks
    from analysis.models import TaskAnalysis
    from ingest.records import Batch, StepRecord, TaskRecord
    from ingest.services import batch_store

    worker = start_worker(url)
    try:
        analyse_tasks.apply_async(args=[[huge_pk]], kwargs={"project_id": project.pk})
        deadline = time.monotonic() + 120
        while not TaskAnalysis.objects.filter(task_id=huge_pk).exclude(claim_token__in=["", "queued"]).exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the huge task was never claimed")
            time.sleep(0.2)
        time.sleep(5)  # well into its analysis
        now = datetime.now(UTC)
        batch_store(project=other, batch=Batch(
            tasks=[TaskRecord("small", name="small", started_at=now - timedelta(seconds=2), ended_at=now, status="ok")],
            steps=[StepRecord("s1", "small", now - timedelta(seconds=2), now - timedelta(seconds=1), kind="llm",
                              name="chat", model="m"),
                   StepRecord("s2", "small", now - timedelta(seconds=1), now, kind="tool", name="t", tool_name="t")]))
        due = time.monotonic() + 1  # the quiet period
        deadline = time.monotonic() + 900
        while not TaskAnalysis.objects.filter(task__project=other, task__task_id="small",
                                              analyzed_at__isnull=False).exists():
            if time.monotonic() > deadline:
                return {"other_task_lag_s": None, "note": "not analysed within 900 s"}
            time.sleep(0.2)
        waited = time.monotonic() - due
        huge = TaskAnalysis.objects.filter(task_id=huge_pk).values("analyzed_at", "claim_token").first()
        return {"other_task_lag_s": round(waited, 1), "huge_done_by_then": bool(huge and huge["analyzed_at"])}
    finally:
        harness.stop_process(worker, grace=30, group=True)
        harness.purge_bench_queue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=1, help="tool-call pairs per model turn")
    parser.add_argument("--lag", action="store_true", help="also the other project's task's lag, a worker running")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        harness.setup_django(os.environ["DATABASE_URL"])
        child_analyse(args.child)
        return
    harness.stop_on_signals()
    try:
        with harness.embedded_services():
            url = harness.bench_database_url(name="agentops_bench_huge")
            harness.setup_django(url)
            harness.migrate()
            try:
                (project, _), (other, _) = harness.projects_create(["huge", "other"])
                started = time.monotonic()
                task = insert_huge_task(project, "huge-1", steps=args.steps, calls=args.calls)
                built = time.monotonic() - started
                out = subprocess.run([sys.executable, __file__, "--child", str(task.pk)], env=harness.bench_env(url),
                                     cwd=harness.ROOT, stdout=subprocess.PIPE, text=True, check=True)
                result = {"steps": task.step_count, "build_s": round(built, 1),
                          **json.loads(out.stdout.strip().splitlines()[-1])}
                if args.lag:
                    from analysis.models import TaskAnalysis

                    TaskAnalysis.objects.filter(task=task).delete()
                    result.update(lag(url, task.pk, project, other))
                print(json.dumps(result))
            finally:
                harness.drop_database("agentops_bench_huge")
    except KeyboardInterrupt as exc:
        harness.exit_interrupted("huge_task", exc)


if __name__ == "__main__":
    main()
