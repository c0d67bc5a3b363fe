"""A small workload stored through the real write path (`batch_store`): normal tasks that
give the baselines history, and helpers to add one task with a known problem."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from ingest.records import Batch, SampleRecord, StepRecord, TaskRecord
from ingest.services import batch_store

BASE = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def normal_task(task_id: str, start: float, rng: random.Random, *, release="v1") -> tuple[TaskRecord, list[StepRecord]]:
    """llm → search_order → llm, with ordinary jitter: 30 ms hand-offs, ~400 ms tool."""
    steps, t = [], start
    ttft = rng.gauss(200, 15)
    out = rng.randint(40, 80)
    dur = ttft + 20 * out * rng.uniform(0.95, 1.05)
    steps.append(StepRecord(f"{task_id}-l1", task_id, at(t), at(t + dur / 1000), kind="llm", name="chat",
                            model="llama-3-70b", device="gpu-1", input_tokens=rng.randint(1800, 2200),
                            output_tokens=out, ttft_ms=ttft))
    t += dur / 1000 + 0.03
    tool = rng.gauss(400, 30)
    steps.append(StepRecord(f"{task_id}-t1", task_id, at(t), at(t + tool / 1000), kind="tool", name="search_order",
                            tool_name="search_order", tool_args={"order_id": task_id}))
    t += tool / 1000 + 0.03
    ttft = rng.gauss(200, 15)
    dur = ttft + 20 * out * rng.uniform(0.95, 1.05)
    steps.append(StepRecord(f"{task_id}-l2", task_id, at(t), at(t + dur / 1000), kind="llm", name="chat",
                            model="llama-3-70b", device="gpu-1", input_tokens=rng.randint(1800, 2200),
                            output_tokens=out, ttft_ms=ttft))
    t += dur / 1000 + 0.02
    return TaskRecord(task_id, name="checkout", release=release, started_at=at(start), ended_at=at(t),
                      status="ok"), steps


def history(project, *, tasks: int = 30, seed: int = 1) -> float:
    """Store `tasks` normal tasks and one hour of normal gpu-1 telemetry; returns the next free second."""
    rng = random.Random(seed)
    batch = Batch()
    for i in range(tasks):
        task, steps = normal_task(f"n{i}", i * 10.0, rng)
        batch.tasks.append(task)
        batch.steps.extend(steps)
    batch.samples.extend(normal_samples(0, tasks * 10 + 600, rng))
    batch_store(project=project, batch=batch)
    return tasks * 10.0 + 10


def normal_samples(start: float, end: float, rng: random.Random, device="gpu-1") -> list[SampleRecord]:
    return [SampleRecord(device, at(s), vendor="nvidia", hardware="H100",
                         metrics={"queue_depth": rng.choice((1, 2, 2, 3)), "utilization": rng.uniform(0.5, 0.7),
                                  "temperature_c": rng.uniform(60, 68), "tokens_per_s": rng.uniform(850, 950),
                                  "throttled": 0})
            for s in range(int(start), int(end))]


def store(project, task: TaskRecord, steps: list[StepRecord], samples=()) -> None:
    batch_store(project=project, batch=Batch(tasks=[task], steps=list(steps), samples=list(samples)))


def problem_task(task_id: str, start: float) -> tuple[TaskRecord, list[StepRecord]]:
    """A task with a repeated call (3×), an idle stall of 2 s and a slow tool."""
    def tool(i, s, e, **kw):
        return StepRecord(f"{task_id}-{i}", task_id, at(start + s), at(start + e), kind="tool",
                          name=kw.get("tool_name", "search_order"), **{"tool_name": "search_order", **kw})
    steps = [
        StepRecord(f"{task_id}-l1", task_id, at(start), at(start + 1.2), kind="llm", name="chat", model="llama-3-70b",
                   device="gpu-1", input_tokens=2000, output_tokens=50, ttft_ms=200),
        # The same answer each time, recorded as instrumentations record it: nothing changed it.
        tool("a", 1.23, 1.63, tool_args={"order_id": "A-1"}, tool_result='{"status": "shipped"}'),
        tool("b", 1.66, 2.06, tool_args={" order_id": "A-1"}, tool_result='{"status": "shipped"}'),
        tool("c", 2.09, 2.49, tool_args={"order_id": "A-1"}, tool_result='{"status": "shipped"}'),
        StepRecord(f"{task_id}-l2", task_id, at(start + 4.5), at(start + 5.7), kind="llm", name="chat",
                   model="llama-3-70b", device="gpu-1", input_tokens=2000, output_tokens=50, ttft_ms=200),
        tool("d", 5.73, 8.73, tool_name="search_order", tool_args={"order_id": "B-2"}),
    ]
    return TaskRecord(task_id, name="checkout", release="v2", started_at=at(start), ended_at=at(start + 8.75),
                      status="ok"), steps
