"""SQL helpers shared by the release comparison modules."""

from __future__ import annotations

from agentops.db import read_connection

# Per sort, for the comparison's transaction only: 2 × 1M durations sort in memory.
WORK_MEM = "256MB"


def fetch(sql: str, params=None) -> list[tuple]:
    """Rows of a query; `params` None means the SQL has no placeholders (and may hold a %)."""
    with read_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def set_repeatable_read() -> None:
    """The current transaction sees one snapshot in all its queries. Must come first in it."""
    with read_connection().cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def set_work_mem() -> None:
    """Grouped percentiles sort up to millions of durations: in memory, not in temp files.
    SET LOCAL: for the current transaction only."""
    with read_connection().cursor() as cursor:
        cursor.execute(f"SET LOCAL work_mem = '{WORK_MEM}'")
