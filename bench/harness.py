"""Shared pieces of the benchmarks: a scratch database on the same Postgres the product uses
(embedded or DATABASE_URL), migrated; a project with keys; a web server on a free port; and
what makes a run stop everything it started, on an exception, Ctrl-C or SIGTERM too.

Benchmarks never touch the product's own database: they create `agentops_bench` beside it."""

from __future__ import annotations

import contextlib
import os
import signal
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


def data_dir() -> Path:
    """The product's data folder (AGENTOPS_DATA_DIR, as the settings read it)."""
    return Path(os.environ.get("AGENTOPS_DATA_DIR", ROOT / ".data")).resolve()


# Set in a section's environment (`bench/run.py --citus`): its scratch databases are made on the
# local Citus cluster (agentops/citus.py, under the same data folder) and joined to its workers.
CITUS_ENV = "AGENTOPS_BENCH_CITUS"


def on_citus() -> bool:
    return os.environ.get(CITUS_ENV) == "1"


def _citus_workers() -> list[tuple[str, int]]:
    from agentops import citus

    found = citus.ports(data_dir())
    return [(citus.HOST, found[node]) for node in citus.NODES[1:] if node in found]


def _base_url() -> str:
    if on_citus():
        sys.path.insert(0, str(ROOT))
        from agentops import citus

        return citus.url(data_dir())
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    sys.path.insert(0, str(ROOT))
    from agentops import embedded

    return embedded.postgres_url(data_dir())


# --- stopping what a run started -------------------------------------------------------------


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP interrupt as Ctrl-C does (KeyboardInterrupt), so every `finally` that
    stops a server runs; once interrupted, the process ignores further signals, so that its
    clean-up is not cut short by the Ctrl-C its children got too or by the SIGTERM a parent
    passes on (Ctrl-C reaches the whole process group at once)."""

    def interrupt(signum, frame):
        for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(each, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, interrupt)


@contextmanager
def embedded_services():
    """For a run's first process: the embedded PostgreSQL and Redis (unless DATABASE_URL /
    CELERY_BROKER_URL name servers) are started here, before any child, so that this process is
    the one that started them; those it started stop when it ends, however it ends. Ones it
    found running (a `make demo` on the same folder) keep running."""
    sys.path.insert(0, str(ROOT))
    from agentops import embedded

    folder = data_dir()
    try:
        if not os.environ.get("DATABASE_URL"):
            embedded.postgres_url(folder)
        if not os.environ.get("CELERY_BROKER_URL"):
            embedded.redis_url(folder)
        yield
    finally:
        embedded.stop_started(folder)


@contextmanager
def citus_cluster():
    """The local Citus cluster under the data folder (a coordinator and two workers), started here
    unless it was running, and then stopped when the run ends, however it ends. The cluster's own
    product database is not migrated: the bench makes scratch databases of its own there."""
    sys.path.insert(0, str(ROOT))
    from agentops import citus

    folder = data_dir()
    was_running = set(citus.ports(folder)) == set(citus.NODES)
    try:
        if not was_running:
            print("   starting the local Citus cluster (agentops.citus)", file=sys.stderr, flush=True)
            citus.start(folder, migrate=False)
        yield citus.url(folder)
    finally:
        if not was_running:
            citus.stop(folder)


def stop_process(proc: subprocess.Popen, *, grace: float = 120, group: bool = False) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; `group`: to its whole process group (a child
    started in a session of its own). Waits until it is gone, reading any pipe to its end."""
    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)

    if proc.poll() is None:
        send(signal.SIGTERM)
    try:
        proc.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.communicate()


def run_process(args: list[str], *, timeout: float | None = None, grace: float = 120,
                **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run, except when this process is interrupted (or `timeout` passes): the child
    gets SIGTERM and time to stop what it started. subprocess.run would SIGKILL it at once,
    and the web server it ran would outlive the run."""
    with subprocess.Popen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            stop_process(proc, grace=grace)
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def exit_interrupted(what: str, exc: KeyboardInterrupt) -> None:
    print(f"\n{what}: interrupted ({exc or 'SIGINT'}); what it started is stopped", file=sys.stderr, flush=True)
    sys.exit(130)


def _admin_url() -> tuple[str, object]:
    parsed = urlparse(_base_url())
    return urlunparse(parsed._replace(path="/postgres")), parsed


def db_name(name: str) -> str:
    """A scratch database's name: AGENTOPS_BENCH_DB_PREFIX (unset: none) before it, so a smoke run
    of the bench (the test suite's) never touches the datasets of a real one; `citus_` too on the
    cluster, so that the two sides never share a database when the single node is the
    coordinator's server (DATABASE_URL at it, as under `make test-citus`)."""
    return os.environ.get("AGENTOPS_BENCH_DB_PREFIX", "") + ("citus_" if on_citus() else "") + name


def bench_database_url(*, fresh: bool = True, name: str | None = None) -> str:
    """A URL to a scratch benchmark database (`name`, default BENCH_DB), dropped and recreated
    when `fresh`."""
    import psycopg

    name = db_name(name or BENCH_DB)
    admin, parsed = _admin_url()
    if fresh and on_citus():
        from agentops import citus

        citus.drop_database(_citus_workers(), name)  # the workers' shards of the last one
    with psycopg.connect(admin, autocommit=True) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    if on_citus():  # the extension on every node, the workers added: `migrate` distributes the tables
        from agentops import citus

        citus.join_database((parsed.hostname, parsed.port), _citus_workers(), name)
    return urlunparse(parsed._replace(path=f"/{name}"))


def drop_database(name: str) -> None:
    """Drop a scratch database, closing this process's connections to it first."""
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(_admin_url()[0], autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name(name)}" WITH (FORCE)')
    if on_citus():
        from agentops import citus

        citus.drop_database(_citus_workers(), db_name(name))


def projects_create(names: list[str]) -> list[tuple]:
    """Projects by the product's `project_create`, (project, ingest key) each. On Citus they are
    spread over the workers in turn (the first on the first worker, the second on the second...):
    each one's id is chosen by moving the id sequence on to the next id whose shard lives on the
    worker wanted. On one node they are made as they come."""
    from django.db import connection

    from ingest.services import project_create

    made = []
    ports = [port for _host, port in _citus_workers()] if on_citus() else []
    for n, name in enumerate(names):
        if ports:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_get_serial_sequence('ingest_project', 'id')")
                sequence = cursor.fetchone()[0]
                cursor.execute(f"SELECT last_value, is_called FROM {sequence}")
                last, called = cursor.fetchone()
                first = last + 1 if called else last
                pk = first
                while worker_of(pk) != ports[n % len(ports)]:
                    pk += 1
                if pk != first:
                    cursor.execute("SELECT setval(%s, %s)", [sequence, pk - 1])
        made.append(project_create(name=name))
    return made


def worker_of(project_id: int) -> int | None:
    """The port of the Citus worker holding the project's shard of the tasks (and, co-located,
    of every distributed table); None on one node."""
    from django.db import connection

    if not on_citus():
        return None
    with connection.cursor() as cursor:
        cursor.execute("""SELECT nodeport FROM citus_shards WHERE table_name = 'ingest_task'::regclass
                          AND shardid = get_shard_id_for_distribution_column('ingest_task', %s)""",
                       [project_id])
        row = cursor.fetchone()
    return row[0] if row else None


def placement(projects) -> dict[str, str]:
    """Where each project's data lives: 'worker <port>' on Citus, 'single node' otherwise."""
    return {p.name: (f"worker {worker_of(p.pk)}" if on_citus() else "single node") for p in projects}


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
        stop_process(proc, grace=30)


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
