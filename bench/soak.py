"""Soak: the whole stack under sustained OTLP load on this machine, end to end.

    make soak                                          # 3,000 spans/s for 10 minutes, then a burst and a rate search
    .venv/bin/python bench/soak.py --rate 3000 --duration 600
    .venv/bin/python bench/soak.py --short             # a smoke test: ~3 minutes in all

What runs: `manage.py runstack` (gunicorn web, one analysis worker of `--worker-concurrency`
processes, the periodic worker, beat) on a scratch database beside the product's
(`agentops_bench_soak`, the embedded Postgres or DATABASE_URL's server) and a Celery queue of its
own; the broker is the embedded Redis (or CELERY_BROKER_URL), left running afterwards. Senders
make GenAI traces with the OpenTelemetry SDK's tracer at wall-clock time (16 spans each: an
invoke_agent root, chat spans on 4 Groq devices, tool calls; some repeat a call or stall, so the
detectors find something) and send them with the SDK's OTLPSpanExporter (protobuf, its own
retries and backoff) in batches of `--batch` at a fixed rate, from `--senders` threads. Only
loopback traffic; every loop is bounded in count and time.

Phases:
1. ingest only: bench/otlp_ingest.py (gunicorn alone, the same web workers, as fast as the
   senders go) in a child process: the reference rate of this run.
2. soak: `--rate` spans/s for `--duration` s; a report line every 10 s: spans sent and stored,
   tasks analysed, analysis lag (task end → its analysis committed, i.e. its findings visible in
   the API; still-unanalysed tasks count at their age), backlog, rollup lag and queue depth from
   GET /api/v1/status, resident memory and CPU of every process of the stack (and Postgres).
3. drain, then a burst: `--burst` spans as fast as the senders go; the time its spans took to
   store and the time until its last task was analysed (target: ≤ 2×).
4. rate search: `--search-seconds` at rising rates (×1.5 from `--rate` until the analysis lag
   p95 exceeds `--lag-target` or the backlog keeps growing, then one bisection): the highest
   rate sustained, as spans/s and as a fraction of the ingest-only rate.

At the end: sent vs stored counted by id (lost, duplicated), HTTP status counts (5xx; 429/503
with and without Retry-After), lag p50/p95/max per phase, memory growth of each process over
the last 5 minutes of the soak (target ≤ 10 %), CPU share per process; a table on stdout,
bench/results/soak.json and a Plotly chart bench/results/soak.html (rate, lag, memory over time).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import harness  # noqa: E402

SOAK_DB = "agentops_bench_soak"
SOAK_QUEUE = "agentops-soak"
RESULTS = ROOT / "bench" / "results"
SPANS_PER_TRACE = 16
REPORT_SECONDS = 10.0
MS = 1_000_000


# --- traffic -------------------------------------------------------------------------------------


class Traffic:
    """Traces made by the SDK's tracer at wall-clock time; each ends when it is made."""

    def __init__(self, seed: int = 7):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.finished = InMemorySpanExporter()
        self.providers: dict[str, TracerProvider] = {}
        self._resource, self._processor = Resource, SimpleSpanProcessor(self.finished)
        self._provider_cls = TracerProvider
        self.rng = random.Random(seed)
        self.count = 0

    def tracer(self, phase: str):
        if phase not in self.providers:
            provider = self._provider_cls(resource=self._resource.create({
                "service.name": "support", "service.version": phase, "deployment.environment.name": "soak"}))
            provider.add_span_processor(self._processor)
            self.providers[phase] = provider
        return self.providers[phase].get_tracer("agentops-soak")

    def trace(self, phase: str) -> tuple[str, list]:
        """One finished trace (its spans) ending now; returns (trace id hex, spans)."""
        from opentelemetry import trace

        tracer, rng = self.tracer(phase), self.rng
        self.count += 1
        end = time.time_ns()
        stall = rng.random() < 0.1
        repeat = rng.random() < 0.1
        start = end - (6500 + (2000 if stall else 0)) * MS
        root = tracer.start_span("invoke_agent support", start_time=start, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": f"conv-{self.count % 500}"})
        parent = trace.set_span_in_context(root)
        at = start
        for i in range(1, SPANS_PER_TRACE):
            if i == 8 and stall:
                at += 2000 * MS
            if i % 2:
                ttft = rng.lognormvariate(5.2, 0.15)
                dur = ttft + 150 * rng.lognormvariate(1.0, 0.1)
                span = tracer.start_span("chat llama-3.1-70b", context=parent, start_time=at, attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": "groq",
                    "gen_ai.request.model": "llama-3.1-70b", "gen_ai.usage.input_tokens": 1200 + rng.randint(0, 400),
                    "gen_ai.usage.output_tokens": 150, "gen_ai.response.time_to_first_chunk": ttft / 1000,
                    "hw.id": f"groq-lpu-{self.count % 4}"})
            else:
                dur = rng.lognormvariate(5.0, 0.25)
                args = {"order_id": self.count if not (repeat and i == 4) else self.count, "q": "late delivery",
                        "page": i if not (repeat and i == 4) else 2}
                span = tracer.start_span("execute_tool search_orders", context=parent, start_time=at, attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders",
                    "gen_ai.tool.call.id": f"call_{self.count}_{i}", "gen_ai.tool.call.arguments": json.dumps(args)})
            dur_ns = int(min(dur, 390) * MS)
            span.end(end_time=at + dur_ns)
            at += 400 * MS
        root.end(end_time=end)
        spans = list(self.finished.get_finished_spans())
        self.finished.clear()
        return format(root.get_span_context().trace_id, "032x"), spans


class Senders:
    """`threads` senders, each with an OTLPSpanExporter of its own; counts HTTP statuses (and
    whether 429/503 came with Retry-After) through a response hook on the exporter's session."""

    def __init__(self, endpoint: str, key: str, threads: int):
        self.endpoint, self.key = endpoint, key
        self.queue: queue.Queue = queue.Queue(maxsize=256)
        self.statuses: Counter = Counter()
        self.acked: list[list[tuple[str, str]]] = []
        self.failed_batches = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _hook(self, response, *args, **kwargs):
        code = response.status_code
        label = str(code)
        if code in (429, 503):
            label += " with Retry-After" if response.headers.get("Retry-After") else " WITHOUT Retry-After"
        with self.lock:
            self.statuses[label] += 1

    def _run(self):
        import requests
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult

        session = requests.Session()
        session.hooks["response"].append(self._hook)
        exporter = OTLPSpanExporter(endpoint=self.endpoint, headers={"Authorization": f"Bearer {self.key}"},
                                    timeout=60, session=session)
        while True:
            item = self.queue.get()
            if item is None:
                return
            spans, on_done = item
            ok = exporter.export(spans) == SpanExportResult.SUCCESS
            ids = [(format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")) for s in spans]
            with self.lock:
                if ok:
                    self.acked.append(ids)
                else:
                    self.failed_batches += 1
            if on_done:
                on_done(ok, len(spans))
            self.queue.task_done()

    def stop(self):
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join(timeout=120)

    def acked_ids(self) -> list[tuple[str, str]]:
        with self.lock:
            return [i for batch in self.acked for i in batch]


def drive(traffic: Traffic, senders: Senders, *, phase: str, rate: float, seconds: float, batch: int,
          on_tick=None) -> dict:
    """Make and queue `rate` spans/s for `seconds`: bounded by the clock and by the span count."""
    started = time.monotonic()
    deadline = started + seconds
    made, pending = 0, []
    last_flush = started
    limit = int(rate * seconds)
    while time.monotonic() < deadline and made < limit:
        target = min(limit, int(rate * (time.monotonic() - started)))
        while made < target:
            _, spans = traffic.trace(phase)
            pending.extend(spans)
            made += len(spans)
            if len(pending) >= batch:
                senders.queue.put((pending[:batch], None))
                pending = pending[batch:]
                last_flush = time.monotonic()
        if pending and time.monotonic() - last_flush > 1.0:  # the BatchSpanProcessor's timer
            senders.queue.put((pending, None))
            pending, last_flush = [], time.monotonic()
        if on_tick:
            on_tick()
        time.sleep(0.02)
    if pending:
        senders.queue.put((pending, None))
    return {"phase": phase, "spans": made, "seconds": round(time.monotonic() - started, 1)}


def burst(traffic: Traffic, senders: Senders, *, phase: str, spans: int, batch: int) -> list:
    """`spans` spans made up front (the SDK's encoding happens in the senders), then queued."""
    batches, pending = [], []
    while sum(len(b) for b in batches) + len(pending) < spans:
        pending.extend(traffic.trace(phase)[1])
        if len(pending) >= batch:
            batches.append(pending[:batch])
            pending = pending[batch:]
    if pending:
        batches.append(pending)
    return batches


# --- the stack and what we watch -----------------------------------------------------------------


def broker_url() -> str:
    if os.environ.get("CELERY_BROKER_URL"):
        return os.environ["CELERY_BROKER_URL"]
    from agentops import embedded

    return embedded.redis_url(Path(os.environ.get("AGENTOPS_DATA_DIR", ROOT / ".data")).resolve())


def stack_env(database_url: str, data_dir: Path) -> dict[str, str]:
    env = harness.bench_env(database_url)
    # A broker URL given explicitly: runstack leaves a broker it did not start running.
    env.update({"AGENTOPS_QUEUE": SOAK_QUEUE, "CELERY_BROKER_URL": broker_url(), "LOG_LEVEL": "INFO",
                "AGENTOPS_DATA_DIR": str(data_dir), "AGENTOPS_KEY_RATE_LIMIT": "1000/second"})
    return env


class Stack:
    def __init__(self, database_url: str, *, port: int, web_workers: int, worker_concurrency: int, log: Path):
        data_dir = ROOT / "bench" / ".soak"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runstack", "--port", str(port), "--web-workers", str(web_workers),
             "--worker-concurrency", str(worker_concurrency)],
            cwd=ROOT, env=stack_env(database_url, data_dir), stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"

    def wait_up(self, timeout: float = 120) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("runstack exited; see its log")
            try:
                requests.get(f"{self.url}/login/", timeout=5)
                if len(self.processes()) >= 6:  # runstack, web ×(1+n), workers, beat
                    time.sleep(3)  # the workers connect to the broker
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise RuntimeError("the stack did not come up")

    def processes(self) -> dict[str, object]:
        """Every process of the stack by role (and Postgres's, summed, under 'postgres')."""
        import psutil

        out = {}
        try:
            top = psutil.Process(self.proc.pid)
        except psutil.NoSuchProcess:
            return out
        out["runstack"] = top
        for child in top.children(recursive=True):
            try:
                cmd = " ".join(child.cmdline())
                parent = child.ppid()
            except psutil.Error:
                continue
            if "gunicorn" in cmd:
                role = "web master" if parent == top.pid else f"web worker {len([k for k in out if k.startswith('web worker')]) + 1}"
            elif " beat" in cmd:
                role = "beat"
            elif "periodic" in cmd:
                role = "periodic worker" if parent == top.pid else "periodic child"
            elif "celery" in cmd:
                role = "analysis worker" if parent == top.pid else f"analysis child {len([k for k in out if k.startswith('analysis child')]) + 1}"
            else:
                role = f"other {child.pid}"
            out[role] = child
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def postgres_processes():
    """The Postgres server's processes (the embedded one, or none known for DATABASE_URL)."""
    import psutil

    pidfile = Path(os.environ.get("AGENTOPS_DATA_DIR", ROOT / ".data")).resolve() / "postgres" / "postmaster.pid"
    try:
        top = psutil.Process(int(pidfile.read_text().split()[0]))
        return [top, *top.children(recursive=True)]
    except (OSError, ValueError, psutil.Error):
        return []


class Watch:
    """Samples memory and CPU of every process, and the pipeline's figures from the database and
    from GET /api/v1/status, every REPORT_SECONDS."""

    def __init__(self, stack: Stack, project_id: int, read_key: str, senders: Senders, started: float):
        self.stack, self.project_id, self.read_key, self.senders = stack, project_id, read_key, senders
        self.started = started
        self.rows: list[dict] = []
        self.cpu_prev: dict[str, float] = {}
        self.last = 0.0
        self.prev_stored = 0
        self.prev_at = time.monotonic()
        self.prev_report = datetime.now(tz=UTC)

    def due(self) -> bool:
        return time.monotonic() - self.last >= REPORT_SECONDS

    def sample(self, phase: str, sent: int) -> dict:
        import psutil
        import requests
        from django.db import connection

        self.last = now_m = time.monotonic()
        now = datetime.now(tz=UTC)
        memory, cpu = {}, {}
        procs = self.stack.processes()
        pg = postgres_processes()
        wall = max(now_m - self.prev_at, 1e-6)
        for role, proc in list(procs.items()) + [("postgres", None), ("soak driver", psutil.Process())]:
            try:
                group = pg if role == "postgres" else [proc]
                # Postgres's processes share its buffers: their proportional share, not RSS, adds up.
                rss = (sum(p.memory_full_info().pss for p in group) if role == "postgres"
                       else proc.memory_info().rss)
                seconds = sum(sum(p.cpu_times()[:2]) for p in group)
            except psutil.Error:
                continue
            memory[role] = round(rss / 2**20, 1)
            if role in self.cpu_prev:
                cpu[role] = round(100 * (seconds - self.cpu_prev[role]) / wall, 1)
            self.cpu_prev[role] = seconds
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [self.project_id])
            stored = cursor.fetchone()[0]
            cursor.execute("""
                SELECT count(*) FILTER (WHERE a.analyzed_at IS NOT NULL),
                       count(*) FILTER (WHERE a.analyzed_at IS NULL AND t.ended_at IS NOT NULL),
                       extract(epoch FROM %s - min(t.ended_at) FILTER (WHERE a.analyzed_at IS NULL))
                FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id
                WHERE t.project_id = %s""", [now, self.project_id])
            analysed, backlog, oldest = cursor.fetchone()
            cursor.execute("""
                SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY lag), max(lag),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY arrival)
                FROM (SELECT extract(epoch FROM a.analyzed_at - t.ended_at) AS lag,
                             extract(epoch FROM a.analyzed_at - t.last_event_at) AS arrival
                      FROM analysis_taskanalysis a JOIN ingest_task t ON t.id = a.task_id
                      WHERE t.project_id = %s AND a.analyzed_at > %s) x""", [self.project_id, self.prev_report])
            n, p50, p95, mx, arrival95 = cursor.fetchone()
        try:
            status = requests.get(f"{self.stack.url}/api/v1/status", timeout=10,
                                  headers={"Authorization": f"Bearer {self.read_key}"}).json()
        except (requests.RequestException, ValueError):
            status = {}
        row = {"t": round(now_m - self.started, 1), "phase": phase, "sent": sent,
               "acked": sum(len(b) for b in self.senders.acked), "stored": stored,
               "stored_per_s": round((stored - self.prev_stored) / wall), "analysed_tasks": analysed,
               "backlog_tasks": backlog, "oldest_unanalysed_s": round(float(oldest or 0), 1),
               "lag_n": n, "lag_p50": _r(p50), "lag_p95": _r(p95), "lag_max": _r(mx), "arrival_lag_p95": _r(arrival95),
               "status_lag_s": (status.get("analysis") or {}).get("lag_seconds"),
               "rollup_lag_s": (status.get("rollups") or {}).get("lag_seconds"),
               "queue_depth": status.get("queue_depth"), "memory_mib": memory, "cpu_pct": cpu,
               "http": dict(self.senders.statuses)}
        self.prev_stored, self.prev_at, self.prev_report = stored, now_m, now
        self.rows.append(row)
        print(f"[{row['t']:6.0f}s {phase:>8}] sent {sent:>9,} stored {stored:>9,} ({row['stored_per_s']:>5,}/s)"
              f"  analysed {analysed:>7,} backlog {backlog:>6,} (oldest {row['oldest_unanalysed_s']:5.0f} s)"
              f"  lag p50/p95/max {_f(p50)}/{_f(p95)}/{_f(mx)} s (from arrival p95 {_f(arrival95)})"
              f"  rollup lag {_f(row['rollup_lag_s'])} s"
              f"  queue {row['queue_depth']}  rss {sum(memory.values()):,.0f} MiB", flush=True)
        return row


def _r(value) -> float | None:
    return None if value is None else round(float(value), 2)


def _f(value) -> str:
    return "—" if value is None else f"{float(value):.1f}"


def lag_stats(project_id: int, release: str, now: datetime) -> dict:
    """Lag of every task of a phase (task end → analysis committed); unanalysed tasks count at
    their age now. Also from arrival (its last span stored → analysed: what the server adds) and
    the delivery delay (task end → its last span stored: the senders' queue on a busy machine)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT count(*), count(a.analyzed_at),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.95) WITHIN GROUP (ORDER BY lag),
                   max(lag), min(t.ended_at), max(t.ended_at), max(a.analyzed_at)
                   , percentile_cont(0.5) WITHIN GROUP (ORDER BY arrival), percentile_cont(0.95) WITHIN GROUP (ORDER BY arrival),
                   max(arrival), percentile_cont(0.5) WITHIN GROUP (ORDER BY delivery),
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY delivery)
            FROM (SELECT t.*, extract(epoch FROM coalesce(a.analyzed_at, %s) - t.ended_at) AS lag,
                         extract(epoch FROM coalesce(a.analyzed_at, %s) - t.last_event_at) AS arrival,
                         extract(epoch FROM t.last_event_at - t.ended_at) AS delivery
                  FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id
                  WHERE t.project_id = %s AND t.release = %s) t
            LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id""", [now, now, project_id, release])
        (tasks, analysed, p50, p95, mx, first_end, last_end, last_analysed, a50, a95, amx, d50,
         d95) = cursor.fetchone()
    return {"tasks": tasks, "analysed": analysed, "lag_p50_s": _r(p50), "lag_p95_s": _r(p95), "lag_max_s": _r(mx),
            "arrival_lag_p50_s": _r(a50), "arrival_lag_p95_s": _r(a95), "arrival_lag_max_s": _r(amx),
            "delivery_p50_s": _r(d50), "delivery_p95_s": _r(d95),
            "first_end": first_end, "last_end": last_end, "last_analysed": last_analysed}


def wait_drained(project_id: int, *, timeout: float) -> float:
    """Seconds until every ended task of the project is analysed (bounded by `timeout`)."""
    from django.db import connection

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with connection.cursor() as cursor:
            cursor.execute("""SELECT count(*) FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id
                              WHERE t.project_id = %s AND (a.analyzed_at IS NULL
                                    OR a.analyzed_through < t.last_event_at)""", [project_id])
            if cursor.fetchone()[0] == 0:
                return time.monotonic() - started
        time.sleep(1.0)
    return float("nan")


def count_by_id(project_id: int, acked: list[tuple[str, str]]) -> dict:
    """Acknowledged span ids against stored steps: lost (acknowledged, not stored), duplicated
    (one id stored twice), extra (stored, never acknowledged: a batch the exporter gave up on
    that was stored after all)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE soak_sent (task_id text, step_id text)")
        with cursor.cursor.copy("COPY soak_sent (task_id, step_id) FROM STDIN") as copy:
            for row in acked:
                copy.write_row(row)
        cursor.execute("""SELECT count(*) FROM (SELECT DISTINCT task_id, step_id FROM soak_sent) s
                          WHERE NOT EXISTS (SELECT 1 FROM ingest_step x JOIN ingest_task t ON t.id = x.task_id
                                            WHERE t.project_id = %s AND t.task_id = s.task_id AND x.step_id = s.step_id)""",
                       [project_id])
        lost = cursor.fetchone()[0]
        cursor.execute("""SELECT count(*), count(DISTINCT (x.task_id, x.step_id)) FROM ingest_step x
                          WHERE x.project_id = %s""", [project_id])
        rows, distinct = cursor.fetchone()
        cursor.execute("SELECT count(DISTINCT (task_id, step_id)) FROM soak_sent")
        sent = cursor.fetchone()[0]
        cursor.execute("DROP TABLE soak_sent")
    return {"acknowledged": sent, "stored": rows, "lost": lost, "duplicated": rows - distinct,
            "stored_not_acknowledged": distinct - (sent - lost)}


def memory_growth(rows: list[dict], *, window: float) -> dict:
    """Per process: RSS at the start and end of the last `window` seconds of the soak phase."""
    soak = [r for r in rows if r["phase"] == "soak"]
    if not soak:
        return {}
    end = soak[-1]
    start = min(soak, key=lambda r: abs(r["t"] - (end["t"] - window)))
    out = {}
    for role, mib in end["memory_mib"].items():
        before = start["memory_mib"].get(role)
        if before:
            out[role] = {"from_mib": before, "to_mib": mib, "growth_pct": round(100 * (mib - before) / before, 1)}
    return out


def cpu_share(rows: list[dict], phase: str) -> dict:
    values = defaultdict(list)
    for r in rows:
        if r["phase"] == phase:
            for role, pct in r["cpu_pct"].items():
                values[role].append(pct)
    return {role: round(sum(v) / len(v), 1) for role, v in values.items() if v}


def chart(rows: list[dict], path: Path, title: str) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("spans/s stored, tasks waiting for analysis",
                                        "analysis lag of tasks analysed in each 10 s (s)", "resident memory (MiB)"))
    t = [r["t"] for r in rows]
    fig.add_trace(go.Scatter(x=t, y=[r["stored_per_s"] for r in rows], name="spans/s stored"), 1, 1)
    fig.add_trace(go.Scatter(x=t, y=[r["backlog_tasks"] for r in rows], name="tasks waiting"), 1, 1)
    for key in ("lag_p50", "lag_p95", "lag_max"):
        fig.add_trace(go.Scatter(x=t, y=[r[key] for r in rows], name=key.replace("_", " ")), 2, 1)
    roles = sorted({role for r in rows for role in r["memory_mib"]})
    for role in roles:
        fig.add_trace(go.Scatter(x=t, y=[r["memory_mib"].get(role) for r in rows], name=role), 3, 1)
    phases = []
    for r in rows:
        if not phases or phases[-1][0] != r["phase"]:
            phases.append((r["phase"], r["t"]))
    for name, at in phases:
        fig.add_vline(x=at, line_dash="dot", line_color="#999")
        fig.add_annotation(x=at, y=1.0, yref="paper", text=name, showarrow=False, xanchor="left")
    fig.update_layout(title=title, height=1000, xaxis3_title="seconds since the soak started")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)


# --- main ----------------------------------------------------------------------------------------


def ingest_only(*, spans: int, senders: int, web_workers: int) -> dict:
    """The reference: bench/otlp_ingest.py (gunicorn alone, as fast as it stores) in a child."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "otlp_ingest.py"), "--spans", str(spans),
                           "--senders", str(senders), "--workers", str(web_workers)],
                          cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    return json.loads(lines[-1]) if proc.returncode == 0 and lines else {"error": f"exit {proc.returncode}"}


def run(args) -> dict:
    results: dict = {"started_at": datetime.now(tz=UTC).isoformat(timespec="seconds"),
                     "machine": {"cpus": os.cpu_count(), "load_average_before": os.getloadavg()},
                     "params": {k: v for k, v in vars(args).items()}}
    print(f"== soak: load average before {os.getloadavg()}", flush=True)
    print("== ingest only (gunicorn alone, reference rate)", flush=True)
    results["ingest_only"] = ingest_only(spans=args.ingest_spans, senders=args.senders, web_workers=args.web_workers)
    print(f"   {results['ingest_only']}", flush=True)
    harness.BENCH_DB = SOAK_DB
    url = harness.bench_database_url(fresh=True)
    harness.setup_django(url)
    harness.migrate()
    from django.db import connection

    from ingest.models import IngestKey
    from ingest.services import key_create, project_create

    project, key = project_create(name="soak")
    read_key = key_create(project=project, scopes=[IngestKey.SCOPE_READ])[1]
    log_path = RESULTS / "soak-stack.log"
    RESULTS.mkdir(parents=True, exist_ok=True)
    stack = Stack(url, port=harness.free_port(), web_workers=args.web_workers,
                  worker_concurrency=args.worker_concurrency, log=log_path)
    traffic = Traffic()
    senders = None
    try:
        stack.wait_up()
        senders = Senders(f"{stack.url}/v1/traces", key, args.senders)
        started = time.monotonic()
        watch = Watch(stack, project.pk, read_key, senders, started)

        def tick(phase):
            def inner():
                if watch.due():
                    watch.sample(phase, traffic.count * SPANS_PER_TRACE)
            return inner

        phases = results["phases"] = {}
        # 2. the soak
        print(f"== soak: {args.rate:,} spans/s for {args.duration} s", flush=True)
        phases["soak"] = drive(traffic, senders, phase="soak", rate=args.rate, seconds=args.duration,
                               batch=args.batch, on_tick=tick("soak"))
        senders.queue.join()
        drained = wait_drained(project.pk, timeout=args.drain_timeout)
        watch.sample("soak", traffic.count * SPANS_PER_TRACE)
        phases["soak"].update(lag_stats(project.pk, "soak", datetime.now(tz=UTC)), drain_seconds=round(drained, 1))
        phases["soak"]["memory_growth_last_5min"] = memory_growth(watch.rows, window=min(300, args.duration / 2))
        phases["soak"]["cpu_pct"] = cpu_share(watch.rows, "soak")
        # 3. a burst
        print(f"== burst: {args.burst:,} spans as fast as {args.senders} senders go", flush=True)
        batches = burst(traffic, senders, phase="burst", spans=args.burst, batch=args.batch)
        burst_spans = sum(len(b) for b in batches)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [project.pk])
            before = cursor.fetchone()[0]
        t0 = time.monotonic()
        t0_wall = datetime.now(tz=UTC)
        for b in batches:
            senders.queue.put((b, None))
        stored_at = None
        deadline = t0 + args.drain_timeout
        while time.monotonic() < deadline:
            if watch.due():
                watch.sample("burst", traffic.count * SPANS_PER_TRACE)
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [project.pk])
                if cursor.fetchone()[0] >= before + burst_spans:
                    stored_at = time.monotonic() - t0
                    break
            time.sleep(0.1)
        senders.queue.join()
        drained = wait_drained(project.pk, timeout=args.drain_timeout)
        stats = lag_stats(project.pk, "burst", datetime.now(tz=UTC))
        analysed_at = (stats["last_analysed"] - t0_wall).total_seconds() if stats["last_analysed"] else None
        phases["burst"] = {"spans": burst_spans, "store_seconds": _r(stored_at), "last_analysed_seconds": _r(analysed_at),
                           "ratio": _r(analysed_at / stored_at) if analysed_at and stored_at else None,
                           "stored_spans_per_s": round(burst_spans / stored_at) if stored_at else None,
                           "drain_seconds": round(drained, 1), **stats}
        print(f"   burst: stored in {_f(stored_at)} s, last task analysed at {_f(analysed_at)} s", flush=True)
        # 4. the rate search
        search = phases["search"] = []
        rate, passed, failed = args.rate, None, None
        for step in range(args.search_steps):
            name = f"r{int(rate)}"
            print(f"== search {step + 1}/{args.search_steps}: {rate:,.0f} spans/s for {args.search_seconds} s",
                  flush=True)
            result = drive(traffic, senders, phase=name, rate=rate, seconds=args.search_seconds, batch=args.batch,
                           on_tick=tick(name))
            senders.queue.join()
            stats = lag_stats(project.pk, name, datetime.now(tz=UTC))
            drained = wait_drained(project.pk, timeout=args.drain_timeout)
            ok = stats["lag_p95_s"] is not None and stats["lag_p95_s"] <= args.lag_target
            result.update(stats, rate=rate, sustained=ok, drain_seconds=round(drained, 1),
                          sent_per_s=round(result["spans"] / max(result["seconds"], 1e-6)))
            search.append(result)
            print(f"   {rate:,.0f} spans/s: lag p95 {_f(stats['lag_p95_s'])} s → {'sustained' if ok else 'not sustained'}",
                  flush=True)
            if ok:
                passed = max(passed or 0, rate)
            else:
                failed = min(failed or rate, rate)
            rate = (passed + failed) / 2 if passed and failed else rate * 1.5 if ok else rate / 1.5
            if passed and failed and failed - passed <= 0.1 * passed:
                break
        sustained = max((r["sent_per_s"] for r in search if r["sustained"]), default=None)
        reference = results["ingest_only"].get("spans_per_s")
        results["ceiling"] = {"spans_per_s": sustained, "ingest_only_spans_per_s": reference,
                              "fraction_of_ingest": _r(sustained / reference) if sustained and reference else None}
        senders.stop()
        results["http"] = dict(senders.statuses)
        results["failed_batches"] = senders.failed_batches
        results["by_id"] = count_by_id(project.pk, senders.acked_ids())
        harness.purge_bench_queue()  # the ingest-only reference published analysis messages nobody takes
    finally:
        if senders:
            senders.stop()
        stack.stop()
    results["rows"] = watch.rows
    results["machine"]["load_average_after"] = os.getloadavg()
    return results


def summary(results: dict) -> list[tuple[str, str, str]]:
    soak = results["phases"]["soak"]
    by_id = results["by_id"]
    http = results.get("http", {})
    five = sum(v for k, v in http.items() if k.startswith("5") and not k.startswith("503 with"))
    rows = [
        ("spans sent (acknowledged) / stored, by id", f"{by_id['acknowledged']:,} / {by_id['stored']:,}", ""),
        ("lost / duplicated", f"{by_id['lost']} / {by_id['duplicated']}", "0 / 0"),
        ("HTTP statuses", ", ".join(f"{k}: {v:,}" for k, v in sorted(http.items())), "0 5xx; 429/503 with Retry-After"),
        ("5xx without Retry-After", str(five), "0"),
        (f"soak: {results['params']['rate']:,} spans/s × {results['params']['duration']} s, tasks",
         f"{soak['tasks']:,} ({soak['analysed']:,} analysed)", ""),
        ("soak: analysis lag, task end → findings, p50 / p95 / max (s)",
         f"{_f(soak['lag_p50_s'])} / {_f(soak['lag_p95_s'])} / {_f(soak['lag_max_s'])}", "p95 ≤ 30"),
        ("soak: of which delivery (task end → last span stored) p50 / p95 (s)",
         f"{_f(soak['delivery_p50_s'])} / {_f(soak['delivery_p95_s'])}", ""),
        ("soak: analysis lag from arrival (last span stored → findings) p50 / p95 / max (s)",
         f"{_f(soak['arrival_lag_p50_s'])} / {_f(soak['arrival_lag_p95_s'])} / {_f(soak['arrival_lag_max_s'])}", ""),
        ("soak: largest memory growth of a stack process over the last 5 min",
         max((f"{v['growth_pct']:+.1f} % ({k})" for k, v in soak["memory_growth_last_5min"].items()
              if k not in ("postgres", "soak driver")), key=lambda s: float(s.split()[0]), default="—"), "≤ 10 %"),
        ("soak: Postgres (all its processes) memory over the last 5 min",
         "{from_mib:,.0f} → {to_mib:,.0f} MiB ({growth_pct:+.1f} %)".format(
             **soak["memory_growth_last_5min"]["postgres"]) if "postgres" in soak["memory_growth_last_5min"] else "—", ""),
        ("soak: CPU % of one core (mean)", ", ".join(f"{k} {v:.0f}" for k, v in sorted(soak["cpu_pct"].items())), ""),
    ]
    burst = results["phases"]["burst"]
    rows.append((f"burst of {burst['spans']:,} spans: stored in / last task analysed at (s)",
                 f"{_f(burst['store_seconds'])} / {_f(burst['last_analysed_seconds'])} (×{_f(burst['ratio'])})", "≤ 2×"))
    for r in results["phases"]["search"]:
        rows.append((f"search: {r['rate']:,.0f} spans/s ({r['sent_per_s']:,} sent/s) lag p95 (s)", _f(r["lag_p95_s"]),
                     "sustained" if r["sustained"] else "not sustained"))
    ceiling = results["ceiling"]
    rows.append(("sustained rate with lag p95 ≤ 30 s, spans/s (÷ ingest-only rate)",
                 f"{ceiling['spans_per_s'] or '—'} (÷ {ceiling['ingest_only_spans_per_s'] or '—'} = "
                 f"{_f(ceiling['fraction_of_ingest'])})", ""))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=3000, help="spans/s of the soak")
    parser.add_argument("--duration", type=float, default=600, help="seconds of the soak")
    parser.add_argument("--batch", type=int, default=512, help="spans per export (BatchSpanProcessor's default)")
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=1, help="processes of the one analysis worker")
    parser.add_argument("--burst", type=int, default=96_000, help="spans of the burst")
    parser.add_argument("--ingest-spans", type=int, default=100_000, help="spans of the ingest-only reference")
    parser.add_argument("--search-steps", type=int, default=4)
    parser.add_argument("--search-seconds", type=float, default=120)
    parser.add_argument("--lag-target", type=float, default=30.0, help="analysis lag p95 the search holds (s)")
    parser.add_argument("--drain-timeout", type=float, default=600)
    parser.add_argument("--short", action="store_true", help="a smoke test: 60 s at 600 spans/s, small burst and search")
    parser.add_argument("--out", default=str(RESULTS / "soak.json"))
    args = parser.parse_args()
    if args.short:
        args.rate, args.duration, args.burst, args.ingest_spans = 600, 60, 8_000, 10_000
        args.search_steps, args.search_seconds, args.drain_timeout = 2, 20, 180
    results = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    chart(results["rows"], out.with_suffix(".html"),
          f"agentops soak: {args.rate:,.0f} spans/s × {args.duration:.0f} s, one analysis worker "
          f"(concurrency {args.worker_concurrency}), {results['started_at']}")
    rows = summary(results)
    width = max(len(r[0]) for r in rows)
    print()
    for figure, value, target in rows:
        print(f"{figure:<{width}}  {value}  {('[' + target + ']') if target else ''}")
    print(f"\nload average before {results['machine']['load_average_before']}, after "
          f"{results['machine']['load_average_after']}; {out} and {out.with_suffix('.html')}")


if __name__ == "__main__":
    main()
