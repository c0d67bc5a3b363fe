"""Web (gunicorn) + Celery workers + Celery beat as child processes, in the foreground.

The embedded Postgres and Redis were started when settings loaded (when no URLs are set) and
are stopped when the stack stops; other commands leave them running for the next one. The stack
owns its embedded Redis: the children are given its URL, so a restarted child never starts a
Redis of its own, and the stack starts it again if its process dies.
Ctrl-C / SIGTERM stops every child cleanly; a child that dies is reported and restarted, and
the stack gives up (exit 1) if one keeps dying."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agentops import embedded
from agentops.celery import alerts_queue, periodic_queue
from agentops.celery import app as celery_app

RESTART_LIMIT = 5  # deaths of one child within RESTART_WINDOW
RESTART_WINDOW = 60.0


def _control_socket() -> list[str]:
    """gunicorn's control socket beside the stack's data, not in ~/.gunicorn/ where every
    instance of every checkout shares one; none where the path is too long for a Unix socket."""
    path = settings.DATA_DIR / "gunicorn.ctl"
    return ["--control-socket", str(path)] if len(str(path)) <= 100 else ["--no-control-socket"]


def _refuse_unmigrated() -> None:
    """A stack on a database its code is newer than answers every page with a 500 (a column it
    reads does not exist yet): say so before starting anything."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        first = pending[0][0]
        raise CommandError(f"{len(pending)} database migration{'s' if len(pending) != 1 else ''} not applied "
                           f"(the first: {first.app_label}.{first.name}): run `python manage.py migrate` "
                           "first (`make demo` does)")


class Command(BaseCommand):
    help = "Run web, Celery worker and Celery beat (plus the embedded services when no URLs are set)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--web-workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", 2)))
        parser.add_argument("--worker-concurrency", type=int, default=2)
        parser.add_argument("--no-beat", action="store_true", help="do not start Celery beat")
        parser.add_argument("--demo", action="store_true",
                            help="once the web answers, print how to log in and the demo project's ingest key "
                                 "(make demo): last, so the start-up lines do not scroll them away")

    def handle(self, *args, port, host, web_workers, worker_concurrency, no_beat, demo=False, **options):
        _refuse_unmigrated()
        python = sys.executable
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        watch = None
        if settings.EMBEDDED_BROKER:
            # The children use this Redis and never start one: a child restarted while it was down
            # started its own on the same socket, and processes split between two servers (the
            # login lockout counted on both, the orphan outlived the stack).
            os.environ["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
            watch = self._redis_watch
        # Links in alert notifications point at this stack unless a public URL was configured.
        public = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        os.environ.setdefault("AGENTOPS_BASE_URL", f"http://{public}:{port}")
        commands = {
            # gthread workers of WEB_THREADS threads, timeouts: agentops/gunicorn_conf.py says why.
            "web": [python, "-m", "gunicorn", "-c", "python:agentops.gunicorn_conf", "agentops.wsgi:application",
                    "--bind", f"{host}:{port}", "--workers", str(web_workers), *_control_socket()],
            "worker": [python, "-m", "celery", "-A", "agentops", "worker", "--loglevel", "INFO",
                       "--concurrency", str(worker_concurrency), "--hostname", f"worker-{os.getpid()}@%h",
                       "--queues", celery_app.conf.task_default_queue],
            "worker-periodic": [python, "-m", "celery", "-A", "agentops", "worker", "--loglevel", "INFO",
                                "--concurrency", "1", "--hostname", f"periodic-{os.getpid()}@%h",
                                "--queues", periodic_queue()],
            "worker-alerts": delivery_worker(python),
        }
        if not no_beat:
            commands["beat"] = [python, "-m", "celery", "-A", "agentops", "beat", "--loglevel", "INFO",
                                "--schedule", str(settings.DATA_DIR / "celerybeat-schedule")]
        url = f"http://{public}:{port}"
        workers = [name for name in commands if name.startswith("worker")]
        stack = Stack(commands, out=self.stdout, err=self.stderr,
                      ready=lambda: _answers((public, port)) and _workers_answer(len(workers)),
                      on_ready=lambda: self.stdout.write(ready_banner(url, demo=demo)), watch=watch)
        self.stdout.write(f"agentops starting on http://{host}:{port}  (Ctrl-C to stop)")
        try:
            status = stack.run()
        finally:  # a child that could not start, too: the others and the services stop
            stack.stop()
            self._stop_embedded()
        sys.exit(status)

    def _redis_watch(self) -> None:
        if embedded.restart_redis_if_gone(settings.DATA_DIR):
            self.stderr.write("runstack: the embedded Redis had stopped; started it again")

    def _stop_embedded(self) -> None:
        """The embedded services started with the stack; they stop with it (their data stays)."""
        from django.db import connections

        connections.close_all()
        if settings.EMBEDDED_BROKER:
            embedded.stop_redis(settings.DATA_DIR)
            self.stdout.write("runstack: stopped the embedded Redis")
        if settings.EMBEDDED_DATABASE:
            embedded.stop_postgres(settings.DATA_DIR)
            self.stdout.write("runstack: stopped the embedded PostgreSQL")


def ready_banner(url: str, *, demo: bool) -> str:
    """What the console says once the web answers; for `make demo`, how to log in and the key."""
    lines = ["", f"agentops is ready on {url}  (Ctrl-C to stop)"]
    key_file = settings.DATA_DIR / "demo-ingest-key"
    if demo and key_file.exists():
        lines += [f"Log in at {url} as demo / demo.",
                  f"Ingest key of project 'demo' (also in {key_file}):", key_file.read_text().strip()]
    return "\n".join(lines + [""])


def _answers(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=0.5):
            return True
    except OSError:
        return False


def _workers_answer(count: int) -> bool:
    """This stack's Celery workers (hostnames end in this process's pid) answer a ping: their
    start-up banners are printed by then, so what the console prints next stays last."""
    try:
        replies = celery_app.control.ping(timeout=0.5)
    except Exception:  # noqa: BLE001 (the broker still starting: not ready yet)
        return False
    mine = [name for reply in replies for name in reply if name.split("@")[0].endswith(f"-{os.getpid()}")]
    return len(mine) >= count


# Deliveries wait on the network, not the CPU: threads, enough for every project's slots to be
# busy at once without a healthy project queueing behind them (analysis/alerts/delivery.py).
DELIVERY_WORKER_THREADS = 8


def delivery_worker(python: str) -> list[str]:
    """The Celery worker of alert deliveries (the alerts queue)."""
    return [python, "-m", "celery", "-A", "agentops", "worker", "--loglevel", "INFO", "--pool", "threads",
            "--concurrency", str(DELIVERY_WORKER_THREADS), "--hostname", f"alerts-{os.getpid()}@%h",
            "--queues", alerts_queue()]


class Stack:
    def __init__(self, commands: dict[str, list[str]], *, out, err, ready=None, on_ready=None, watch=None):
        self.commands = commands
        self.watch = watch  # called every turn of the loop: the services the stack owns
        self.ready, self.on_ready = ready, on_ready  # on_ready is called once, when ready() is true
        self.out = out
        self.err = err
        self.children: dict[str, subprocess.Popen] = {}
        self.deaths: dict[str, list[float]] = {name: [] for name in commands}
        self.stopping = False
        self.stopped = False

    def start(self, name: str) -> None:
        self.children[name] = subprocess.Popen(self.commands[name], start_new_session=True)
        self.out.write(f"runstack: started {name} (pid {self.children[name].pid})")

    def _on_signal(self, signum, frame):
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        for name in self.commands:
            self.start(name)
        status = 0
        while not self.stopping:
            time.sleep(0.5)
            if self.watch:
                self.watch()
            if self.on_ready and self.ready and self.ready():
                self.on_ready()
                self.on_ready = None
            for name, child in list(self.children.items()):
                code = child.poll()
                if code is None:
                    continue
                now = time.monotonic()
                recent = [t for t in self.deaths[name] if now - t < RESTART_WINDOW] + [now]
                self.deaths[name] = recent
                self.err.write(f"runstack: {name} (pid {child.pid}) exited with status {code}")
                if len(recent) >= RESTART_LIMIT:
                    self.err.write(f"runstack: {name} keeps dying; stopping the stack")
                    self.stopping = True
                    status = 1
                    break
                self.start(name)
        self.stop()
        return status

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.out.write("runstack: stopping")
        for child in self.children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name, child in self.children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.err.write(f"runstack: {name} did not stop in time; killing it")
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        self.out.write("runstack: stopped")
