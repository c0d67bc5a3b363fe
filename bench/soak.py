"""Soak: the whole stack under sustained OTLP load on this machine, end to end.

    make soak                                          # 3,000 spans/s for 10 minutes, then a burst and a rate search
    .venv/bin/python bench/soak.py --rate 3000 --duration 600
    .venv/bin/python bench/soak.py --short             # a smoke test: ~3 minutes in all

What runs: `manage.py runstack` (gunicorn web, one analysis worker of `--worker-concurrency`
processes, the periodic worker, beat) on a scratch database beside the product's
(`agentops_bench_soak`, the embedded Postgres or DATABASE_URL's server) and a Celery queue of its
own; the broker is the embedded Redis (or CELERY_BROKER_URL). `--senders`
sender processes (spawned, so the load generator does not share one GIL) each send their share
of the rate: GenAI traces (16 spans each: an invoke_agent root, chat spans on 4 Groq devices,
tool calls; some repeat a call or stall, so the detectors find something) built as the SDK's
finished spans from fixed templates, each trace ending on its schedule, sent by the SDK's
OTLPSpanExporter (protobuf, its own retries and backoff) in batches of `--batch`, a batch when
it is full like the BatchSpanProcessor. A sender behind schedule still stamps each trace with its
scheduled end, so its delay shows in the lag. Only loopback traffic; every loop is bounded in
count and time.

Phases:
1. ingest only: bench/otlp_ingest.py (gunicorn alone, the same web workers, as fast as the
   senders go) in a child process: the reference rate of this run.
2. soak: `--rate` spans/s for `--duration` s; a report line every 10 s: spans sent and stored,
   tasks analysed, analysis lag (task end → its analysis committed, i.e. its findings visible in
   the API; still-unanalysed tasks count at their age) and the p95 of each of its stages
   (generator, ingest, wait, analysis: see "where a task's lag goes" below), backlog, rollup lag and queue depth from
   GET /api/v1/status, resident memory and CPU of every process of the stack (and Postgres).
3. drain, then a burst: `--burst` spans as fast as the senders go; the time its spans took to
   store and the time until its last task was analysed (target: ≤ 2×).
4. rate search: `--search-seconds` at rising rates (×1.5 from `--rate` until the analysis lag
   p95 exceeds `--lag-target` or the backlog keeps growing, then one bisection): the highest
   rate sustained, as spans/s and as a fraction of the ingest-only rate.

At the end: sent vs stored counted by id (lost, duplicated), HTTP status counts (5xx; 429/503
with and without Retry-After), lag p50/p95/max per phase and per stage, memory growth of each process over
the last 5 minutes of the soak (target ≤ 10 %), CPU share per process; a table on stdout,
bench/results/soak.json and a Plotly chart bench/results/soak.html (rate, lag, memory over time).

Everything it starts stops when it ends, by an error, Ctrl-C or SIGTERM too: the senders, the
reference's web server, the stack, and the embedded PostgreSQL and Redis unless they were running
before it started (`make soak`'s bench/run.py started them, or a `make demo` on the same folder).
"""

from __future__ import annotations

import argparse
import contextlib
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
    """GenAI traces as the SDK's own finished spans (ReadableSpan, what a BatchSpanProcessor hands
    its exporter), built straight from fixed templates: the tracer's context and processor
    machinery costs ~35 µs a span, which the load generator would take from the stack's 2 cores."""

    def __init__(self, seed: int = 7, *, first: int = 0, step: int = 1):
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.rng = random.Random(seed)
        self.scope = InstrumentationScope("agentops-soak")
        self.resources: dict[str, object] = {}
        self.count = 0  # traces made by this Traffic
        self._number, self._step = first, step  # this sender's trace numbers: first, first + step, …

    def resource(self, phase: str):
        from opentelemetry.sdk.resources import Resource

        if phase not in self.resources:
            self.resources[phase] = Resource.create({"service.name": "support", "service.version": phase,
                                                     "deployment.environment.name": "soak"})
        return self.resources[phase]

    def trace(self, phase: str, end_ns: int) -> tuple[int, list]:
        """One finished trace (its 16 spans) whose root ends at `end_ns`: (trace id, spans)."""
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, TraceFlags

        rng, resource, scope = self.rng, self.resource(phase), self.scope
        n = self._number
        self._number += self._step
        self.count += 1
        trace_id = rng.getrandbits(128) or 1
        sampled = TraceFlags(TraceFlags.SAMPLED)
        root_ctx = SpanContext(trace_id, rng.getrandbits(64) or 1, False, sampled)
        stall = rng.random() < 0.1
        repeat = rng.random() < 0.1
        start = end_ns - (6500 + (2000 if stall else 0)) * MS
        spans = []
        at = start
        for i in range(1, SPANS_PER_TRACE):
            if i == 8 and stall:
                at += 2000 * MS
            if i % 2:
                ttft = rng.lognormvariate(5.2, 0.15)
                dur = ttft + 150 * rng.lognormvariate(1.0, 0.1)
                name, attributes = "chat llama-3.1-70b", {
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": "groq",
                    "gen_ai.request.model": "llama-3.1-70b", "gen_ai.usage.input_tokens": 1200 + rng.randint(0, 400),
                    "gen_ai.usage.output_tokens": 150, "gen_ai.response.time_to_first_chunk": ttft / 1000,
                    "hw.id": f"groq-lpu-{n % 4}"}
            else:
                dur = rng.lognormvariate(5.0, 0.25)
                args = {"order_id": n, "q": "late delivery", "page": 2 if (repeat and i == 4) else i}
                name, attributes = "execute_tool search_orders", {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders",
                    "gen_ai.tool.call.id": f"call_{n}_{i}", "gen_ai.tool.call.arguments": json.dumps(args)}
            spans.append(ReadableSpan(
                name=name, context=SpanContext(trace_id, rng.getrandbits(64) or 1, False, sampled), parent=root_ctx,
                resource=resource, attributes=attributes, instrumentation_scope=scope,
                start_time=at, end_time=at + int(min(dur, 390) * MS)))
            at += 400 * MS
        spans.append(ReadableSpan(
            name="invoke_agent support", context=root_ctx, parent=None, resource=resource,
            instrumentation_scope=scope, start_time=start, end_time=end_ns, attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                "gen_ai.conversation.id": f"conv-{n % 500}"}))
        return trace_id, spans


def burst_traces(spans: int, processes: int, batch: int) -> int:
    """Traces each sender makes for a burst of `spans` (whole batches)."""
    per_batch = max(1, batch // SPANS_PER_TRACE)
    return -(-spans // (processes * SPANS_PER_TRACE * per_batch)) * per_batch if spans > 0 else 0


def _sender(index: int, processes: int, endpoint: str, key: str, commands, reports, go) -> None:
    """One sender process: its own Traffic and OTLPSpanExporter (protobuf, the exporter's own HTTP
    client, retries and backoff); runs the commands the parent sends and reports every export."""
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    statuses: Counter = Counter()

    def hook(response, *args, **kwargs):
        code = response.status_code
        label = str(code)
        if code in (429, 503):
            label += " with Retry-After" if response.headers.get("Retry-After") else " WITHOUT Retry-After"
        statuses[label] += 1

    session = requests.Session()
    session.hooks["response"].append(hook)
    exporter = OTLPSpanExporter(endpoint=endpoint, headers={"Authorization": f"Bearer {key}"}, timeout=60,
                                session=session)
    traffic = Traffic(seed=7 + index, first=index, step=processes)

    def send(phase: str, spans: list, traces: list[int], behind: float) -> None:
        sent = time.time()
        ok = exporter.export(spans) == SpanExportResult.SUCCESS
        answered = time.time()
        # Ids as packed bytes (16 + 8 per span): a soak acknowledges millions of spans.
        ids = b"".join(s.context.trace_id.to_bytes(16) + s.context.span_id.to_bytes(8) for s in spans) if ok else b""
        reports.put(("batch", {"phase": phase, "ok": ok, "spans": len(spans), "ids": ids,
                               "traces": b"".join(t.to_bytes(16) for t in traces), "sent": sent,
                               "answered": answered, "behind": behind, "statuses": dict(statuses)}))
        statuses.clear()

    per_batch = 1
    while (command := commands.get()) is not None:
        kind, phase, rate, seconds, batch = command
        per_batch = max(1, batch // SPANS_PER_TRACE)
        made = 0
        if kind == "drive":
            # This process's share of the rate, each trace ending on its schedule; like the
            # BatchSpanProcessor, a batch is exported when it is full, i.e. when its last trace
            # has ended. A sender behind schedule still stamps each trace with its scheduled end,
            # so its delay counts in the lag (stage "generator") instead of vanishing.
            interval = SPANS_PER_TRACE * processes / rate
            limit = int(rate * seconds / processes) // SPANS_PER_TRACE
            t0 = time.time()
            give_up = t0 + seconds + 60
            while made < limit and time.time() < give_up:
                n = min(per_batch, limit - made)
                due = t0 + (made + n - 1) * interval
                if (wait := due - time.time()) > 0:
                    time.sleep(wait)
                behind = time.time() - due
                spans, traces = [], []
                for k in range(made, made + n):
                    trace_id, trace_spans = traffic.trace(phase, int((t0 + k * interval) * 1e9))
                    traces.append(trace_id)
                    spans.extend(trace_spans)
                send(phase, spans, traces, behind)
                made += n
        else:  # burst: `rate` spans in all, made up front (ended now), sent as fast as we go
            batches = []
            while made < burst_traces(rate, processes, batch):
                now = time.time_ns()
                made_here = [traffic.trace(phase, now) for _ in range(per_batch)]
                batches.append(([s for _, t in made_here for s in t], [t for t, _ in made_here]))
                made += per_batch
            reports.put(("ready", index))
            go.wait(timeout=600)
            for spans, traces in batches:
                send(phase, spans, traces, 0.0)
        reports.put(("done", index, made * SPANS_PER_TRACE))


class Senders:
    """`processes` sender processes (spawned: no GIL, no Django shared with the driver), each with
    its own exporter; a thread here collects their reports: HTTP statuses (and whether 429/503
    came with Retry-After), acknowledged span ids, when each trace was handed to export() and
    answered, and how far behind schedule each batch was sent."""

    def __init__(self, endpoint: str, key: str, processes: int):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.commands = [ctx.Queue() for _ in range(processes)]
        self.reports = ctx.Queue()
        self.go = ctx.Event()
        self.procs = [ctx.Process(target=_sender, args=(i, processes, endpoint, key, self.commands[i], self.reports,
                                                        self.go), daemon=True) for i in range(processes)]
        for p in self.procs:
            p.start()
        self.statuses: Counter = Counter()
        self.acked: list[bytes] = []
        self.failed_batches = 0
        self.sent_spans = 0
        self.sent: list[tuple[str, float, float]] = []  # (trace id, handed to export(), answered), unflushed
        self.behind: dict[str, list[float]] = defaultdict(list)
        self.window_behind: list[float] = []
        self.lock = threading.Lock()
        self.replies: queue.Queue = queue.Queue()
        self.stopped = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while (message := self.reports.get()) is not None:
            if message[0] != "batch":
                self.replies.put(message)
                continue
            b = message[1]
            traces = [b["traces"][i:i + 16].hex() for i in range(0, len(b["traces"]), 16)]
            with self.lock:
                self.statuses.update(b["statuses"])
                self.sent_spans += b["spans"]
                if b["ok"]:
                    self.acked.append(b["ids"])
                else:
                    self.failed_batches += 1
                self.sent.extend((t, b["sent"], b["answered"]) for t in traces)
                self.behind[b["phase"]].append(b["behind"])
                self.window_behind.append(b["behind"])

    def _command(self, command: tuple, *, on_tick=None, timeout: float = 3600) -> int:
        """Send a command to every process; wait (ticking) until all are done: spans made."""
        for q in self.commands:
            q.put(command)
        made, waiting, deadline = 0, len(self.procs), time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            if on_tick:
                on_tick()
            try:
                message = self.replies.get(timeout=0.2)
            except queue.Empty:
                continue
            if message[0] == "done":
                made += message[2]
                waiting -= 1
        return made

    def drive(self, *, phase: str, rate: float, seconds: float, batch: int, on_tick=None) -> dict:
        """`rate` spans/s for `seconds`, shared by the processes; waits until all are sent."""
        started = time.monotonic()
        made = self._command(("drive", phase, rate, seconds, batch), on_tick=on_tick, timeout=seconds + 600)
        with self.lock:
            behind = sorted(self.behind[phase])
        return {"phase": phase, "spans": made, "seconds": round(time.monotonic() - started, 1),
                "behind_p95_s": _r(behind[int(0.95 * (len(behind) - 1))]) if behind else None,
                "behind_max_s": _r(behind[-1]) if behind else None}

    def burst(self, *, phase: str, spans: int, batch: int, on_start, on_tick=None) -> int:
        """`spans` spans made up front by the processes, then sent as fast as they go; `on_start`
        is called when every process is ready, just before they start sending. Spans sent."""
        for q in self.commands:
            q.put(("burst", phase, spans, 0, batch))
        ready = 0
        while ready < len(self.procs):
            message = self.replies.get(timeout=600)
            ready += message[0] == "ready"
        on_start()
        self.go.set()
        made, waiting = 0, len(self.procs)
        while waiting:
            if on_tick:
                on_tick()
            try:
                message = self.replies.get(timeout=0.2)
            except queue.Empty:
                continue
            if message[0] == "done":
                made += message[2]
                waiting -= 1
        self.go.clear()
        return made

    def take_window_behind(self) -> float | None:
        with self.lock:
            values, self.window_behind = self.window_behind, []
        return max(values) if values else None

    def stop(self, *, at_once: bool = False) -> None:
        """Each sender ends after its command (`at_once`: now, mid-command, as on Ctrl-C)."""
        if self.stopped:
            return
        self.stopped = True
        for q in self.commands:
            q.put(None)
        for p in self.procs:
            if at_once:
                p.terminate()
            p.join(timeout=10 if at_once else 120)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        self.reports.put(None)
        self.reader.join(timeout=30)

    def acked_ids(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(b[i:i + 16].hex(), b[i + 16:i + 24].hex()) for b in self.acked for i in range(0, len(b), 24)]


# --- the stack and what we watch -----------------------------------------------------------------


def broker_url() -> str:
    if os.environ.get("CELERY_BROKER_URL"):
        return os.environ["CELERY_BROKER_URL"]
    from agentops import embedded

    return embedded.redis_url(harness.data_dir())


def stack_env(database_url: str, data_dir: Path) -> dict[str, str]:
    env = harness.bench_env(database_url)
    # A broker URL given explicitly: runstack leaves a broker it did not start running.
    env.update({"AGENTOPS_QUEUE": SOAK_QUEUE, "CELERY_BROKER_URL": broker_url(), "LOG_LEVEL": "INFO",
                "AGENTOPS_DATA_DIR": str(data_dir), "AGENTOPS_KEY_RATE_LIMIT": "1000/second"})
    return env


class Stack:
    def __init__(self, database_url: str, *, port: int, web_workers: int, worker_concurrency: int, log: Path):
        # Its beat schedule and gunicorn's control socket: in the product's data folder, one per
        # folder, so that two soaks on two folders never share them.
        data_dir = harness.data_dir() / "soak"
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
        """runstack stops its children (web, workers, beat: each in a session of its own) on
        SIGTERM; any of them still there once runstack is gone is killed."""
        import psutil

        left = [p for role, p in self.processes().items() if role != "runstack"]
        harness.stop_process(self.proc, grace=60, group=True)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        self.log.close()


def postgres_processes():
    """The Postgres server's processes (the embedded one, or none known for DATABASE_URL)."""
    import psutil

    pidfile = harness.data_dir() / "postgres" / "postmaster.pid"
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
        self.prev_stored = self.prev_sent = 0
        self.prev_at = time.monotonic()
        self.prev_report = datetime.now(tz=UTC)

    def due(self) -> bool:
        return time.monotonic() - self.last >= REPORT_SECONDS

    def sample(self, phase: str) -> dict:
        import psutil
        import requests
        from django.db import connection

        self.last = now_m = time.monotonic()
        sent_flush(self.senders)
        sent, behind = self.senders.sent_spans, self.senders.take_window_behind()
        now = datetime.now(tz=UTC)
        memory, cpu = {}, {}
        procs = self.stack.processes()
        pg = postgres_processes()
        wall = max(now_m - self.prev_at, 1e-6)
        senders = []
        for p in self.senders.procs:
            try:
                senders.append(psutil.Process(p.pid))
            except psutil.Error:
                pass
        for role, proc in list(procs.items()) + [("postgres", None), ("soak driver", psutil.Process()),
                                                 ("soak senders", None)]:
            try:
                group = pg if role == "postgres" else senders if role == "soak senders" else [proc]
                # Postgres's processes share its buffers: their proportional share, not RSS, adds up.
                rss = (sum(p.memory_full_info().pss for p in group) if role == "postgres"
                       else sum(p.memory_info().rss for p in group))
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
                FROM ingest_task t LEFT JOIN analysis_taskanalysis a
                     ON a.task_id = t.id AND a.project_id = t.project_id
                WHERE t.project_id = %s""", [now, self.project_id])
            analysed, backlog, oldest = cursor.fetchone()
            p95s = ", ".join(f"percentile_cont(0.95) WITHIN GROUP (ORDER BY {s})" for s in STAGES)
            cursor.execute(f"""
                SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY lag), max(lag),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY arrival), {p95s}
                FROM ({_TASK_LAGS.format(analysed="a.analyzed_at")}
                      WHERE t.project_id = %s AND a.analyzed_at > %s) x""", [self.project_id, self.prev_report])
            n, p50, p95, mx, arrival95, *stage95 = cursor.fetchone()
        try:
            status = requests.get(f"{self.stack.url}/api/v1/status", timeout=10,
                                  headers={"Authorization": f"Bearer {self.read_key}"}).json()
        except (requests.RequestException, ValueError):
            status = {}
        row = {"t": round(now_m - self.started, 1), "phase": phase, "sent": sent,
               "acked": sum(len(b) for b in self.senders.acked) // 24, "stored": stored,
               "sent_per_s": round((sent - self.prev_sent) / wall), "generator_behind_max_s": _r(behind),
               "stored_per_s": round((stored - self.prev_stored) / wall), "analysed_tasks": analysed,
               "backlog_tasks": backlog, "oldest_unanalysed_s": round(float(oldest or 0), 1),
               "lag_n": n, "lag_p50": _r(p50), "lag_p95": _r(p95), "lag_max": _r(mx), "arrival_lag_p95": _r(arrival95),
               **{f"{name}_p95": _r(v) for name, v in zip(STAGES, stage95, strict=True)},
               "status_lag_s": (status.get("analysis") or {}).get("lag_seconds"),
               "rollup_lag_s": (status.get("rollups") or {}).get("lag_seconds"),
               "queue_depth": status.get("queue_depth"), "memory_mib": memory, "cpu_pct": cpu,
               "http": dict(self.senders.statuses)}
        self.prev_stored, self.prev_sent, self.prev_at, self.prev_report = stored, sent, now_m, now
        self.rows.append(row)
        print(f"[{row['t']:6.0f}s {phase:>8}] sent {sent:>9,} ({row['sent_per_s']:>5,}/s, behind ≤ {_f(behind)} s)"
              f" stored {stored:>9,} ({row['stored_per_s']:>5,}/s)"
              f"  analysed {analysed:>7,} backlog {backlog:>6,} (oldest {row['oldest_unanalysed_s']:5.0f} s)"
              f"  lag p50/p95/max {_f(p50)}/{_f(p95)}/{_f(mx)} s"
              f" = p95 gen {_f(stage95[0])} + ingest {_f(stage95[1])} + wait {_f(stage95[2])} + analysis {_f(stage95[3])}"
              f"  rollup lag {_f(row['rollup_lag_s'])} s"
              f"  queue {row['queue_depth']}  rss {sum(memory.values()):,.0f} MiB", flush=True)
        return row


# --- where a task's lag goes ----------------------------------------------------------------------
#
# A task's lag (its end, as its root span says → its analysis committed) in four stages, each from
# timestamps of the same machine's clock:
#   generator  task end → its batch handed to OTLPSpanExporter.export()   (the load generator)
#   ingest     handed to export() → stored (Task.last_event_at, the server's clock at the store)
#   wait       stored → claimed by the analysis worker: the quiet period (ANALYSIS_QUIET_SECONDS)
#              plus the trigger's countdown, the broker and the worker being busy with other batches
#   analysis   claimed → committed (TaskAnalysis.analyzed_at): load, detectors, store
# The send times come from the senders (table soak_sent); the claim times from a trigger on
# analysis_taskanalysis in the scratch database (table soak_claim): the product is not changed.

_STAGES_SQL = """
CREATE TABLE IF NOT EXISTS soak_sent (task_id text PRIMARY KEY, sent_at timestamptz, answered_at timestamptz);
CREATE TABLE IF NOT EXISTS soak_claim (task_id bigint PRIMARY KEY, claimed_at timestamptz, after_sweep bool);
CREATE OR REPLACE FUNCTION soak_claim_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- A worker's claim (not the sweep's 'queued' lease, not the release after storing).
  IF NEW.claimed_until IS NOT NULL AND NEW.claim_token NOT IN ('', 'queued')
     AND (TG_OP = 'INSERT' OR NEW.claim_token IS DISTINCT FROM OLD.claim_token) THEN
    INSERT INTO soak_claim VALUES (NEW.task_id, clock_timestamp(), TG_OP = 'UPDATE' AND OLD.claim_token = 'queued')
    ON CONFLICT (task_id) DO UPDATE SET claimed_at = EXCLUDED.claimed_at, after_sweep = EXCLUDED.after_sweep;
  END IF;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS soak_claim_seen ON analysis_taskanalysis;
CREATE TRIGGER soak_claim_seen AFTER INSERT OR UPDATE ON analysis_taskanalysis
  FOR EACH ROW EXECUTE FUNCTION soak_claim_seen();
"""

STAGES = ("generator", "ingest", "wait", "analysis")
STAGE_LABELS = (("generator", "generator (task end → handed to export())"),
                ("ingest", "ingest (handed to export() → stored)"),
                ("wait", "wait (stored → claimed: quiet period, trigger, queue)"),
                ("analysis", "analysis (claimed → committed)"))

# Per task: the whole lag, the lag from arrival, and each stage (NULL where a timestamp is missing).
_TASK_LAGS = """SELECT extract(epoch FROM {analysed} - t.ended_at) AS lag,
       extract(epoch FROM {analysed} - t.last_event_at) AS arrival,
       extract(epoch FROM t.last_event_at - t.ended_at) AS delivery,
       extract(epoch FROM s.sent_at - t.ended_at) AS generator,
       extract(epoch FROM t.last_event_at - s.sent_at) AS ingest,
       extract(epoch FROM c.claimed_at - t.last_event_at) AS wait,
       extract(epoch FROM a.analyzed_at - c.claimed_at) AS analysis,
       c.after_sweep, a.analyzed_at, t.ended_at
FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id AND a.project_id = t.project_id
LEFT JOIN soak_sent s ON s.task_id = t.task_id LEFT JOIN soak_claim c ON c.task_id = t.id"""


def stages_install() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_STAGES_SQL)


def sent_flush(senders) -> None:
    """Copy the send times the senders recorded since the last flush into soak_sent."""
    from django.db import connection

    with senders.lock:
        rows, senders.sent = senders.sent, []
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE IF NOT EXISTS soak_sent_new (task_id text, sent_at float8, answered_at float8)")
        with cursor.cursor.copy("COPY soak_sent_new FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute("""INSERT INTO soak_sent SELECT task_id, to_timestamp(min(sent_at)), to_timestamp(max(answered_at))
                          FROM soak_sent_new GROUP BY task_id ON CONFLICT (task_id) DO NOTHING""")
        cursor.execute("TRUNCATE soak_sent_new")


def _r(value) -> float | None:
    return None if value is None else round(float(value), 2)


def _f(value) -> str:
    return "—" if value is None else f"{float(value):.1f}"


def lag_stats(project_id: int, release: str, now: datetime) -> dict:
    """Lag of every task of a phase (task end → analysis committed); unanalysed tasks count at
    their age now. Also from arrival (its last span stored → analysed: what the server adds), the
    delivery delay (task end → its last span stored) and each stage of _TASK_LAGS, p50/p95/max."""
    from django.db import connection

    figures = ("lag", "arrival", "delivery", *STAGES)
    columns = ", ".join(f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {f}), "
                        f"percentile_cont(0.95) WITHIN GROUP (ORDER BY {f}), max({f})" for f in figures)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            SELECT count(*), count(analyzed_at), min(ended_at), max(ended_at), max(analyzed_at),
                   count(*) FILTER (WHERE after_sweep), {columns}
            FROM ({_TASK_LAGS.format(analysed="coalesce(a.analyzed_at, %s)")}
                  WHERE t.project_id = %s AND t.release = %s) x""", [now, now, project_id, release])
        tasks, analysed, first_end, last_end, last_analysed, after_sweep, *values = cursor.fetchone()
    out = {"tasks": tasks, "analysed": analysed, "claimed_after_sweep": after_sweep,
           "first_end": first_end, "last_end": last_end, "last_analysed": last_analysed}
    for i, f in enumerate(figures):
        prefix = {"lag": "lag", "arrival": "arrival_lag"}.get(f, f)
        out.update({f"{prefix}_p50_s": _r(values[3 * i]), f"{prefix}_p95_s": _r(values[3 * i + 1]),
                    f"{prefix}_max_s": _r(values[3 * i + 2])})
    return out


def wait_drained(project_id: int, *, timeout: float) -> float:
    """Seconds until every ended task of the project is analysed (bounded by `timeout`)."""
    from django.db import connection

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with connection.cursor() as cursor:
            cursor.execute("""SELECT count(*) FROM ingest_task t LEFT JOIN analysis_taskanalysis a
                                   ON a.task_id = t.id AND a.project_id = t.project_id
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
    for key in ("lag_p50", "lag_p95", "lag_max", *(f"{stage}_p95" for stage in STAGES)):
        fig.add_trace(go.Scatter(x=t, y=[r.get(key) for r in rows], name=key.replace("_", " ")), 2, 1)
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
    """The reference: bench/otlp_ingest.py (gunicorn alone, as fast as it stores) in a child;
    `spans` 0 leaves it out."""
    if spans <= 0:
        return {"skipped": "--ingest-spans 0"}
    proc = harness.run_process([sys.executable, str(ROOT / "bench" / "otlp_ingest.py"), "--spans", str(spans),
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
    stages_install()
    from django.db import connection

    from ingest.models import IngestKey
    from ingest.services import key_create, project_create

    project, key = project_create(name="soak")
    read_key = key_create(project=project, scopes=[IngestKey.SCOPE_READ])[1]
    log_path = Path(args.out).with_name("soak-stack.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stack = Stack(url, port=harness.free_port(), web_workers=args.web_workers,
                  worker_concurrency=args.worker_concurrency, log=log_path)
    senders = None
    try:
        stack.wait_up()
        senders = Senders(f"{stack.url}/v1/traces", key, args.senders)
        started = time.monotonic()
        watch = Watch(stack, project.pk, read_key, senders, started)

        def tick(phase):
            def inner():
                if watch.due():
                    watch.sample(phase)
            return inner

        phases = results["phases"] = {}
        # 2. the soak
        print(f"== soak: {args.rate:,} spans/s for {args.duration} s", flush=True)
        phases["soak"] = senders.drive(phase="soak", rate=args.rate, seconds=args.duration, batch=args.batch,
                                       on_tick=tick("soak"))
        phases["soak"]["sent_per_s"] = round(phases["soak"]["spans"] / max(phases["soak"]["seconds"], 1e-6))
        drained = wait_drained(project.pk, timeout=args.drain_timeout)
        watch.sample("soak")  # flushes the send times too
        phases["soak"].update(lag_stats(project.pk, "soak", datetime.now(tz=UTC)), drain_seconds=round(drained, 1))
        phases["soak"]["memory_growth_last_5min"] = memory_growth(watch.rows, window=min(300, args.duration / 2))
        phases["soak"]["cpu_pct"] = cpu_share(watch.rows, "soak")
        # 3. a burst
        print(f"== burst: {args.burst:,} spans as fast as {args.senders} senders go", flush=True)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [project.pk])
            before = cursor.fetchone()[0]
        expected = burst_traces(args.burst, args.senders, args.batch) * args.senders * SPANS_PER_TRACE
        marks: dict = {}

        def burst_started():
            marks["t0"], marks["wall"] = time.monotonic(), datetime.now(tz=UTC)

        def burst_tick():
            if watch.due():
                watch.sample("burst")
            if "t0" in marks and "stored" not in marks:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [project.pk])
                    if cursor.fetchone()[0] >= before + expected:
                        marks["stored"] = time.monotonic() - marks["t0"]

        burst_spans = senders.burst(phase="burst", spans=args.burst, batch=args.batch, on_start=burst_started,
                                    on_tick=burst_tick)
        deadline = time.monotonic() + 60
        while "stored" not in marks and time.monotonic() < deadline:  # every export was acknowledged
            burst_tick()
            time.sleep(0.1)
        t0_wall, stored_at = marks["wall"], marks.get("stored")
        drained = wait_drained(project.pk, timeout=args.drain_timeout)
        sent_flush(senders)
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
            result = senders.drive(phase=name, rate=rate, seconds=args.search_seconds, batch=args.batch,
                                   on_tick=tick(name))
            sent_flush(senders)
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
    except BaseException:
        if senders:
            senders.stop(at_once=True)
        raise
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
        ("soak: spans sent, sent/s (over the phase's whole time); batches sent behind schedule p95 / max (s)",
         f"{soak['spans']:,}, {soak.get('sent_per_s', 0):,}/s; {_f(soak.get('behind_p95_s'))} / "
         f"{_f(soak.get('behind_max_s'))}", f"{results['params']['rate']:,.0f}/s"),
        ("soak: analysis lag, task end → findings, p50 / p95 / max (s)",
         f"{_f(soak['lag_p50_s'])} / {_f(soak['lag_p95_s'])} / {_f(soak['lag_max_s'])}", "p95 ≤ 30"),
        *[(f"soak: of which {label}, p50 / p95 / max (s)",
           " / ".join(_f(soak.get(f"{stage}_{q}_s")) for q in ("p50", "p95", "max")), "")
          for stage, label in STAGE_LABELS],
        ("soak: lag from arrival (last span stored → findings) p50 / p95 / max (s)",
         f"{_f(soak['arrival_lag_p50_s'])} / {_f(soak['arrival_lag_p95_s'])} / {_f(soak['arrival_lag_max_s'])}", ""),
        ("soak: tasks the sweep found due and unclaimed (queued) before a worker claimed them",
         f"{soak.get('claimed_after_sweep') or 0:,}", ""),
        ("soak: largest memory growth of a stack process over the last 5 min",
         max((f"{v['growth_pct']:+.1f} % ({k})" for k, v in soak["memory_growth_last_5min"].items()
              if k not in ("postgres", "soak driver", "soak senders")), key=lambda s: float(s.split()[0]), default="—"), "≤ 10 %"),
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
    parser.add_argument("--senders", type=int, default=4, help="sender processes (and the reference's threads)")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=1, help="processes of the one analysis worker")
    parser.add_argument("--burst", type=int, default=96_000, help="spans of the burst")
    parser.add_argument("--ingest-spans", type=int, default=100_000,
                        help="spans of the ingest-only reference (0: leave it out)")
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
    harness.stop_on_signals()
    try:
        with harness.embedded_services():
            report(args, run(args))
    except KeyboardInterrupt as exc:
        harness.exit_interrupted("soak", exc)


def report(args, results: dict) -> None:
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
