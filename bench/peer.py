"""The peer in the ingest comparison: Arize Phoenix, in a virtualenv of its own
(bench/.peer-venv, installed from PyPI on first use), started offline on a free port with a
fresh working directory under bench/.peer/, fed the very same OTLP protobuf request bodies as
agentops (bench/otlp_ingest: the SDK exporter) on its OTLP HTTP endpoint, and its stored spans
counted in its SQLite database. The rate is spans stored over the time from the first request
to the last span stored — the same definition as for agentops.

    .venv/bin/python bench/peer.py --spans 20000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VENV = ROOT / "bench" / ".peer-venv"
WORK = ROOT / "bench" / ".peer"
PHOENIX = VENV / "bin" / "phoenix"
INSTALL_LOG = WORK / "install.log"
INSTALL_TIMEOUT = 1200


def install_in_background() -> subprocess.Popen | None:
    """Start `pip install arize-phoenix` into the peer venv unless it is there; None if ready."""
    if PHOENIX.exists():
        return None
    WORK.mkdir(parents=True, exist_ok=True)
    script = (f'"{sys.executable}" -m venv "{VENV}" && "{VENV}/bin/python" -m pip install -q --upgrade pip '
              f'&& "{VENV}/bin/python" -m pip install -q arize-phoenix')
    print("   installing Arize Phoenix into bench/.peer-venv in the background "
          f"(log: {INSTALL_LOG.relative_to(ROOT)})", file=sys.stderr, flush=True)
    return subprocess.Popen(["sh", "-c", script], stdout=INSTALL_LOG.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def installed(install: subprocess.Popen | None) -> str | None:
    """None when Phoenix is ready, else why not."""
    if install is not None:
        try:
            install.wait(timeout=INSTALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(install.pid, signal.SIGTERM)
            return f"pip install arize-phoenix took over {INSTALL_TIMEOUT} s"
        if install.returncode != 0:
            tail = INSTALL_LOG.read_text(errors="replace").strip().splitlines()[-1:] if INSTALL_LOG.exists() else []
            return f"pip install arize-phoenix failed ({' '.join(tail)[:200]})"
    return None if PHOENIX.exists() else "arize-phoenix is not installed"


def _version() -> str:
    out = subprocess.run([str(VENV / "bin" / "python"), "-c",
                          "from importlib.metadata import version; print(version('arize-phoenix'))"],
                         capture_output=True, text=True)
    return out.stdout.strip()


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM spans").fetchone()[0]
    except sqlite3.Error:  # the table is not there yet, or the writer holds a lock
        return -1


def run(*, spans: int, batch: int, senders: int, timeout: float, install: subprocess.Popen | None = None) -> dict:
    import requests

    from bench import harness
    from bench.otlp_ingest import encode, make_batches, sender

    problem = installed(install)
    if problem:
        print(f"   peer skipped: {problem}", file=sys.stderr, flush=True)
        return {"error": problem}
    work = WORK / "phoenix"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    port = harness.free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_TELEMETRY_ENABLED": "false",
           "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false", "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(harness.free_port())}
    log = (WORK / "phoenix.log").open("w")
    proc = subprocess.Popen([str(PHOENIX), "serve"], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    db = work / "phoenix.db"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                requests.get(base, timeout=5)
                break
            except requests.RequestException:
                if proc.poll() is not None or time.monotonic() > deadline:
                    return {"error": f"Phoenix did not start (see {WORK.relative_to(ROOT)}/phoenix.log)"}
                time.sleep(0.5)
        batches = make_batches(spans, batch)
        bodies, sizes = encode(batches), [len(b) for b in batches]
        send = sender(f"{base}/v1/traces", headers={}, encode_in_loop=False)

        started = time.perf_counter()
        dropped = 0  # spans in batches Phoenix still refused (503) after the exporter's retries
        with ThreadPoolExecutor(senders) as pool:
            for n, (ok, body_spans) in enumerate(pool.map(lambda i: (send(bodies[i]), sizes[i]), range(len(bodies))), 1):
                dropped += 0 if ok else body_spans
                harness.progress("phoenix ingest (sent)", n, len(bodies))
        expected = spans - dropped
        stored, last_change, last = 0, time.perf_counter(), -1
        # at least one look after the last batch, however long sending took
        deadline = max(started + timeout, time.perf_counter() + 1)
        while True:
            count = _stored(db)
            if count > last:
                stored, last, last_change = count, count, time.perf_counter()
                harness.progress("phoenix ingest (stored)", min(stored, expected), expected)
            if stored >= expected or time.perf_counter() >= deadline:
                break
            time.sleep(0.25)
        elapsed = last_change - started
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    out = {"peer": "arize-phoenix", "version": _version(), "spans": spans, "stored": stored,
           "senders": senders, "seconds": round(elapsed, 2), "spans_per_s": round(stored / elapsed) if stored else 0}
    if dropped:
        out["dropped_spans"] = dropped
        out["note"] = (f"{dropped} of {spans} spans refused (503) even after the exporter's retries: "
                       "an agent would have lost them")
    elif stored < spans:
        out["note"] = f"only {stored} of {spans} spans stored within {timeout:.0f} s"
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    print(json.dumps(run(spans=args.spans, batch=args.batch, senders=args.senders, timeout=args.timeout,
                         install=install_in_background())))
