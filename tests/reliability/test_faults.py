"""No loss, no duplicates under faults, counted by id: what the senders had acknowledged against
what the database holds, after PostgreSQL restarts, Redis stops, or the web server is
terminated mid-stream (the OTel Collector testbed / Tempo Vulture idea, on this machine).

Each scenario runs its own throwaway PostgreSQL and Redis under a tmp folder (the shared ones
are never touched), real gunicorn, a native client with retries and the real OTel SDK exporter.
The promise checked: ingest answers a fault with a retryable status (503 + Retry-After, or a
closed connection), never a 500; an acknowledged event is durable; a resent one is stored
once. Sent/stored counts are appended to test-artifacts/faults.txt.

These take 20–40 s each, so they run under `make faults`, not `make test`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter

import psycopg
import pytest

from agentops import embedded
from tests.conftest import faults_pass
from tests.reliability.harness import (
    ROOT,
    Server,
    Tally,
    native_batches,
    native_sender,
    otel_sender,
    run_id,
    send_with_retries,
    stored_steps,
)

pytestmark = [
    pytest.mark.slow,
    faults_pass,
]
ARTIFACT = ROOT / "test-artifacts" / "faults.txt"
SCENARIO_SECONDS = 60


def stream(server_url: str, key: str, run: str, *, during) -> tuple[Tally, Tally]:
    """Both senders at once; `during()` runs when a third of the native batches are in."""
    native, otel, progress = Tally(), Tally(), threading.Event()
    deadline = time.monotonic() + SCENARIO_SECONDS
    threads = [
        threading.Thread(target=native_sender, args=(server_url, key, run, native),
                         kwargs={"batches": 60, "steps": 10, "pace": 0.05, "deadline": deadline,
                                 "progress": progress}),
        threading.Thread(target=otel_sender, args=(server_url, key, run, otel),
                         kwargs={"traces": 60, "spans": 10, "pace": 0.05}),
    ]
    errors = []

    def guarded(target):
        def run_it(*args, **kwargs):
            try:
                target(*args, **kwargs)
            except BaseException as exc:  # surfaced in the main thread below
                errors.append(exc)
        return run_it

    for t in threads:
        t._target = guarded(t._target)
        t.start()
    assert progress.wait(SCENARIO_SECONDS), "the native sender never got a third of the way"
    during()
    for t in threads:
        t.join(SCENARIO_SECONDS)
        assert not t.is_alive(), "a sender did not finish in time"
    assert not errors, errors
    return native, otel


def check_and_report(scenario: str, database_url: str, native: Tally, otel: Tally) -> None:
    stored = Counter(stored_steps(database_url))
    sent = native.acknowledged | otel.acknowledged
    missing = sent - set(stored)
    duplicated = {k: n for k, n in stored.items() if n > 1}
    line = {"scenario": scenario, "sent": len(sent), "native_sent": len(native.acknowledged),
            "otel_sent": len(otel.acknowledged), "stored": sum(stored.values()),
            "distinct_stored": len(stored), "missing": len(missing), "duplicated": len(duplicated),
            "native_answers": native.statuses, "otel_answers": otel.statuses}
    ARTIFACT.parent.mkdir(exist_ok=True)
    with open(ARTIFACT, "a") as fh:
        fh.write(json.dumps(line) + "\n")
    print(json.dumps(line))
    assert "500" not in native.statuses, native.statuses
    assert otel.statuses.get("otel not acknowledged") == 0, otel.statuses
    assert len(native.acknowledged) >= 600 and len(otel.acknowledged) == 600
    assert not missing, sorted(missing)[:10]
    assert not duplicated, list(duplicated.items())[:10]
    assert set(stored) == sent


def test_postgres_restart_mid_stream_loses_and_duplicates_nothing(stack):
    def restart_postgres():
        embedded.stop_postgres(stack["dir"])
        time.sleep(3)
        embedded.postgres_url(stack["dir"])

    native, otel = stream(stack["server"].url, stack["key"], run_id(), during=restart_postgres)
    # The outage was seen, and seen as "retry later" (never a 500).
    assert native.statuses.get("503", 0) + native.statuses.get("connection error", 0) > 0, native.statuses
    check_and_report("postgres restart", stack["db"], native, otel)


def test_redis_down_ingest_keeps_storing_and_analysis_catches_up(stack):
    sock = embedded.redis_socket(stack["dir"])

    def stop_redis():
        embedded.stop_redis(stack["dir"])
        deadline = time.monotonic() + 10
        while embedded._redis_answers(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not embedded._redis_answers(sock), "Redis did not stop"

    native, otel = stream(stack["server"].url, stack["key"], run_id(), during=stop_redis)
    check_and_report("redis down", stack["db"], native, otel)
    assert set(native.statuses) <= {"otel SUCCESS", "otel created", "otel not acknowledged"}, native.statuses

    # Redis comes back; a worker and the sweep analyse every task that ended while it was away.
    embedded.redis_url(stack["dir"])
    env = stack["env"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "solo", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "-l", "warning"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with psycopg.connect(stack["db"], autocommit=True) as conn:
            tasks = conn.execute("SELECT count(*) FROM ingest_task").fetchone()[0]
            # The sweep (beat runs it every minute; here it is called until done) finds every
            # ended task without an analysis and enqueues it.
            deadline = time.monotonic() + SCENARIO_SECONDS
            analysed = 0
            while time.monotonic() < deadline:
                subprocess.run([sys.executable, "-c", "import django; django.setup(); "
                                "from analysis.engine.tasks import sweep; sweep()"],
                               env=env, cwd=ROOT, check=True, capture_output=True, timeout=60)
                analysed = conn.execute("SELECT count(*) FROM analysis_taskanalysis "
                                        "WHERE analyzed_at IS NOT NULL").fetchone()[0]
                if analysed == tasks:
                    break
                time.sleep(2)
        assert analysed == tasks == 120, (analysed, tasks)
    finally:
        worker.terminate()
        worker.wait(20)


def test_sigterm_of_the_web_server_mid_stream_loses_nothing(stack):
    server: Server = stack["server"]
    replacement = Server(stack["env"], port=server.port)

    in_flight, big = Tally(), {}

    def post_big_batch():
        _, ids, body = next(native_batches(run_id(), batches=1, steps=5000))
        response = send_with_retries(f"{server.url}/api/v1/ingest", stack["key"], body, in_flight,
                                     deadline=time.monotonic() + SCENARIO_SECONDS)
        big.update(status=response.status_code, ids=ids)

    def restart_web():
        # A deploy: SIGTERM while a 5,000-step batch is in flight (gunicorn finishes it and
        # exits 0), then a new server on the same port; senders retry refused connections.
        sender = threading.Thread(target=post_big_batch)
        sender.start()
        time.sleep(0.3)
        assert server.stop() == 0
        replacement.start()
        sender.join(SCENARIO_SECONDS)

    try:
        native, otel = stream(server.url, stack["key"], run_id(), during=restart_web)
    finally:
        replacement.stop()
    assert big["status"] == 200, (big, in_flight.statuses)
    native.acknowledged.update(big["ids"])
    native.statuses.update({f"in-flight batch {k}": v for k, v in in_flight.statuses.items()})
    check_and_report("web SIGTERM", stack["db"], native, otel)
