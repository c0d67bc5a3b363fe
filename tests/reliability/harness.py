"""The pieces of a fault test: a throwaway stack (its own embedded PostgreSQL and Redis in a tmp
folder, migrated, behind real gunicorn on a free loopback port), two senders that count what
they sent (a native-API client with retries, the real OpenTelemetry SDK exporter), and a
count of what was stored, read straight from the database.

Senders retry what the server says is retryable: 429 and 503 (waiting Retry-After) and a
refused or dropped connection. Anything else that is not 200 is recorded and fails the test.
Every loop here is bounded in time; every process is stopped by the test that started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import requests

from agentops import embedded

ROOT = Path(__file__).resolve().parents[2]
MANAGE = [sys.executable, str(ROOT / "manage.py")]
RETRYABLE = {429, 502, 503, 504}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stack_environment(data_dir: Path, *, database_url: str, broker_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": database_url, "CELERY_BROKER_URL": broker_url,
        "DJANGO_SETTINGS_MODULE": "tests.settings", "SECRET_KEY": "fault-test-key", "DEBUG": "1",
        "AGENTOPS_DATA_DIR": str(data_dir), "AGENTOPS_HTTPS": "0", "LOG_LEVEL": "WARNING",
        "AGENTOPS_ANALYSIS_QUIET_SECONDS": "1",
    })
    return env


def manage(env: dict, *args: str) -> str:
    done = subprocess.run([*MANAGE, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def throwaway_database(data_dir: Path) -> str:
    """A migrated database on an embedded PostgreSQL of its own under data_dir."""
    url = embedded.postgres_url(data_dir)
    manage(stack_environment(data_dir, database_url=url, broker_url="redis://127.0.0.1:1/0"),
           "migrate", "--noinput", "-v", "0")
    return url


def project_key(env: dict, name: str = "faults") -> str:
    manage(env, "create_project", name)
    return manage(env, "create_key", name, "--scope", "ingest", "--scope", "read").strip().splitlines()[-1]


class Server:
    """gunicorn serving the product on a free loopback port, with the product's settings
    (agentops/gunicorn_conf.py: gthread workers, their threads and timeouts)."""

    def __init__(self, env: dict, *, workers: int = 2, port: int | None = None):
        self.env, self.workers = env, workers
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Server:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:agentops.gunicorn_conf", "agentops.wsgi",
             "-b", f"127.0.0.1:{self.port}", "-w", str(self.workers), "--graceful-timeout", "30",
             "--log-level", "warning"],
            env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "gunicorn exited at start"
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/api/v1/tasks", timeout=2).status_code in (401, 403):
                    return self
            time.sleep(0.2)
        raise AssertionError("gunicorn did not answer within 60 s")

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [int(pid) for pid in children]

    def stop(self, sig: int = signal.SIGTERM, *, wait: float = 40) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()


@dataclass
class Tally:
    """What a sender saw: ids it sent and had acknowledged, and every non-200 answer."""

    acknowledged: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, what: str) -> None:
        with self.lock:
            self.statuses[what] = self.statuses.get(what, 0) + 1


def send_with_retries(url: str, key: str, body: dict, tally: Tally, *, deadline: float) -> requests.Response:
    """POST until a 200 or a non-retryable answer; waits Retry-After (or 0.2 s for a dropped
    connection) between tries. Gives up only at `deadline`."""
    while True:
        try:
            response = requests.post(url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        except requests.ConnectionError:
            tally.saw("connection error")
            wait = 0.2
        else:
            if response.status_code == 200:
                return response
            tally.saw(str(response.status_code))
            if response.status_code not in RETRYABLE:
                return response
            wait = float(response.headers.get("Retry-After", "1"))
        if time.monotonic() + wait > deadline:
            raise AssertionError(f"could not deliver within the deadline; saw {tally.statuses}")
        time.sleep(wait)


def native_batches(run: str, *, batches: int, steps: int):
    """`batches` batches, each one ended task with `steps` steps; ids are unique per run."""
    t0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
    for b in range(batches):
        task_id = f"{run}-n{b}"
        start = t0 + timedelta(minutes=b)
        events = [{"type": "task", "task_id": task_id, "name": "fault-native", "started_at": start.isoformat(),
                   "ended_at": (start + timedelta(seconds=steps)).isoformat(), "status": "ok"}]
        events += [{"type": "step", "task_id": task_id, "step_id": f"s{i}", "kind": "tool", "name": "search",
                    "started_at": (start + timedelta(seconds=i)).isoformat(),
                    "ended_at": (start + timedelta(seconds=i + 0.5)).isoformat()} for i in range(steps)]
        yield task_id, [f"{task_id}/s{i}" for i in range(steps)], {"events": events}


def native_sender(server_url: str, key: str, run: str, tally: Tally, *, batches: int, steps: int,
                  pace: float, deadline: float, progress: threading.Event | None = None) -> None:
    for n, (_, ids, body) in enumerate(native_batches(run, batches=batches, steps=steps)):
        response = send_with_retries(f"{server_url}/api/v1/ingest", key, body, tally, deadline=deadline)
        if response.status_code == 200 and not response.json()["rejected"]:
            with tally.lock:
                tally.acknowledged.update(ids)
        if progress is not None and n == batches // 3:
            progress.set()
        time.sleep(pace)


def otel_sender(server_url: str, key: str, run: str, tally: Tally, *, traces: int, spans: int,
                pace: float) -> None:
    """The real SDK: TracerProvider → BatchSpanProcessor → OTLPSpanExporter (its own retries,
    Retry-After included). Ids of spans the exporter reported as exported count as sent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    class Counting(OTLPSpanExporter):
        def export(self, batch):
            result = super().export(batch)
            tally.saw(f"otel {result.name}")
            if result == SpanExportResult.SUCCESS:
                with tally.lock:
                    tally.acknowledged.update(f"{s.context.trace_id:032x}/{s.context.span_id:016x}"
                                              for s in batch)
            return result

    exporter = Counting(endpoint=f"{server_url}/v1/traces", headers={"Authorization": f"Bearer {key}"},
                        timeout=45)
    provider = TracerProvider(resource=Resource.create({"service.name": f"fault-{run}"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=100_000,
                                                   max_export_batch_size=50, schedule_delay_millis=100))
    tracer = provider.get_tracer("faults")
    sent = set()
    for _ in range(traces):
        with tracer.start_as_current_span("agent-run") as root:
            sent.add(f"{root.get_span_context().trace_id:032x}/{root.get_span_context().span_id:016x}")
            for i in range(spans - 1):
                with tracer.start_as_current_span(f"tool-{i}") as child:
                    ctx = child.get_span_context()
                    sent.add(f"{ctx.trace_id:032x}/{ctx.span_id:016x}")
        time.sleep(pace)
    provider.force_flush(120_000)
    provider.shutdown()
    with tally.lock:
        tally.statuses["otel created"] = len(sent)
        tally.statuses["otel not acknowledged"] = len(sent - tally.acknowledged)


def stored_steps(database_url: str) -> list[str]:
    """task_id/step_id of every stored step (duplicates kept, so they can be counted)."""
    with psycopg.connect(database_url, connect_timeout=10) as conn:
        rows = conn.execute("SELECT t.task_id || '/' || s.step_id FROM ingest_step s "
                            "JOIN ingest_task t ON t.id = s.task_id").fetchall()
    return [r[0] for r in rows]


def run_id() -> str:
    return uuid.uuid4().hex[:8]
