"""The export benchmark: a full export of the query dataset's steps (10M at `--scale 1`) over HTTP
from gunicorn, once as Parquet and once as CSV, each from a fresh web process. Reported: rows/s
(rows over the time from the request to the last byte) and the web worker's peak RSS (VmHWM,
the kernel's high-water mark of the process's resident memory), with its RSS before the
request, so "bounded memory" is a number, not a promise.

    .venv/bin/python bench/run.py --only export --scale 1     # 10M steps (loads them once)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from bench import harness

# As runstack serves the product (agentops/management/commands/runstack.py).
GUNICORN_ARGS = ["--workers", "1", "--worker-class", "gthread", "--threads", "1", "--timeout", "60",
                 "--log-level", "warning"]


def _status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _worker_pid(master: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = open(f"/proc/{master}/task/{master}/children").read().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise RuntimeError("gunicorn started no worker")


def export_once(*, database_url: str, key: str, entity: str, fmt: str, expected_rows: int,
                filters: dict | None = None) -> dict:
    """One export from a fresh gunicorn (so the high-water mark is this export's alone)."""
    import requests

    port = harness.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "agentops.wsgi:application", "--bind",
                             f"127.0.0.1:{port}", *GUNICORN_ARGS], cwd=harness.ROOT,
                            env=harness.bench_env(database_url))
    url = f"http://127.0.0.1:{port}"
    try:
        harness.wait_until_serving(url, proc)
        worker = _worker_pid(proc.pid)
        # Warm the worker as a first request would (imports, a connection), then read its memory.
        requests.get(f"{url}/api/v1/export/{entity}", params={"format": fmt, "release": "no-such-release"},
                     headers={"Authorization": f"Bearer {key}"}, timeout=60).raise_for_status()
        before = _status(worker)
        peak_sampled = before["VmRSS"]
        size = newlines = 0
        started = time.perf_counter()
        first_byte = None
        with tempfile.NamedTemporaryFile(suffix=f".{fmt}", dir=os.environ.get("BENCH_EXPORT_DIR")) as out, \
                requests.get(f"{url}/api/v1/export/{entity}", params={"format": fmt, **(filters or {})},
                             headers={"Authorization": f"Bearer {key}"}, stream=True, timeout=120) as r:
            r.raise_for_status()
            last_sample = 0.0
            for chunk in r.iter_content(chunk_size=1 << 20):
                if first_byte is None:
                    first_byte = time.perf_counter() - started
                out.write(chunk)
                size += len(chunk)
                if fmt == "csv":
                    newlines += chunk.count(b"\n")
                now = time.perf_counter()
                if now - last_sample > 0.5:
                    peak_sampled = max(peak_sampled, _status(worker)["VmRSS"])
                    last_sample = now
            seconds = time.perf_counter() - started
            after = _status(worker)
            out.flush()
            if fmt == "parquet":
                import pyarrow.parquet as pq

                meta = pq.ParquetFile(out.name).metadata
                rows, row_groups = meta.num_rows, meta.num_row_groups
            else:
                rows, row_groups = newlines - 1, None  # the loader's text holds no newlines
        return {"format": fmt, "entity": entity, "filters": filters or {}, "rows": rows, "expected_rows": expected_rows,
                "complete": rows == expected_rows, "bytes": size, "seconds": round(seconds, 1),
                "first_byte_seconds": round(first_byte or 0, 2), "rows_per_s": round(rows / seconds),
                "rss_before_mib": round(before["VmRSS"] / 2**20, 1),
                "peak_rss_mib": round(max(after["VmHWM"], peak_sampled) / 2**20, 1),
                "rss_after_mib": round(after["VmRSS"] / 2**20, 1), "row_groups": row_groups}
    finally:
        harness.stop_process(proc, grace=30)


def run(*, database_url: str, project, formats=("parquet", "csv"), entity: str = "steps",
        filters: dict | None = None) -> dict:
    from django.db import connection

    from ingest.models import IngestKey
    from ingest.services import key_create

    _, key = key_create(project=project, scopes=[IngestKey.SCOPE_READ], name="bench-export")
    table = {"steps": "ingest_step", "tasks": "ingest_task"}[entity]
    with connection.cursor() as cursor:
        if filters and set(filters) == {"release"} and entity == "steps":
            cursor.execute("SELECT count(*) FROM ingest_step s JOIN ingest_task t ON t.id = s.task_id"
                           " WHERE s.project_id = %s AND t.release = %s", [project.pk, filters["release"]])
        elif filters:
            raise ValueError("filters: only release= for steps")
        else:
            cursor.execute(f"SELECT count(*) FROM {table} WHERE project_id = %s", [project.pk])
        expected = cursor.fetchone()[0]
    connection.close()
    out = {}
    for n, fmt in enumerate(formats):
        harness.progress(f"export {entity}", n, len(formats))
        out[fmt] = export_once(database_url=database_url, key=key, entity=entity, fmt=fmt, expected_rows=expected,
                               filters=filters)
        print(f"   {fmt}: {out[fmt]['rows']:,} rows in {out[fmt]['seconds']} s, "
              f"peak RSS {out[fmt]['peak_rss_mib']} MiB", file=sys.stderr, flush=True)
    harness.progress(f"export {entity}", len(formats), len(formats))
    return out
