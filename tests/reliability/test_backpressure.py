"""Backpressure: a web worker's memory stays bounded under a flood of maximum-size batches.

The workers are the product's (agentops/gunicorn_conf.py: gthread, several threads each), so
three senders can land on one worker at once; ingest/http.py lets a process hold at most
MAX_BODY_BYTES_IN_FLIGHT of bodies (one maximum-size batch), the rest wait or are told 503 and
retry. A request may hold at most MAX_BODY_BYTES of body (16 MB, after decompression), its parsed
JSON and the records built from it. So a worker's RSS may rise by a multiple of the body size
while it handles one batch, but must not keep growing with the number of batches (nothing
accumulates between requests). The bound asserted: RSS above the idle baseline stays
under 16 × MAX_BODY_BYTES (a Python dict-heavy JSON document takes ~6–10× its text size; twice
that for headroom), and the peak in the second half of the flood is no more than 1.3× the
peak in the first half (no growth with the flood's length).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import requests

from ingest import limits
from tests.conftest import faults_pass
from tests.reliability.harness import ROOT, Tally, run_id, send_with_retries

pytestmark = [
    pytest.mark.slow,
    faults_pass,
]
SENDERS, BATCHES_EACH = 3, 4


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def max_size_batch(run: str, n: int) -> bytes:
    t0 = datetime(2026, 11, 2, tzinfo=UTC) + timedelta(hours=n)
    steps = [{"type": "step", "task_id": f"{run}-{n}", "step_id": f"s{i}", "kind": "tool", "name": "search",
              "started_at": (t0 + timedelta(milliseconds=i)).isoformat(),
              "ended_at": (t0 + timedelta(milliseconds=i + 1)).isoformat(), "attributes": {"prompt": "p" * 1200}}
             for i in range(limits.MAX_EVENTS_PER_BATCH)]
    body = json.dumps({"events": steps}).encode()
    assert len(body) < limits.MAX_BODY_BYTES
    return body


def test_worker_memory_stays_bounded_under_a_flood_of_max_size_batches(stack):
    server = stack["server"]
    workers = server.worker_pids()
    baseline = {pid: rss_bytes(pid) for pid in workers}
    samples: list[tuple[float, int]] = []  # (time, largest rise over baseline among workers)
    done = threading.Event()

    def sample():
        while not done.is_set():
            samples.append((time.monotonic(), max(rss_bytes(p) - baseline[p] for p in workers)))
            time.sleep(0.05)

    run = run_id()
    bodies = [max_size_batch(run, n) for n in range(SENDERS * BATCHES_EACH)]
    tally, statuses = Tally(), []

    def flood(mine):
        for body in mine:
            r = send_with_retries(f"{server.url}/api/v1/ingest", stack["key"], json.loads(body), tally,
                                  deadline=time.monotonic() + 120)
            statuses.append(r.status_code)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.monotonic()
    threads = [threading.Thread(target=flood, args=(bodies[i::SENDERS],)) for i in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    done.set()
    sampler.join()
    elapsed = time.monotonic() - start
    assert statuses == [200] * len(bodies), (statuses, tally.statuses)

    half = start + elapsed / 2
    first = max(rise for t, rise in samples if t < half)
    second = max(rise for t, rise in samples if t >= half)
    peak = max(first, second)
    line = {"scenario": "flood of max-size batches", "batches": len(bodies), "body_mb": round(len(bodies[0]) / 2**20, 1),
            "seconds": round(elapsed, 1), "baseline_mb": {p: round(b / 2**20) for p, b in baseline.items()},
            "peak_rise_mb": round(peak / 2**20), "first_half_mb": round(first / 2**20),
            "second_half_mb": round(second / 2**20)}
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    with open(ROOT / "test-artifacts" / "faults.txt", "a") as fh:
        fh.write(json.dumps(line) + "\n")
    print(json.dumps(line))
    assert peak < 16 * limits.MAX_BODY_BYTES, line
    assert second <= 1.3 * first + 8 * 2**20, line
    # The server still answers promptly after the flood.
    assert requests.get(f"{server.url}/api/v1/tasks", timeout=5).status_code == 401
