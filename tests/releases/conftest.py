"""Rows for release comparison tests, created directly: tasks of a release whose steps are an
agent step wrapping an LLM call and two tool calls, with chosen tool latencies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from analysis.models import Finding, TaskAnalysis
from ingest.models import Release, Step, Task

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def make_release(project, release, n, *, fetch_ms=300.0, search_ms=100.0, llm_ms=400.0, seed=0,
                 environment="prod", name="checkout", start=T0, repeated_every=0, device="",
                 analyze=True):
    """`n` tasks of `release`. Each: agent step ⊃ llm, tool search, tool fetch_invoice, run one
    after another, plus 20 ms of idle time. Durations jitter ±20% (lognormal, seeded)."""
    rng = np.random.default_rng(seed)
    jitter = lambda: float(rng.lognormal(0, 0.1))  # noqa: E731
    Release.objects.get_or_create(project=project, name=release,
                                  defaults={"first_seen": start, "last_seen": start + timedelta(hours=1)})
    tasks, steps, analyses, findings = [], [], [], []
    for i in range(n):
        t_start = start + timedelta(seconds=30 * i)
        llm, search, fetch = llm_ms * jitter(), search_ms * jitter(), fetch_ms * jitter()
        total = llm + search + fetch + 20.0
        task = Task(project=project, task_id=f"{release}-{name}-{environment}-{i}", name=name,
                    release=release, environment=environment, started_at=t_start,
                    ended_at=t_start + timedelta(milliseconds=total), duration_ms=total, status="ok",
                    reported=True, step_count=4, input_tokens=900, output_tokens=100,
                    last_event_at=t_start)
        tasks.append((task, llm, search, fetch, total))
    Task.objects.bulk_create([t[0] for t in tasks])
    def step(task, step_id, kind, name_, ms, offset, parent="agent", **extra):
        at = task.started_at + timedelta(milliseconds=offset)
        return Step(project=project, task=task, step_id=step_id, parent_step_id=parent, kind=kind,
                    name=name_, started_at=at, ended_at=at + timedelta(milliseconds=ms),
                    duration_ms=ms, **extra)

    for i, (task, llm, search, fetch, total) in enumerate(tasks):
        steps += [
            step(task, "agent", "agent", "run", total - 20.0, 0, parent=""),
            step(task, "llm", "llm", "chat", llm, 0, model="llama-3-70b", device=device,
                 input_tokens=900, output_tokens=100),
            step(task, "search", "tool", "search", search, llm, tool_name="search"),
            step(task, "fetch", "tool", "fetch_invoice", fetch, llm + search, tool_name="fetch_invoice"),
        ]
        if analyze:
            analyses.append(TaskAnalysis(
                task=task, project=project, analyzed_at=task.ended_at, budget={"prefill": llm * 0.3, "decode": llm * 0.7,
                                                    "tool": search + fetch, "framework": 20.0},
                whatif={"actual_ms": total, "cached_ms": total, "unknown_hardware_ms": 0.0,
                        "hardware": {"groq": {"ms": total - llm / 2, "llm_ms": llm / 2, "already_ms": 0.0,
                                              "with_fixes_ms": total - llm / 2}}}))
        if repeated_every and i % repeated_every == 0:
            findings.append(Finding(project=project, task=task, kind="repeated_tool_call",
                                    step_ids=["search"], wasted_ms=search, summary="search twice",
                                    release=release, task_started_at=task.started_at))
    Step.objects.bulk_create(steps)
    TaskAnalysis.objects.bulk_create(analyses)
    Finding.objects.bulk_create(findings)
    return [t[0] for t in tasks]


@pytest.fixture
def two_releases(project):
    """v1 and v2 of `checkout`, 80 tasks each; v2's fetch_invoice tool takes twice as long and
    repeats search calls more often. v2 also has a fast `refund` task name nobody changed."""
    make_release(project, "v1", 80, fetch_ms=300.0, seed=1, repeated_every=20)
    make_release(project, "v2", 80, fetch_ms=600.0, seed=2, repeated_every=5, start=T0 + timedelta(days=1))
    make_release(project, "v1", 60, name="refund", fetch_ms=50.0, seed=3, analyze=False)
    make_release(project, "v2", 60, name="refund", fetch_ms=50.0, seed=4, analyze=False,
                 start=T0 + timedelta(days=1))
    return project
