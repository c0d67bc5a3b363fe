"""Weekly time partitions of the two big tables, created on demand and dropped for retention.

`ingest_step` is partitioned by `started_at`, `ingest_resourcesample` by `ts`, one partition per
ISO week (Monday 00:00 UTC). Why weekly: a week holds a few million steps on a busy project,
small enough that dropping one is instant and its indexes stay cached, few enough (52 a year)
that lookups by task, which cannot prune by time, probe few partitions.

Partitions are created before a batch is stored (`ensure`, cached per process) and ahead of
time by beat (`ensure_ahead`); a DEFAULT partition catches rows written any other way (the
ORM, a partition dropped under a running process), and `ensure` moves such rows into the
week's partition when it creates it. Retention drops whole partitions (`drop_before`): no
DELETE of millions of rows, no table bloat.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction

log = logging.getLogger("agentops.ingest")

PARTITIONED = {"ingest_step": "started_at", "ingest_resourcesample": "ts"}
_LOCK_KEY = 0x6167_6F70  # pg_advisory_xact_lock key: one partition creator at a time
_known: set[str] = set()


def week_start(moment: datetime) -> date:
    day = moment.astimezone(UTC).date()
    return day - timedelta(days=day.weekday())


def partition_name(table: str, week: date) -> str:
    return f"{table}_p{week:%Y%m%d}"


def _bounds(week: date) -> tuple[datetime, datetime]:
    start = datetime.combine(week, time(0), tzinfo=UTC)
    return start, start + timedelta(days=7)


def ensure(*, table: str, times: Iterable[datetime]) -> list[str]:
    """Make sure the weekly partitions for these times exist; returns the ones created."""
    column = PARTITIONED[table]
    wanted = {partition_name(table, week): week for week in {week_start(t) for t in times}}
    missing = [name for name in wanted if name not in _known]
    if not missing:
        return []
    created = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_class WHERE relname = ANY(%s)", [missing])
        existing = {row[0] for row in cursor.fetchall()}
        to_create = [name for name in missing if name not in existing]
        if to_create:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
            cursor.execute("SELECT relname FROM pg_class WHERE relname = ANY(%s)", [to_create])
            existing |= {row[0] for row in cursor.fetchall()}
        for name in to_create:
            if name not in existing:
                _create(cursor, table=table, column=column, name=name, week=wanted[name])
                created.append(name)
    _known.update(missing)
    if created:
        log.info("ingest.partitions_created %s", ", ".join(created))
    return created


def _create(cursor, *, table: str, column: str, name: str, week: date) -> None:
    start, end = _bounds(week)
    default = f"{table}_default"
    cursor.execute(f"SELECT 1 FROM {default} WHERE {column} >= %s AND {column} < %s LIMIT 1", [start, end])
    if cursor.fetchone() is None:
        cursor.execute(f"CREATE TABLE {name} PARTITION OF {table} FOR VALUES FROM (%s) TO (%s)", [start, end])
        return
    # Rows of that week already sit in the default partition: move them into a new table,
    # then attach it (attaching builds the indexes and checks the default holds none left).
    cursor.execute(f"LOCK TABLE {default} IN SHARE ROW EXCLUSIVE MODE")
    cursor.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    cursor.execute(
        f"WITH moved AS (DELETE FROM {default} WHERE {column} >= %s AND {column} < %s RETURNING *) "
        f"INSERT INTO {name} SELECT * FROM moved", [start, end])
    cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [start, end])


def ensure_ahead(*, weeks: int = 2, now: datetime | None = None) -> list[str]:
    """Create this week's and the next weeks' partitions before data needs them."""
    now = now or datetime.now(tz=UTC)
    created = []
    for table in PARTITIONED:
        created += ensure(table=table, times=[now + timedelta(weeks=n) for n in range(weeks + 1)])
    return created


def partitions(table: str) -> list[tuple[str, datetime | None, datetime | None]]:
    """(name, from, to) of each partition of `table`, oldest first; the default has no bounds."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = %s::regclass ORDER BY c.relname
            """, [table])
        rows = cursor.fetchall()
    out = []
    for name, bound in rows:
        if bound == "DEFAULT":
            out.append((name, None, None))
            continue
        week = datetime.strptime(name.rsplit("_p", 1)[1], "%Y%m%d").date()
        start, end = _bounds(week)
        out.append((name, start, end))
    return out


def drop_before(cutoff: datetime) -> list[str]:
    """Drop every partition that holds only data older than `cutoff` (and delete such rows from
    the default partition). Returns the dropped partitions."""
    dropped = []
    with transaction.atomic(), connection.cursor() as cursor:
        # Deferred foreign-key checks of rows written earlier in this transaction would block DROP.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        for table, column in PARTITIONED.items():
            for name, _, end in partitions(table):
                if end is not None and end <= cutoff:
                    cursor.execute(f"DROP TABLE {name}")
                    dropped.append(name)
            cursor.execute(f"DELETE FROM {table}_default WHERE {column} < %s", [cutoff])
    _known.difference_update(dropped)
    if dropped:
        log.info("ingest.partitions_dropped %s", ", ".join(dropped))
    return dropped


def forget_cache() -> None:
    """For tests: the next `ensure` looks at the catalogue again."""
    _known.clear()
