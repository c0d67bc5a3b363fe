"""Steps as the detectors see them (`StepData`), read from ingest_step: the one loader the batch
analysis and the learned call pairs share. Rows are read by column name (the aliases), never by
position: a column added to the query or a field added to StepData cannot shift the others. In
the binary protocol: integers and floats arrive as machine values, not text to parse (a quarter
less of a worker's time in decoding the steps)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import fields

import psycopg
from psycopg.rows import dict_row, tuple_row

from analysis.engine.detectors.base import StepData

# An HTTP client span's server (StepData.peer): server.address[:server.port], else the
# authority of url.full / http.url (the older semantic conventions), without any user info.
_PEER = """CASE WHEN kind = 'other' AND attributes ?| array['server.address', 'url.full', 'http.url'] THEN lower(coalesce(
    nullif(attributes->>'server.address', '') || coalesce(':' || nullif(attributes->>'server.port', ''), ''),
    substring(coalesce(attributes->>'url.full', attributes->>'http.url') FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)'),
    '')) ELSE '' END"""
# Every StepData field from the ingest_step column of its name, but the times (epoch µs here, ms
# in StepData), the arguments (JSON text, decoded by json.loads) and the server span's timings
# (an attribute).
_SELECT = {"start_ms": "(extract(epoch FROM started_at) * 1000000)::int8",
           "end_ms": "(extract(epoch FROM ended_at) * 1000000)::int8", "tool_args": "tool_args::text",
           "serving": "attributes->'agentops.serving'", "peer": _PEER}
_COLUMNS = ", ".join(f"{_SELECT.get(f.name, f.name)} AS {f.name}" for f in fields(StepData))
_SQL = f"""SELECT task_id AS task_pk, {_COLUMNS}
FROM ingest_step WHERE task_id = ANY(%s) AND (%s::text[] IS NULL OR kind = ANY(%s::text[]))
ORDER BY task_id, started_at, step_id"""


def ms_of_us(us: int) -> float:
    """Epoch microseconds in ms as datetime.timestamp() × 1000 gives them, bit for bit."""
    return us / 1_000_000 * 1000.0


def binary_rows(cursor, sql: str, params: list, row_factory=tuple_row) -> list:
    """The rows of a query in the binary protocol, on the Django cursor's connection (and
    transaction)."""
    with psycopg.Cursor(cursor.cursor.connection, row_factory=row_factory) as raw:
        raw.execute(sql, params, binary=True)
        return raw.fetchall()


def load_steps(cursor, task_pks: list[int], *, kinds: tuple[str, ...] | None = None) -> dict[int, list[StepData]]:
    """task pk → its steps (of `kinds`, all when None) in start order."""
    by_task: dict[int, list[StepData]] = defaultdict(list)
    if not task_pks:
        return by_task
    wanted = list(kinds) if kinds is not None else None
    loads = json.loads
    for step in binary_rows(cursor, _SQL, [list(task_pks), wanted, wanted], dict_row):
        step["start_ms"], step["end_ms"] = ms_of_us(step["start_ms"]), ms_of_us(step["end_ms"])
        step["depends_on"] = tuple(step["depends_on"] or ())
        step["tool_call_ids"] = tuple(step["tool_call_ids"] or ())
        if step["tool_args"] is not None:
            step["tool_args"] = loads(step["tool_args"])
        by_task[step.pop("task_pk")].append(StepData(**step))
    return by_task
