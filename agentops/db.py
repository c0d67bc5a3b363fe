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

import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, OperationalError, connection, connections

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


@contextmanager
def statement_timeout(seconds: float) -> Iterator[None]:
    """Within this block, every statement on this thread's connections (the primary and, where
    configured, the replica) is cancelled by PostgreSQL after `seconds` (SQLSTATE 57014, which
    ingest.api.query_canceled tells apart); the setting is reset after the block."""
    aliases = [DEFAULT_DB_ALIAS, *([REPLICA] if replica_configured() else [])]
    for alias in aliases:
        with connections[alias].cursor() as cur:
            cur.execute("SELECT set_config('statement_timeout', %s, false)", [f"{max(1, round(seconds * 1000))}ms"])
    try:
        yield
    finally:
        for alias in aliases:
            conn = connections[alias]
            if conn.connection is None or conn.needs_rollback:
                continue
            try:
                with conn.cursor() as cur:
                    cur.execute("RESET statement_timeout")
            except DatabaseError:  # a broken connection is closed at the request's end
                pass
