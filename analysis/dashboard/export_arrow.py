"""The Arrow side of the exports (exports.py says what is exported): rows streamed out
of Postgres by COPY into typed Arrow tables, and those tables written as Parquet, CSV or JSON
Lines. Imported only when an export runs: pyarrow and pandas are heavy."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from agentops.db import read_alias
from analysis.dashboard.exports import (
    COLUMNS,
    CSV_DANGEROUS,
    FETCH_ROWS,
    Column,
    Export,
    export_sql,
)

log = logging.getLogger("agentops.analysis")

ARROW_TYPES = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
               "ts": pa.timestamp("us", tz="UTC"), "json": pa.string()}
PANDAS_TYPES = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}


def schema(entity: str) -> pa.Schema:
    """The Arrow (Parquet) schema of an entity's export."""
    return pa.schema([pa.field(c.name, ARROW_TYPES[c.type]) for c in COLUMNS[entity]])


def batches(export: Export, *, fetch_rows: int = FETCH_ROWS) -> Iterator[pa.Table]:
    """The export's rows as Arrow tables of at most `fetch_rows` rows. Postgres streams them with
    `COPY (<the statement>) TO STDOUT` (one statement: one snapshot) as CSV, one row per message;
    each block of rows is parsed by pyarrow's CSV reader (C++) with the columns' types, so no
    Python object is made per value."""
    from django.db import connections

    sql, params = export_sql(export)
    columns = COLUMNS[export.entity]
    arrow_schema = schema(export.entity)
    parse = _csv_reader(columns)
    connection = connections[read_alias()]
    # psycopg's own cursor (Django's debug wrapper takes no COPY parameters), its errors
    # translated into Django's as on any query.
    with connection.cursor() as cursor, connection.wrap_database_errors, \
            cursor.cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", params) as copy:
        block: list[bytes] = []
        for row in copy:
            block.append(bytes(row))
            if len(block) >= fetch_rows:
                yield parse(b"".join(block), arrow_schema)
                block = []
        if block:
            yield parse(b"".join(block), arrow_schema)


def _csv_reader(columns: tuple[Column, ...]) -> Callable[[bytes, pa.Schema], pa.Table]:
    """Parses a block of Postgres CSV rows into a typed Arrow table. Postgres writes NULL as an
    unquoted empty field and an empty text as "", booleans as t/f; timestamps arrive as epoch
    microseconds (int8) and are cast."""
    names = [c.name for c in columns]
    convert = pacsv.ConvertOptions(
        column_types={c.name: pa.int64() if c.type == "ts" else ARROW_TYPES[c.type] for c in columns},
        null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=False,
        true_values=["t"], false_values=["f"])
    parse_options = pacsv.ParseOptions(newlines_in_values=True)
    times = [i for i, c in enumerate(columns) if c.type == "ts"]

    def parse(blob: bytes, arrow_schema: pa.Schema) -> pa.Table:
        table = pacsv.read_csv(pa.BufferReader(blob), parse_options=parse_options, convert_options=convert,
                               read_options=pacsv.ReadOptions(column_names=names, block_size=len(blob) + 1))
        for i in times:
            table = table.set_column(i, names[i], table.column(i).cast(ARROW_TYPES["ts"]))
        return table.cast(arrow_schema)

    return parse


class _Spool:
    """A write-only file that keeps what was written until `drain()`: the Parquet writer writes
    into it, the response sends what it holds after each row group."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.position = 0
        self.closed = False

    def write(self, data) -> int:
        data = bytes(data)
        self.parts.append(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True

    def drain(self) -> bytes:
        out = b"".join(self.parts)
        self.parts = []
        return out


def _frame(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas(types_mapper=PANDAS_TYPES.get)


def _csv_table(table: pa.Table, columns: tuple[Column, ...]) -> pa.Table:
    """The table as the CSV shows it: timestamps in RFC 3339 (UTC, "Z"), and a ' before text a
    spreadsheet would run as a formula."""
    for i, column in enumerate(columns):
        values = table.column(i)
        if column.type == "ts":
            values = pc.strftime(values, format="%Y-%m-%dT%H:%M:%SZ")
        elif column.type in ("text", "json"):
            risky = None
            for prefix in CSV_DANGEROUS:
                starts = pc.starts_with(values, pattern=prefix)
                risky = starts if risky is None else pc.or_(risky, starts)
            values = pc.if_else(risky, pc.binary_join_element_wise("'", values, ""), values)
        else:
            continue
        table = table.set_column(i, column.name, values)
    return table


def encode(export: Export, tables: Iterator[pa.Table]) -> Iterator[bytes]:
    """The bytes of the export in its format, one piece per batch."""
    if export.format == "parquet":
        spool = _Spool()
        writer = pq.ParquetWriter(spool, schema(export.entity), compression="snappy")
        try:
            for table in tables:
                writer.write_table(table)
                yield spool.drain()
        finally:
            writer.close()
        yield spool.drain()
        return
    columns = COLUMNS[export.entity]
    first = True
    for table in tables:
        if export.format == "csv":
            out = pa.BufferOutputStream()
            pacsv.write_csv(_csv_table(table, columns), out, write_options=pacsv.WriteOptions(include_header=first))
            yield out.getvalue().to_pybytes()
        else:
            yield _frame(table).to_json(orient="records", lines=True, date_format="iso", date_unit="us").encode()
        first = False
    if first and export.format == "csv":  # no rows: the header still says what the columns are
        yield (",".join(c.name for c in COLUMNS[export.entity]) + "\n").encode()


def stream(export: Export, *, progress: Callable[[int, float], None] | None = None,
           fetch_rows: int = FETCH_ROWS) -> Iterator[bytes]:
    """The whole export as byte chunks; `progress(rows, seconds)` after each batch."""
    started = time.monotonic()
    count = 0

    def counted() -> Iterator[pa.Table]:
        nonlocal count
        for table in batches(export, fetch_rows=fetch_rows):
            count += table.num_rows
            yield table
            if progress:
                progress(count, time.monotonic() - started)

    for chunk in encode(export, counted()):
        if chunk:
            yield chunk
    log.info("analysis.exported project=%s entity=%s format=%s rows=%s seconds=%.1f", export.project.pk,
             export.entity, export.format, count, time.monotonic() - started)
