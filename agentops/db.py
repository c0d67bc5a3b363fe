"""Read-replica routing: dashboard reads on a streaming replica, everything else on the primary.

With `DATABASE_REPLICA_URL` set, settings add a `replica` database, this router and the
middleware below. Reads of the trace and analysis tables (`REPLICA_MODELS`) go to the
replica only inside `replica_reads()` — which the middleware enters for GET and HEAD requests
outside the admin, i.e. the dashboard pages, chart JSON and the read API. Everything else
stays on the primary:

- every write (ingest, claims, analysis results, alert state), by construction;
- Celery workers, beat and management commands (analysis, baselines, alert evaluation,
  partitions): they never enter `replica_reads()`, so an analysis never reads a lagging copy
  of the steps it is about to judge;
- projects, keys, users and sessions even in a GET: a key or a login that was just created
  must work on the very next request, whatever the replica's lag;
- reads inside a transaction on the primary (they must see that transaction's writes).

ORM queries are routed by the router; every raw-SQL reader (rollups, sessions, the task diff, the
release comparison, status) opens `read_connection()`, the replica-aware connection, so a page
never mixes the replica's snapshot with the primary's (tests/scale/test_replica.py visits every
page and read endpoint). A streamed response (CSV, exports) reads from the replica as it is sent.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TypeVar

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections

log = logging.getLogger("agentops")
T = TypeVar("T")

# A statement or transaction that loses a deadlock (Postgres cancels one of two transactions
# waiting on each other, after deadlock_timeout) is run again, at most this many times in all.
DEADLOCK_ATTEMPTS = 3
DEADLOCK_SQLSTATE = "40P01"


def deadlock_retried(run: Callable[[], T], *, what: str, context: str = "") -> T:
    """`run()`, once more (up to DEADLOCK_ATTEMPTS in all) each time Postgres cancels it to break a
    deadlock: the deadlock rolled its transaction back whole, so running it again is safe. Unless
    the caller holds a transaction of its own, which the deadlock has ended: the error goes up.
    A retry is logged as `<what>.deadlock_retried <context> attempt=N`."""
    for attempt in range(1, 1 if connection.in_atomic_block else DEADLOCK_ATTEMPTS):
        try:
            return run()
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK_SQLSTATE:
                raise
            log.warning("%s.deadlock_retried %sattempt=%d", what, f"{context} " if context else "", attempt)
    return run()

REPLICA = "replica"
# (app label, model name) whose reads may be served by the replica: the big, append-mostly
# tables behind the dashboard. A replica a second behind shows a task a second later.
REPLICA_MODELS = {
    ("ingest", "task"), ("ingest", "step"), ("ingest", "resourcesample"), ("ingest", "latencyhistogram"),
    ("ingest", "device"), ("ingest", "release"),
    ("analysis", "taskanalysis"), ("analysis", "finding"), ("analysis", "baseline"),
}
_replica_reads = contextvars.ContextVar("agentops_replica_reads", default=False)


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


@contextmanager
def replica_reads() -> Iterator[None]:
    """Within this block, reads of REPLICA_MODELS go to the replica (when one is configured)."""
    token = _replica_reads.set(True)
    try:
        yield
    finally:
        _replica_reads.reset(token)


def read_alias() -> str:
    """The alias reads should use right now: the replica inside `replica_reads()` (and outside
    a transaction on the primary), else the primary."""
    if (_replica_reads.get() and replica_configured()
            and not connections[DEFAULT_DB_ALIAS].in_atomic_block):
        return REPLICA
    return DEFAULT_DB_ALIAS


def read_connection():
    """The connection for a raw-SQL read selector (replica-aware, like the router)."""
    return connections[read_alias()]


class ReplicaRouter:
    def db_for_read(self, model, **hints):
        if (model._meta.app_label, model._meta.model_name) in REPLICA_MODELS:
            return read_alias()
        return DEFAULT_DB_ALIAS

    def db_for_write(self, model, **hints):
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        return True  # one database, two copies of it

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return db == DEFAULT_DB_ALIAS  # the replica follows the primary's schema by replication


class ReplicaReadsMiddleware:
    """Serve GET and HEAD requests (dashboard pages, chart JSON, the read API) from the
    replica; the admin and every request that writes read the primary."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method in ("GET", "HEAD") and not request.path.startswith("/admin/"):
            with replica_reads():
                response = self.get_response(request)
            if response.streaming:  # a CSV or an export reads as it is sent, after the view returned
                response.streaming_content = _replica_reads_while(response.streaming_content)
            return response
        return self.get_response(request)


def _replica_reads_while(chunks: Iterator[bytes]) -> Iterator[bytes]:
    with replica_reads():
        yield from chunks


class StatementBound:
    """A statement_timeout for this thread's connections (the primary and, where configured, the
    replica): every statement run within `applied()` is cancelled by PostgreSQL after `seconds`
    (SQLSTATE 57014, which ingest.api.query_canceled tells apart). Set on a connection just before
    its first statement, so a request that reads nothing opens no connection; `reset()` takes it
    off again. A streamed response applies it again while it streams and resets after."""

    def __init__(self, seconds: float):
        self.value = f"{max(1, round(seconds * 1000))}ms"
        self.aliases = [DEFAULT_DB_ALIAS, *([REPLICA] if replica_configured() else [])]
        self.bounded: dict[str, object] = {}  # alias -> the driver connection the bound was set on

    def _wrapper(self, alias: str):
        def run(execute, sql, params, many, context):
            raw = context["connection"].connection
            if self.bounded.get(alias) is not raw:  # first statement, or a connection opened since
                with context["connection"].wrap_database_errors:  # Django's errors, as the statement's
                    raw.execute("SELECT set_config('statement_timeout', %s, false)", [self.value])
                self.bounded[alias] = raw
            return execute(sql, params, many, context)
        return run

    @contextmanager
    def applied(self) -> Iterator[None]:
        with ExitStack() as wrappers:
            for alias in self.aliases:
                wrappers.enter_context(connections[alias].execute_wrapper(self._wrapper(alias)))
            yield

    def reset(self) -> None:
        for alias, raw in self.bounded.items():
            conn = connections[alias]
            if conn.connection is not raw or conn.needs_rollback:
                continue
            # A result still streaming (psycopg's COPY or Cursor.stream, not read to its end) holds
            # the driver's lock: a statement now would wait for ever. Left set then; the next GET
            # on the connection sets its own, and a broken connection is closed at a request's end.
            if not raw.lock.acquire(blocking=False):
                continue
            raw.lock.release()
            with contextlib.suppress(psycopg.Error):
                raw.execute("RESET statement_timeout")
        self.bounded.clear()


@contextmanager
def statement_timeout(seconds: float) -> Iterator[None]:
    """Every statement within the block bounded to `seconds` (StatementBound), reset after it."""
    bound = StatementBound(seconds)
    try:
        with bound.applied():
            yield
    finally:
        bound.reset()
