"""Reads behind "why was this one slow": a task's steps as `runs.DStep` rows, the recent runs its
typical profile is built from (cached), the hardware verdicts of its findings, and the two
comparisons the API and the pages serve (`task_diff`). The maths is in runs.py,
alignment.py, typical_run.py and explanation.py (pure).

Which runs make the typical run of a task name: its newest TYPICAL_RUNS ended, successful
runs of the same release; when the release has fewer than MIN_RUNS of them (a new release),
the newest runs of any release in the baseline window (the 7 days before the newest one,
docs/analysis.md "Baselines"). MIN_RUNS is the baselines' minimum: under 20 runs a median is
too loose to call anything typical. Runs of more than MAX_RUN_STEPS steps are left out (a giant
run is not typical, and one would cost more than the other 199), and reading stops at
MAX_PROFILE_STEPS steps. The explained task is among its own typical runs when it is recent:
with 200 runs, one changes no median. A profile is cached (the shared cache, so every web
process sees it) under the ids and last events of its runs: a new run or a late step of one
makes a new key.
"""

from __future__ import annotations

import gc
import hashlib
from datetime import timedelta

from django.core.cache import cache

from agentops.db import read_connection
from analysis.comparison import typical_run
from analysis.comparison.explanation import Explanation, explain
from analysis.comparison.runs import DStep, Run
from analysis.models import Finding
from ingest.conventions import SERVING_KEY
from ingest.models import Project, Task

TYPICAL_RUNS = 200
MIN_RUNS = 20
MAX_RUN_STEPS = 2000
MAX_PROFILE_STEPS = 40_000
BASELINE_WINDOW = timedelta(days=7)
CACHE_SECONDS = 600
# Part of the cache key: bump it when the profile's method changes, so no process reads a
# profile an older method built.
PROFILE_VERSION = 4  # 4: without inference servers' own spans (a phase of the client call)
# Bounds on a step's start around its task's start and end, so the step reads skip the weekly
# partitions no run touches (a step may start a little before its task's reported start).
STEP_SLACK = timedelta(days=1)


class DiffError(ValueError):
    """A comparison that cannot be made; the message says why (the API answers 400)."""


_STEP_SQL = (
    "SELECT s.task_id, s.step_id, s.parent_step_id, s.kind, s.name,"
    " (extract(epoch FROM s.started_at - t.started_at) * 1000)::float8,"
    " (extract(epoch FROM s.ended_at - t.started_at) * 1000)::float8,"
    " s.status, s.model, s.device, s.ttft_ms, s.tool_name, ''"
    " FROM ingest_step s JOIN ingest_task t ON t.id = s.task_id AND t.project_id = s.project_id"
    " WHERE s.project_id = %s AND s.task_id = ANY(%s) AND s.started_at >= %s AND s.started_at <= %s"
    # An inference server's own request span (vLLM llm_request) is a phase of the client call it
    # serves, whose duration holds it: never a step of its own to compare.
    f" AND (s.kind <> 'other' OR NOT s.attributes ? '{SERVING_KEY}')")


def _runs(tasks: list[Task]) -> dict[int, Run]:
    """The steps of these tasks (times since each task's start) as runs, in one query per project
    (one: the runs compared are of one project), which names it so that a Citus cluster reads
    them on the project's worker."""
    tasks = [t for t in tasks if t.started_at is not None]
    if not tasks:
        return {}
    low = min(t.started_at for t in tasks) - STEP_SLACK
    high = max(t.ended_at or t.last_event_at or t.started_at for t in tasks) + STEP_SLACK
    steps: dict[int, list[DStep]] = {t.pk: [] for t in tasks}
    with read_connection().cursor() as cur:
        for project_id in sorted({t.project_id for t in tasks}):
            cur.execute(_STEP_SQL, [project_id, [t.pk for t in tasks if t.project_id == project_id], low, high])
            for row in cur.fetchall():
                steps[row[0]].append(DStep._make(row[1:]))
    out = {}
    for t in tasks:
        rows = steps[t.pk]
        # A running task has no duration yet: up to its last step's end.
        duration = t.duration_ms if t.duration_ms is not None else max((s.end_ms for s in rows), default=0.0)
        out[t.pk] = Run(t.task_id, duration, rows)
    return out


def task_run(*, task: Task) -> Run:
    return _runs([task])[task.pk]


def step_verdicts(*, task: Task) -> tuple[dict[str, str], set[str]]:
    """Per LLM step, why its finding says it was slow: the hardware verdict (`queueing`,
    `throttling`, `prefill_bound`, `nominal`) or `context growth`; and the calls that repeat an
    earlier one (the repeated_tool_call findings: every step of one but the first)."""
    out: dict[str, str] = {}
    repeats: set[str] = set()
    order = {"hardware_queueing": 0, "hardware_throttling": 0, "hardware_kv_cache_pressure": 0, "slow_step": 1, "context_growth": 2}
    findings = sorted(Finding.objects.filter(project_id=task.project_id, task=task).only("kind", "step_ids", "evidence"),
                      key=lambda f: order.get(f.kind, 3))
    for f in findings:
        if f.kind == "repeated_tool_call":
            repeats.update(f.step_ids[1:])
            continue
        verdict = "context growth" if f.kind == "context_growth" else (
            f.evidence.get("verdict") if isinstance(f.evidence, dict) else None)
        if isinstance(verdict, str) and verdict:
            for step_id in f.step_ids:
                out.setdefault(step_id, verdict)
    return out, repeats


def typical_runs(*, project: Project, name: str, release: str) -> tuple[list[Task], str]:
    """The runs a typical profile of `name` is built from, and the scope: "release" or "window"."""
    base = (Task.objects.filter(project=project, name=name, status=Task.STATUS_OK, started_at__isnull=False,
                                ended_at__isnull=False, duration_ms__isnull=False, step_count__gt=0,
                                step_count__lte=MAX_RUN_STEPS)
            .only("pk", "project_id", "task_id", "started_at", "ended_at", "duration_ms", "step_count", "last_event_at")
            .order_by("-started_at"))
    runs, scope = list(base.filter(release=release)[:TYPICAL_RUNS]), "release"
    if len(runs) < MIN_RUNS:
        newest = base.first()
        if newest is None:
            return [], scope
        runs = list(base.filter(started_at__gte=newest.started_at - BASELINE_WINDOW)[:TYPICAL_RUNS])
        scope = "window"
    kept, steps = [], 0
    for run in runs:
        if steps + run.step_count > MAX_PROFILE_STEPS:
            break
        kept.append(run)
        steps += run.step_count
    return kept, scope


def typical_profile(*, project: Project, name: str, release: str) -> tuple[typical_run.Typical | None, str]:
    """The typical run of `name` (in `release`), or None and why there is none."""
    if not name:
        return None, "the task has no name, so it has no typical run"
    runs, scope = typical_runs(project=project, name=name, release=release)
    if len(runs) < MIN_RUNS:
        return None, f"only {len(runs)} finished runs of {name} to compare with (a typical run needs {MIN_RUNS})"
    version = hashlib.sha256("|".join(f"{r.pk}:{r.last_event_at.isoformat()}" for r in runs).encode()).hexdigest()
    key = f"agentops:typical:v{PROFILE_VERSION}:{project.pk}:{version}"
    found = cache.get(key)
    if found is None:
        loaded = _runs(runs)
        found = typical_run.typical_profile([loaded[r.pk] for r in runs], name=name, release=release, scope=scope)
        cache.set(key, found, CACHE_SECONDS)
    return found, ""


def task_diff(*, project: Project, task: Task, against: str) -> Explanation:
    """The task against `against`: "typical" or another task id of the same project. Raises
    DiffError when there is nothing to compare with (the message says why)."""
    if against == "typical":
        typical, reason = typical_profile(project=project, name=task.name, release=task.release)
        if typical is None:
            raise DiffError(reason)
        verdicts, repeats = step_verdicts(task=task)
        return explain(task_run(task=task), typical, verdicts=verdicts, repeats=repeats)
    other = Task.objects.filter(project=project, task_id=against).first()
    if other is None or other.started_at is None:
        raise LookupError(against)
    runs = _runs([task, other])
    reference = typical_run.task_as_typical(runs[other.pk], name=other.name, release=other.release)
    verdicts, repeats = step_verdicts(task=task)
    return explain(runs[task.pk], reference, verdicts=verdicts, repeats=repeats)


def diff_payload(*, project: Project, task: Task, against: str, rows: bool = True) -> dict:
    """`task_diff` as JSON data: `available` false with the reason when there is nothing to
    compare with. Raises LookupError when `against` names no task of the project."""
    from analysis.filters import task_is_running

    try:
        # Tens of thousands of small tuples, none of them cyclic: the cyclic collector's passes
        # over a growing heap were a third of a 10,000-step pair's time.
        gc.disable()
        try:
            explanation = task_diff(project=project, task=task, against=against)
        finally:
            gc.enable()
    except DiffError as exc:
        return {"task_id": task.task_id, "against": against, "available": False, "reason": str(exc)}
    return {"available": True, "running": task_is_running(task), **explanation.as_dict(rows=rows)}
