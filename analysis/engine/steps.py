"""Steps as the detectors see them (`StepData`), read from ingest_step: the one loader the batch
analysis and the learned call pairs share. Rows are matched to StepData's fields by column name
(the aliases, checked against the fields once per statement), never by a position written down
here: a column added to the query or a field added to StepData cannot shift the others. In the
binary protocol: integers and floats arrive as machine values, not text to parse (a quarter less
of a worker's time in decoding the steps); and what each row needs is done in the statement (the
times in ms, an empty array as NULL, which costs nothing to decode), so a StepData is made from its
row's values as they come, positionally (a third less of the loader's time than by keywords from
a dict per row, measured on 410,137 simulated steps)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import fields

import psycopg
from psycopg.rows import tuple_row

from analysis.engine.detectors.base import StepData

# An HTTP client span's server (StepData.peer): server.address[:server.port], else the
# authority of url.full / http.url (the older semantic conventions), without any user info.
# A port as a number however it was sent (ingest.conventions.server_port): 8000, "8000", 8000.0.
_PORT = r"""coalesce(':' || nullif(regexp_replace(attributes->>'server.port', '^\s*0*(\d+)(\.0*)?\s*$', '\1'), ''), '')"""
_PEER = f"""CASE WHEN kind = 'other' AND attributes ?| array['server.address', 'url.full', 'http.url'] THEN lower(coalesce(
    nullif(attributes->>'server.address', '') || {_PORT},
    substring(coalesce(attributes->>'url.full', attributes->>'http.url') FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)'),
    '')) ELSE '' END"""
# An LLM call's server (StepData.server): server.address[:server.port] of its own span.
_SERVER = f"""CASE WHEN kind = 'llm' AND attributes ? 'server.address' THEN lower(coalesce(
    nullif(attributes->>'server.address', '') || {_PORT}, '')) ELSE '' END"""


def ms_of_us_sql(column: str) -> str:
    """A timestamp column in epoch ms as `ms_of_us` computes them, bit for bit (float8 division
    and multiplication are IEEE 754 in Postgres as in Python)."""
    return f"((extract(epoch FROM {column}) * 1000000)::int8::float8 / 1000000 * 1000)"


# Every StepData field from the ingest_step column of its name, but the times (ms, as
# `ms_of_us`), the arrays (NULL when empty: most steps depend on nothing), the arguments (JSON
# text, decoded by json.loads) and the server span's timings (an attribute). The task's pk comes
# last, after the fields in their order.
_SELECT = {"start_ms": ms_of_us_sql("started_at"), "end_ms": ms_of_us_sql("ended_at"),
           "depends_on": "nullif(depends_on, '{}')", "tool_call_ids": "nullif(tool_call_ids, '{}')",
           "tool_args": "tool_args::text", "serving": "attributes->'agentops.serving'", "peer": _PEER,
           "server": _SERVER}
_FIELDS = tuple(f.name for f in fields(StepData))
_COLUMNS = ", ".join(f"{_SELECT.get(name, name)} AS {name}" for name in _FIELDS)
# By project too: on Citus a statement that names one project runs on its one worker.
_SQL = f"""SELECT {_COLUMNS}, task_id AS task_pk
FROM ingest_step WHERE project_id = ANY(%s) AND task_id = ANY(%s) AND (%s::text[] IS NULL OR kind = ANY(%s::text[]))
ORDER BY task_id, started_at, step_id"""
_DEPENDS, _CALL_IDS, _ARGS = (_FIELDS.index(n) for n in ("depends_on", "tool_call_ids", "tool_args"))


def ms_of_us(us: int) -> float:
    """Epoch microseconds in ms as datetime.timestamp() × 1000 gives them, bit for bit."""
    return us / 1_000_000 * 1000.0


def _step_rows(cursor):
    """psycopg row factory: each row as a list, once its columns are known to be StepData's
    fields in their order and then the task's pk (by name: the aliases)."""
    names = tuple(c.name for c in cursor.description or ())
    if names != (*_FIELDS, "task_pk"):
        raise RuntimeError(f"load_steps: the statement's columns {names} are not StepData's fields and task_pk")
    return list


# Rows are decoded this many at a time: decoding is C code that holds the GIL throughout, and a
# worker's other threads (the claim heartbeat: analysis/engine/batch.py) must get a turn while the
# 50,000 steps of a huge task are decoded on a loaded machine, not after seconds.
ROWS_AT_A_TIME = 2000


def binary_row_chunks(cursor, sql: str, params: list, row_factory=tuple_row) -> Iterator[list]:
    """The rows of a query in the binary protocol, on the Django cursor's connection (and
    transaction), decoded ROWS_AT_A_TIME at a time."""
    with psycopg.Cursor(cursor.cursor.connection, row_factory=row_factory) as raw:
        raw.execute(sql, params, binary=True)
        while rows := raw.fetchmany(ROWS_AT_A_TIME):
            yield rows


def binary_rows(cursor, sql: str, params: list, row_factory=tuple_row) -> list:
    """The rows of a query in the binary protocol, on the Django cursor's connection (and
    transaction)."""
    return [row for rows in binary_row_chunks(cursor, sql, params, row_factory) for row in rows]


def load_steps(cursor, task_pks: list[int], *, projects: Iterable[int],
               kinds: tuple[str, ...] | None = None, limit: int | None = None) -> dict[int, list[StepData]]:
    """task pk → its steps (of `kinds`, all when None) in start order; `projects`: those of the
    tasks (a task of another project is not read). `limit`: the first this many steps only, of
    one task (a huge task's analysed part: analysis/engine/batch.py, HUGE_TASK_STEPS)."""
    by_task: dict[int, list[StepData]] = defaultdict(list)
    if not task_pks:
        return by_task
    if limit is not None and len(set(task_pks)) != 1:
        raise ValueError("load_steps: a limit applies to the steps of one task")
    wanted = list(kinds) if kinds is not None else None
    loads, step_data = json.loads, StepData
    params = [sorted(set(projects)), list(task_pks), wanted, wanted]
    sql = _SQL if limit is None else _SQL + " LIMIT %s"
    if limit is not None:
        params.append(limit)
    for values in (row for rows in binary_row_chunks(cursor, sql, params, _step_rows) for row in rows):
        task_pk = values.pop()
        values[_DEPENDS] = tuple(values[_DEPENDS]) if values[_DEPENDS] else ()
        values[_CALL_IDS] = tuple(values[_CALL_IDS]) if values[_CALL_IDS] else ()
        if values[_ARGS] is not None:
            values[_ARGS] = loads(values[_ARGS])
        by_task[task_pk].append(step_data(*values))
    return by_task
