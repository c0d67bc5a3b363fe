"""Rows for dashboard tests, created directly (the analysis engine is tested elsewhere)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from analysis.models import Finding, TaskAnalysis
from ingest.models import Release, Step, Task

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def make_task(project, task_id, *, duration_ms=1000.0, release="v1", status="ok", start=None, name="checkout",
              environment="prod", **extra) -> Task:
    start = start or T0
    Release.objects.get_or_create(project=project, name=release, defaults={"first_seen": start, "last_seen": start})
    return Task.objects.create(
        project=project, task_id=task_id, name=name, release=release, environment=environment, status=status,
        started_at=start, ended_at=start + timedelta(milliseconds=duration_ms), duration_ms=duration_ms,
        reported=True, last_event_at=start, **extra)


def make_step(task, step_id, *, offset_ms=0.0, duration_ms=100.0, kind="tool", parent="", **extra) -> Step:
    start = task.started_at + timedelta(milliseconds=offset_ms)
    return Step.objects.create(
        project=task.project, task=task, step_id=step_id, parent_step_id=parent, kind=kind,
        name=extra.pop("name", f"{kind} {step_id}"), started_at=start,
        ended_at=start + timedelta(milliseconds=duration_ms), duration_ms=duration_ms, **extra)


def make_finding(task, kind, *, wasted_ms, step_ids=(), summary="it was slow", confidence=Finding.CONFIDENCE_HIGH,
                 confidence_reason="") -> Finding:
    return Finding.objects.create(project=task.project, task=task, kind=kind, step_ids=list(step_ids),
                                  wasted_ms=wasted_ms, summary=summary, task_started_at=task.started_at,
                                  release=task.release, confidence=confidence, confidence_reason=confidence_reason)


def analyse(task, *, critical_path=(), budget=None, whatif=None, kinds=(), wasted_ms=0.0) -> TaskAnalysis:
    return TaskAnalysis.objects.create(
        task=task, project=task.project, analyzed_at=task.started_at, critical_path=list(critical_path),
        budget=budget or {}, whatif=whatif or {}, finding_kinds=list(kinds), top_finding=(kinds or [""])[0],
        wasted_ms=wasted_ms)


def insert_big_task(project, task_id: str, *, turns: int, per_turn: int, name: str = "big task") -> Task:
    """A task of 1 + turns + max(turns, 1) × per_turn steps inserted with one generate_series statement:
    a root, `turns` agent turns under it, each with one LLM call and per_turn − 1 tool calls,
    10 ms each, back to back. With turns=0 the root gets per_turn direct children (flat)."""
    from django.db import connection

    total_ms = max(turns, 1) * per_turn * 10.0
    task = make_task(project, task_id, duration_ms=total_ms, name=name, step_count=1 + turns + max(turns, 1) * per_turn)
    common = ("project_id, task_id, status, error, depends_on, attributes, events, model, provider, device,"
              " tool_name, step_id, parent_step_id, kind, name, started_at, ended_at, duration_ms")
    values = "%s, %s, 'ok', '', '{}', '{}', '[]', '', '', '', ''"
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO ingest_step ({common}) SELECT {values}, 'root', '', 'agent', %s, %s, %s, %s",
                    [project.pk, task.pk, name, task.started_at, task.ended_at, total_ms])
        if turns:
            cur.execute(
                f"INSERT INTO ingest_step ({common}) SELECT {values}, 'turn' || k, 'root', 'agent', 'turn ' || k,"
                " %s + make_interval(secs => k * %s * 0.01), %s + make_interval(secs => (k + 1) * %s * 0.01),"
                " %s * 10.0 FROM generate_series(0, %s - 1) k",
                [project.pk, task.pk, task.started_at, per_turn, task.started_at, per_turn, per_turn, turns])
        parent = "'turn' || k" if turns else "'root'"
        cur.execute(
            f"INSERT INTO ingest_step ({common}) SELECT {values}, 's' || k || '.' || j, {parent},"
            " CASE WHEN j = 0 THEN 'llm' ELSE 'tool' END, CASE WHEN j = 0 THEN 'plan' ELSE 'call ' || j END,"
            " %s + make_interval(secs => (k * %s + j) * 0.01), %s + make_interval(secs => (k * %s + j + 1) * 0.01),"
            " 10.0 FROM generate_series(0, %s - 1) k, generate_series(0, %s - 1) j",
            [project.pk, task.pk, task.started_at, per_turn, task.started_at, per_turn, max(turns, 1), per_turn])
    return task
