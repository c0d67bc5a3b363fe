"""Bulk export of a project's tasks, steps, findings and resource samples as Parquet, CSV or
JSON Lines (`GET /api/v1/export/<entity>`, `manage.py export`; docs/export.md).

Bounded memory whatever the size: one SQL statement per export, streamed by Postgres with
`COPY (...) TO STDOUT` (one statement, one consistent snapshot) and cut into blocks of
FETCH_ROWS rows; each block is parsed into an Arrow table with fixed column types by pyarrow's
CSV reader, then written as one Parquet row group (pyarrow), CSV (pyarrow) or JSON Lines
(pandas), and handed on before the next block is read. Nothing holds more than one block, and
no Python object is made per value. That Arrow side, and `stream`, the whole export as bytes, are in
analysis/dashboard/export_arrow.py, imported on the first export only (pyarrow and pandas weigh
~100 MB in every process that imports them).

The filters are the task list's (`parse_task_filters` + `task_queryset`: one
definition), plus `kind` and `model` of a step; cost columns come from analysis.costs."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields

from django.db.models import Exists, OuterRef

from analysis import costs
from analysis.filters import FilterError, TaskFilters, parse_task_filters, task_queryset
from ingest.models import Project, Step

log = logging.getLogger("agentops.analysis")

ENTITIES = ("tasks", "steps", "findings", "samples")
FORMATS = {"parquet": ("application/vnd.apache.parquet", "parquet"),
           "csv": ("text/csv; charset=utf-8", "csv"),
           "jsonl": ("application/x-ndjson", "jsonl")}
FETCH_ROWS = 20_000  # one block = one Parquet row group: ~8 MB of steps as text, then as Arrow
# The task list's filters, whatever they are: every field of TaskFilters is a parameter of the
# same name (parse_task_filters), plus the `range` preset.
TASK_PARAMS = tuple(f.name for f in fields(TaskFilters)) + ("range",)
STEP_PARAMS = tuple(p for p in ("kind", "model") if p not in TASK_PARAMS)
SAMPLE_PARAMS = ("device", "since", "until", "range")
COMMON_PARAMS = ("format", "project")
# Text a spreadsheet would run as a formula: every CSV the product writes (these exports, the
# dashboard's /tasks.csv and /findings.csv) prefixes such a cell with '.
CSV_DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
# Column types: text, int, float, bool, ts (timestamp with time zone, UTC, microseconds), json
# (JSON as text: attributes, tool arguments, id lists); their Arrow types are in export_arrow.

def _ts(column: str) -> str:
    # Microseconds since the epoch: Arrow takes them as they are, with no Python datetime per value.
    return f"(extract(epoch FROM {column}) * 1000000)::int8"


def _json(column: str) -> str:
    return f"to_json({column})::text"


@dataclass(frozen=True)
class Column:
    name: str
    sql: str
    type: str


def _columns(*specs: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(name, sql, kind) for name, sql, kind in specs)


TASK_COLUMNS = _columns(
    ("task_id", "t.task_id", "text"), ("name", "t.name", "text"), ("release", "t.release", "text"),
    ("environment", "t.environment", "text"), ("session_id", "t.session_id", "text"),
    ("status", "t.status", "text"), ("started_at", _ts("t.started_at"), "ts"),
    ("ended_at", _ts("t.ended_at"), "ts"), ("duration_ms", "t.duration_ms", "float"),
    ("step_count", "t.step_count", "int"), ("error_count", "t.error_count", "int"),
    ("input_tokens", "t.input_tokens", "int"), ("output_tokens", "t.output_tokens", "int"),
    ("llm_steps", "c.llm_steps", "int"), ("cost_usd", "c.cost_usd", "float"),
    ("unpriced_llm_steps", "c.unpriced", "int"), ("wasted_ms", "a.wasted_ms", "float"),
    ("top_finding", "a.top_finding", "text"), ("finding_kinds", _json("a.finding_kinds"), "json"),
    ("analyzed_at", _ts("a.analyzed_at"), "ts"), ("attributes", "t.attributes::text", "json"),
)
STEP_COLUMNS = _columns(
    ("task_id", "t.task_id", "text"), ("task_name", "t.name", "text"), ("release", "t.release", "text"),
    ("environment", "t.environment", "text"), ("step_id", "s.step_id", "text"),
    ("parent_step_id", "s.parent_step_id", "text"), ("kind", "s.kind", "text"), ("name", "s.name", "text"),
    ("status", "s.status", "text"), ("started_at", _ts("s.started_at"), "ts"),
    ("ended_at", _ts("s.ended_at"), "ts"), ("duration_ms", "s.duration_ms", "float"),
    ("error", "s.error", "text"), ("model", "s.model", "text"), ("provider", "s.provider", "text"),
    ("device", "s.device", "text"), ("input_tokens", "s.input_tokens", "int"),
    ("output_tokens", "s.output_tokens", "int"), ("cached_tokens", "s.cached_tokens", "int"),
    ("ttft_ms", "s.ttft_ms", "float"), ("streamed", "s.streamed", "bool"),
    ("cost_usd", costs.step_cost_sql(), "float"), ("priced", costs.step_priced_sql(), "bool"),
    ("tool_name", "s.tool_name", "text"), ("tool_args", "s.tool_args::text", "json"),
    ("tool_result", "s.tool_result", "text"), ("tool_call_id", "s.tool_call_id", "text"),
    ("tool_call_ids", _json("s.tool_call_ids"), "json"), ("depends_on", _json("s.depends_on"), "json"),
    ("attributes", "s.attributes::text", "json"), ("events", "s.events::text", "json"),
)
FINDING_COLUMNS = _columns(
    ("finding_id", "f.id", "int"), ("task_id", "t.task_id", "text"), ("task_name", "t.name", "text"),
    ("release", "f.release", "text"), ("task_started_at", _ts("f.task_started_at"), "ts"),
    ("kind", "f.kind", "text"), ("severity", "f.severity", "text"), ("confidence", "f.confidence", "text"),
    ("confidence_reason", "f.confidence_reason", "text"), ("wasted_ms", "f.wasted_ms", "float"),
    ("step_ids", _json("f.step_ids"), "json"), ("summary", "f.summary", "text"),
    ("evidence", "f.evidence::text", "json"), ("created_at", _ts("f.created_at"), "ts"),
)
SAMPLE_COLUMNS = _columns(
    ("device", "r.device", "text"), ("vendor", "d.vendor", "text"), ("hardware", "d.hardware", "text"),
    ("ts", _ts("r.ts"), "ts"),
    *((metric, f"r.{metric}", "float") for metric in ("utilization", "queue_depth", "batch_size", "power_w",
                                                        "temperature_c", "mem_bw_util", "kv_cache_hit_rate",
                                                        "tokens_per_s", "throttled")),
    ("extra", "r.extra::text", "json"),
)
COLUMNS = {"tasks": TASK_COLUMNS, "steps": STEP_COLUMNS, "findings": FINDING_COLUMNS, "samples": SAMPLE_COLUMNS}


@dataclass(frozen=True)
class Export:
    """One export: what, in which format, of which project, filtered how."""

    project: Project
    entity: str
    format: str
    filters: TaskFilters
    kind: str = ""
    model: str = ""

    @property
    def content_type(self) -> str:
        return FORMATS[self.format][0]

    @property
    def filename(self) -> str:
        """A file name safe in a Content-Disposition header, whatever the project is called."""
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", self.project.name).strip("._") or "project"
        return f"{name}-{self.entity}.{FORMATS[self.format][1]}"


def parse_export(*, project: Project, entity: str, params: Mapping[str, str], default_format: str = "parquet") -> Export:
    """Validate an export request; FilterError names the first bad parameter."""
    if entity not in ENTITIES:
        raise FilterError(f"entity: must be one of {', '.join(ENTITIES)}")
    fmt = params.get("format") or default_format
    if fmt not in FORMATS:
        raise FilterError(f"format: must be one of {', '.join(FORMATS)}")
    allowed = COMMON_PARAMS + (SAMPLE_PARAMS if entity == "samples" else TASK_PARAMS + STEP_PARAMS)
    for key in params:
        if key not in allowed:
            if entity == "samples" and key in TASK_PARAMS + STEP_PARAMS:
                raise FilterError(f"{key}: samples belong to devices, not tasks: filter them by "
                                  f"{', '.join(SAMPLE_PARAMS)}")
            raise FilterError(f"{key}: unknown parameter (expected {', '.join(allowed)})")
    filters = parse_task_filters({k: v for k, v in params.items() if k in TASK_PARAMS})
    kind, model = params.get("kind", ""), params.get("model", "")
    if kind and kind not in Step.KINDS:
        raise FilterError(f"kind: must be one of {', '.join(Step.KINDS)}")
    if len(model) > 200:
        raise FilterError("model: at most 200 characters")
    return Export(project=project, entity=entity, format=fmt, filters=filters, kind=kind, model=model)


def _task_ids_sql(export: Export) -> tuple[str, list]:
    """The ids of the tasks the filters select: the task list's own query (task_queryset),
    narrowed to tasks with a step of `kind` / `model` when those are given."""
    qs = task_queryset(project=export.project, filters=export.filters)
    # (a step filter that is also a task filter is already in task_queryset)
    step_match = {k: v for k, v in (("kind", export.kind), ("model", export.model)) if v and k in STEP_PARAMS}
    if step_match:
        qs = qs.filter(Exists(Step.objects.filter(project=export.project, task=OuterRef("pk"), **step_match)))
    sql, params = qs.values("id").query.sql_with_params()
    return sql, list(params)


def export_sql(export: Export) -> tuple[str, list]:
    """The one statement an export runs, and its parameters."""
    select = ", ".join(f"{c.sql} AS {c.name}" for c in COLUMNS[export.entity])
    pk = export.project.pk
    if export.entity == "samples":
        where, params = ["r.project_id = %s"], [pk]
        f = export.filters
        for clause, value in (("r.ts >= %s", f.since), ("r.ts < %s", f.until), ("r.device = %s", f.device)):
            if value:
                where.append(clause)
                params.append(value)
        return (f"SELECT {select} FROM ingest_resourcesample r LEFT JOIN ingest_device d"
                f" ON d.project_id = r.project_id AND d.name = r.device WHERE {' AND '.join(where)}", params)
    ids, id_params = _task_ids_sql(export)
    if export.entity == "tasks":
        return (f"SELECT {select} FROM ingest_task t"
                f" LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id AND a.project_id = t.project_id"
                f" LEFT JOIN LATERAL (SELECT count(*) AS llm_steps, sum({costs.step_cost_sql()}) AS cost_usd,"
                f"   count(*) FILTER (WHERE p.model IS NULL) AS unpriced"
                f"   FROM ingest_step s{costs.price_join()} WHERE s.task_id = t.id AND s.project_id = %s"
                f" AND s.kind = %s) c ON true"
                f" WHERE t.project_id = %s AND t.id IN ({ids})", [pk, costs.LLM_KIND, pk, *id_params])
    if export.entity == "findings":
        where, params = [f"f.project_id = %s AND f.task_id IN ({ids})"], [pk, *id_params]
        if export.filters.finding:
            where.append("f.kind = %s")
            params.append(export.filters.finding)
        return (f"SELECT {select} FROM analysis_finding f JOIN ingest_task t ON t.id = f.task_id AND t.project_id = f.project_id"
                f" WHERE {' AND '.join(where)}", params)
    where, params = [f"s.project_id = %s AND s.task_id IN ({ids})"], [pk, *id_params]
    for column, value in (("kind", export.kind), ("model", export.model), ("device", export.filters.device)):
        if value:
            where.append(f"s.{column} = %s")
            params.append(value)
    return (f"SELECT {select} FROM ingest_step s JOIN ingest_task t ON t.id = s.task_id AND t.project_id = s.project_id{costs.price_join()}"
            f" WHERE {' AND '.join(where)}", params)
