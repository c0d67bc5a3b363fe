"""Shared pieces of the benchmarks: a scratch database on the same Postgres the product uses
(embedded or DATABASE_URL), migrated; a project with keys; a web server on a free port.

Benchmarks never touch the product's own database: they create `agentops_bench` beside it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
BENCH_DB = "agentops_bench"
BENCH_QUEUE = "agentops-bench"


def _base_url() -> str:
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    sys.path.insert(0, str(ROOT))
    from agentops import embedded

    data_dir = Path(os.environ.get("AGENTOPS_DATA_DIR", ROOT / ".data")).resolve()
    return embedded.postgres_url(data_dir)


def _admin_url() -> tuple[str, object]:
    parsed = urlparse(_base_url())
    return urlunparse(parsed._replace(path="/postgres")), parsed


def db_name(name: str) -> str:
    """A scratch database's name: AGENTOPS_BENCH_DB_PREFIX (unset: none) before it, so a smoke run
    of the bench (the test suite's) never touches the datasets of a real one."""
    return os.environ.get("AGENTOPS_BENCH_DB_PREFIX", "") + name


def bench_database_url(*, fresh: bool = True, name: str | None = None) -> str:
    """A URL to a scratch benchmark database (`name`, default BENCH_DB), dropped and recreated
    when `fresh`."""
    import psycopg

    name = db_name(name or BENCH_DB)
    admin, parsed = _admin_url()
    with psycopg.connect(admin, autocommit=True) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return urlunparse(parsed._replace(path=f"/{name}"))


def drop_database(name: str) -> None:
    """Drop a scratch database, closing this process's connections to it first."""
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(_admin_url()[0], autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name(name)}" WITH (FORCE)')


def bench_env(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    # A queue of its own: the analysis messages ingest publishes must never reach a running
    # product worker (it would look the bench's task ids up in the product's database).
    env.update({"DATABASE_URL": database_url, "SECRET_KEY": "bench", "DEBUG": "0", "AGENTOPS_HTTPS": "0",
                "DJANGO_SETTINGS_MODULE": "agentops.settings", "LOG_LEVEL": "WARNING",
                "AGENTOPS_QUEUE": BENCH_QUEUE})
    return env


def setup_django(database_url: str) -> None:
    os.environ.update(bench_env(database_url))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(url: str, proc: subprocess.Popen, *, timeout: float = 120) -> None:
    """Wait until the web server at `url` answers; RuntimeError if it died or took too long."""
    import requests

    deadline = time.monotonic() + timeout
    while True:
        try:
            requests.get(f"{url}/login/", timeout=10, allow_redirects=False)
            return
        except requests.RequestException:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark web server did not start") from None
            time.sleep(0.2)


@contextmanager
def web_server(database_url: str, *, workers: int = 2):
    """gunicorn serving the product on a free port, stopped on exit (also when it fails to
    start); patient with a loaded machine, where a slow first answer is not a failure."""

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "agentops.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--timeout", "120", "--log-level", "warning"],
        cwd=ROOT, env=bench_env(database_url),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def progress(label: str, done: int, total: int) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r{label:<28} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def purge_bench_queue() -> int:
    """Drop the analysis messages the benchmarks published (nobody consumes the bench queue)."""
    from agentops.celery import app

    with app.connection_for_write() as conn:
        return conn.default_channel.queue_purge(BENCH_QUEUE) or 0
