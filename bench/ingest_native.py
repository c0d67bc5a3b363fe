"""Native ingest rate: N steps (in tasks of 20) POSTed to /api/v1/ingest in batches by several
concurrent senders; the rate counts steps *stored* (read back from the database), not accepted.

    .venv/bin/python bench/ingest_native.py --steps 100000 --batch 1000 --senders 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402

STEPS_PER_TASK = 20


def make_batches(total: int, batch_size: int) -> list[bytes]:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    events = []
    for i in range(total):
        task = i // STEPS_PER_TASK
        start = t0 + timedelta(seconds=task * 10 + (i % STEPS_PER_TASK) * 0.4)
        llm = i % 2 == 0
        event = {"type": "step", "step_id": f"s{i}", "task_id": f"task-{task}",
                 "kind": "llm" if llm else "tool", "name": "chat" if llm else "search_orders",
                 "started_at": start.isoformat(), "ended_at": (start + timedelta(seconds=0.35)).isoformat()}
        if llm:
            event.update(model="llama-3.1-70b", device=f"gpu-{task % 4}", input_tokens=1200 + i % 500,
                         output_tokens=150, ttft_ms=180.0)
        else:
            event.update(tool_name="search_orders", tool_args={"order_id": task, "q": "late delivery"})
        events.append(event)
        if i % STEPS_PER_TASK == STEPS_PER_TASK - 1:
            events.append({"type": "task", "task_id": f"task-{task}", "name": "customer-support",
                           "release": "v1", "started_at": (t0 + timedelta(seconds=task * 10)).isoformat(),
                           "ended_at": (start + timedelta(seconds=0.4)).isoformat()})
    return [json.dumps({"events": events[i:i + batch_size]}).encode()
            for i in range(0, len(events), batch_size)]


def run(*, steps: int, batch: int, senders: int, projects: int = 1) -> dict:
    """`projects` > 1: the batches go to that many projects in turn, each with its own key (on
    Citus, spread over the workers: harness.projects_create)."""
    import requests

    from bench.otlp_ingest import project_names

    url = harness.bench_database_url()
    harness.setup_django(url)
    harness.migrate()
    from ingest.models import Step

    made = harness.projects_create(project_names("bench-native", projects))
    bodies = make_batches(steps, batch)
    with harness.web_server(url) as base:
        session_per_thread = {}

        def send(n: int) -> int:
            import threading
            body = bodies[n]
            headers = {"Authorization": f"Bearer {made[n % len(made)][1]}", "Content-Type": "application/json"}
            s = session_per_thread.setdefault(threading.get_ident(), requests.Session())
            for _ in range(10):
                r = s.post(f"{base}/api/v1/ingest", data=body, headers=headers, timeout=120)
                if r.status_code in (429, 503):
                    time.sleep(float(r.headers.get("Retry-After", 1)))
                    continue
                r.raise_for_status()
                return r.json()["accepted"]
            raise RuntimeError("gave up after retries")

        started = time.perf_counter()
        done = 0
        with ThreadPoolExecutor(senders) as pool:
            for n, _ in enumerate(pool.map(send, range(len(bodies))), 1):
                done = n
                harness.progress("native ingest", done, len(bodies))
        while Step.objects.filter(project__in=[p for p, _ in made]).count() < steps:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
    return {"steps": steps, "batch": batch, "senders": senders, "seconds": round(elapsed, 2),
            "steps_per_s": round(steps / elapsed), "placement": harness.placement([p for p, _ in made])}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--senders", type=int, default=4)
    args = parser.parse_args()
    harness.stop_on_signals()
    try:
        with harness.embedded_services():
            print(json.dumps(run(steps=args.steps, batch=args.batch, senders=args.senders)))
    except KeyboardInterrupt as exc:
        harness.exit_interrupted("ingest_native", exc)
