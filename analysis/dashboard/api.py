"""The read API: thin views that validate, call one selector and serialise."""

from __future__ import annotations

import itertools

from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from analysis import costs
from analysis.access import request_project
from analysis.dashboard import aggregates, export_slots, exports, selectors, status
from analysis.dashboard.serializers import (
    FindingPageSerializer,
    LatencyPageSerializer,
    StatusSerializer,
    TaskDetailSerializer,
    TaskPageSerializer,
)
from analysis.engine.detectors.base import all_detectors
from analysis.filters import (
    MAX_PATTERN_LENGTH,
    SORTS,
    FilterError,
    check_pattern,
    is_pattern,
    parse_limit,
    parse_task_filters,
    pattern_matches,
    pattern_parts,
    step_values,
)
from analysis.models import Finding

TASK_FILTER_PARAMETERS = [
    OpenApiParameter(name, OpenApiTypes.STR, required=False)
    for name in ("project", "release", "name", "status", "environment", "session_id", "device",
                 "finding", "since", "until", "range", "cursor", "sort")
] + [
    OpenApiParameter("model", OpenApiTypes.STR, required=False,
                     description="a step of this model: exact, or with * as a wildcard (gpt-4*, *mini*; "
                                 "case-insensitive); the known values are at /api/v1/search/values?field=model"),
    OpenApiParameter("tool", OpenApiTypes.STR, required=False,
                     description="a call of this tool: exact, or with * as a wildcard (search_*, *inventory*; "
                                 "case-insensitive); the known values are at /api/v1/search/values?field=tool"),
    OpenApiParameter("step_kind", OpenApiTypes.STR, required=False,
                     enum=["llm", "tool", "retrieval", "agent", "framework", "queue", "other"],
                     description="the kind of the step that model, tool, min_step_ms, error and attr describe"),
    OpenApiParameter("q", OpenApiTypes.STR, required=False,
                     description="the task name contains it, the task id is it, or a step's tool arguments or "
                                 "error hold its words (\"a phrase\", or, -word)"),
    OpenApiParameter("attr", OpenApiTypes.STR, required=False,
                     description="key:value — a step attribute, or a task (resource) attribute, as the sender "
                                 "sent it: keys ingest maps to a field (gen_ai.tool.name, gen_ai.request.model, "
                                 "token counts, …) are matched on that field"),
    OpenApiParameter("error", OpenApiTypes.STR, required=False, description="words of a step's error"),
    OpenApiParameter("min_step_ms", OpenApiTypes.NUMBER, required=False,
                     description="a work step at least this long (agent and framework steps, which wrap the "
                                 "others, only when step_kind names them); model, tool, error and attr describe "
                                 "the same step"),
    OpenApiParameter("running", OpenApiTypes.STR, required=False, enum=["1", "0"],
                     description="1: only tasks whose steps are still arriving"),
    OpenApiParameter("min_duration_ms", OpenApiTypes.NUMBER, required=False),
    OpenApiParameter("max_duration_ms", OpenApiTypes.NUMBER, required=False),
    OpenApiParameter("limit", OpenApiTypes.INT, required=False),
]


def filters_or_400(params):
    try:
        return parse_task_filters(params)
    except FilterError as exc:
        raise ValidationError({"error": str(exc)}) from None


class TaskListView(APIView):
    @extend_schema(operation_id="task_list", parameters=TASK_FILTER_PARAMETERS,
                   responses=TaskPageSerializer)
    def get(self, request):
        project = request_project(request)
        filters = filters_or_400(request.query_params)
        sort = request.query_params.get("sort", "-started_at")
        if sort not in SORTS:
            raise ValidationError({"error": f"sort: must be one of {', '.join(sorted(SORTS))}"})
        try:
            limit = parse_limit(request.query_params)
            tasks, next_cursor = selectors.task_list(
                project=project, filters=filters, limit=limit,
                cursor=request.query_params.get("cursor", ""), sort=sort)
        except FilterError as exc:
            raise ValidationError({"error": str(exc)}) from None
        found = costs.task_costs(tasks=tasks)  # one query for the page
        for task in tasks:
            task.cost = found[task.pk]
        return Response(TaskPageSerializer({"results": tasks, "next_cursor": next_cursor}).data)


VALUE_FIELDS = {"model": "model", "tool": "tool_name"}
MAX_VALUES = 500


class SearchValuesSerializer(serializers.Serializer):
    field = serializers.ChoiceField(choices=sorted(VALUE_FIELDS))
    values = serializers.ListField(child=serializers.CharField())
    complete = serializers.BooleanField(help_text="false: more values match than were listed")


class SearchValuesView(APIView):
    """The models or tools the project's steps name (for the task search's suggestions): those
    containing `q` (case-insensitive; `*` is a wildcard), up to 500, in order."""

    @extend_schema(operation_id="search_values", responses=SearchValuesSerializer, parameters=[
        OpenApiParameter("project", OpenApiTypes.STR, required=False),
        OpenApiParameter("field", OpenApiTypes.STR, required=True, enum=sorted(VALUE_FIELDS)),
        OpenApiParameter("q", OpenApiTypes.STR, required=False, description="the values containing it")])
    def get(self, request):
        project = request_project(request)
        field = request.query_params.get("field", "")
        if field not in VALUE_FIELDS:
            raise ValidationError({"error": f"field: must be one of {', '.join(sorted(VALUE_FIELDS))}"})
        text = request.query_params.get("q", "")
        try:
            pattern = check_pattern(text, name="q") if is_pattern(text) else f"*{text[:MAX_PATTERN_LENGTH]}*"
        except FilterError as exc:
            raise ValidationError({"error": str(exc)}) from None
        known = step_values(project=project, column=VALUE_FIELDS[field])
        parts = pattern_parts(pattern)
        matching = [v for v in known or () if pattern_matches(parts, v)]
        return Response({"field": field, "values": matching[:MAX_VALUES],
                         "complete": known is not None and len(matching) <= MAX_VALUES})


class TaskDetailView(APIView):
    @extend_schema(operation_id="task_detail",
                   parameters=[OpenApiParameter("project", OpenApiTypes.STR, required=False)],
                   responses=TaskDetailSerializer)
    def get(self, request, task_id: str):
        project = request_project(request)
        task = selectors.task_get(project=project, task_id=task_id)
        if task is None:
            raise NotFound("no such task")
        detail = _TaskDetail(task, [], selectors.task_findings(task=task),
                             selectors.task_analysis(task=task))
        data = TaskDetailSerializer(detail).data
        del data["steps"]
        # The steps are JSON that Postgres wrote (see selectors.task_steps_json), spliced in as
        # they are: a 50,000-step task answers in a fraction of a second, not seconds.
        head = JSONRenderer().render(data)
        steps = ", ".join(selectors.task_steps_json(task=task)).encode()
        return HttpResponse(head[:-1] + b', "steps": [' + steps + b"]}", content_type="application/json")


class _TaskDetail:
    """The task with its steps, findings and analysis, shaped for TaskDetailSerializer."""

    def __init__(self, task, steps, findings, analysis):
        self._task = task
        self.steps = steps
        self.findings = findings
        self.analysis = analysis
        self.critical_path = analysis.critical_path if analysis else []
        self.budget = analysis.budget if analysis else {}
        self.whatif = analysis.whatif if analysis else {}
        self.analyzed_at = analysis.analyzed_at if analysis else None

    def __getattr__(self, name):
        return getattr(self._task, name)


FINDING_PARAMETERS = [OpenApiParameter(name, OpenApiTypes.STR, required=False)
                      for name in ("project", "kind", "task_id", "release", "since", "until", "cursor")] + [
    OpenApiParameter("confidence", OpenApiTypes.STR, required=False,
                     description="high, medium or low, or a comma-separated list of them (any matches)"),
    OpenApiParameter("limit", OpenApiTypes.INT, required=False)]


def confidences_or_400(value: str) -> list[str]:
    """`confidence=high,medium` → ["high", "medium"]; an unknown level answers 400."""
    levels = [v.strip() for v in value.split(",") if v.strip()]
    if any(v not in Finding.CONFIDENCES for v in levels):
        raise ValidationError({"error": f"confidence: must be one of {', '.join(Finding.CONFIDENCES)},"
                                        " or a comma-separated list of them"})
    return levels


class FindingListView(APIView):
    """Findings, newest task first, keyset-paginated."""

    @extend_schema(operation_id="finding_list", parameters=FINDING_PARAMETERS, responses=FindingPageSerializer)
    def get(self, request):
        project = request_project(request)
        params = request.query_params
        kind = params.get("kind", "")
        if kind and kind not in all_detectors():
            raise ValidationError({"error": f"kind: must be one of {', '.join(sorted(all_detectors()))}"})
        confidence = confidences_or_400(params.get("confidence", ""))
        try:
            filters = parse_task_filters({k: params[k] for k in ("since", "until") if k in params})
            limit = parse_limit(params)
            findings, next_cursor = selectors.finding_page(
                project=project, kind=kind, task_id=params.get("task_id", ""), release=params.get("release", ""),
                since=filters.since, until=filters.until, confidence=confidence, limit=limit,
                cursor=params.get("cursor", ""))
        except FilterError as exc:
            raise ValidationError({"error": str(exc)}) from None
        return Response(FindingPageSerializer({"results": findings, "next_cursor": next_cursor}).data)


LATENCY_GROUPS = ("task", "kind", "name", "tool", "model", "device")  # as the Latency page groups


class LatencyView(APIView):
    """count, p50, p90, p95, p99 and max duration (ms) per group, computed in Postgres."""

    @extend_schema(operation_id="latency", parameters=TASK_FILTER_PARAMETERS + [
        OpenApiParameter("group_by", OpenApiTypes.STR, required=False, enum=list(LATENCY_GROUPS))],
        responses=LatencyPageSerializer)
    def get(self, request):
        project = request_project(request)
        group_by = request.query_params.get("group_by", "task")
        if group_by not in LATENCY_GROUPS:
            raise ValidationError({"error": f"group_by: must be one of {', '.join(LATENCY_GROUPS)}"})
        filters = filters_or_400(request.query_params)
        rows = aggregates.duration_percentiles(project=project, filters=filters, group_by=group_by, limit=100)
        return Response(LatencyPageSerializer({"group_by": group_by, "results": rows}).data)


class StatusView(APIView):
    """Pipeline health of the caller's project: analysis lag and backlog, rollup lag, queue depth."""

    @extend_schema(operation_id="status",
                   parameters=[OpenApiParameter("project", OpenApiTypes.STR, required=False)],
                   responses=StatusSerializer)
    def get(self, request):
        return Response(StatusSerializer(status.pipeline_status(project=request_project(request))).data)


class _IgnoreFormatParameter(DefaultContentNegotiation):
    """`format=` names the export's file format, not a DRF renderer: errors are always JSON."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


EXPORT_PARAMETERS = [
    OpenApiParameter("format", OpenApiTypes.STR, required=False, enum=list(exports.FORMATS),
                     description="parquet (default), csv or jsonl"),
    *[OpenApiParameter(name, OpenApiTypes.STR, required=False)
      for name in ("project", *exports.TASK_PARAMS, *exports.STEP_PARAMS) if name not in ("min_duration_ms",
                                                                                            "max_duration_ms")],
    OpenApiParameter("min_duration_ms", OpenApiTypes.NUMBER, required=False),
    OpenApiParameter("max_duration_ms", OpenApiTypes.NUMBER, required=False),
]


class ExportView(APIView):
    """A streamed bulk export of tasks, steps, findings or resource samples (docs/export.md)."""

    content_negotiation_class = _IgnoreFormatParameter

    @extend_schema(operation_id="export", parameters=EXPORT_PARAMETERS,
                   responses={(200, "application/vnd.apache.parquet"): OpenApiTypes.BINARY,
                              (200, "text/csv"): OpenApiTypes.STR,
                              (200, "application/x-ndjson"): OpenApiTypes.STR})
    def get(self, request, entity: str):
        project = request_project(request)
        try:
            export = exports.parse_export(project=project, entity=entity, params=request.query_params)
        except FilterError as exc:
            raise ValidationError({"error": str(exc)}) from None
        # Imported here: pyarrow and pandas would weigh ~100 MB in every web worker from the start.
        from analysis.dashboard.export_arrow import stream

        try:
            slot = export_slots.take()
        except export_slots.Busy as busy:
            return Response({"error": busy.message}, status=503, headers=busy.headers)
        with slot:
            chunks = stream(export)
            # The first chunk is made here, in the view: a database that is down answers 503 with
            # Retry-After (not a broken stream) before anything is sent.
            first = next(chunks, b"")
            response = StreamingHttpResponse(slot.stream(itertools.chain([first], chunks)),
                                             content_type=export.content_type)
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        return response
