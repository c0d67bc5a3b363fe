"""Read API of the comparisons and sessions: thin views over analysis/comparison/diff.py and
analysis/dashboard/sessions.py. Same authentication and tenancy as the rest of the read API (a key with
the `read` scope, or a logged-in session); a bad parameter answers 400 naming it."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from analysis.access import request_project
from analysis.comparison import diff
from analysis.dashboard import selectors, sessions
from analysis.dashboard.api import TASK_FILTER_PARAMETERS, filters_or_400
from analysis.dashboard.serializers import FindingSerializer, TaskSerializer
from analysis.filters import FilterError, parse_limit

PROJECT = OpenApiParameter("project", OpenApiTypes.STR, required=False)


def against_or_400(params) -> str:
    against = params.get("against", "typical").strip()
    if not against:
        raise ValidationError({"error": "against: typical or a task id"})
    if "\x00" in against or len(against) > 128:
        raise ValidationError({"error": "against: not a task id"})
    return against


def diff_data(*, project, task, against: str, rows: bool = True) -> dict:
    try:
        return diff.diff_payload(project=project, task=task, against=against, rows=rows)
    except LookupError:
        raise NotFound(f"against: no such task {against!r}") from None


class DiffItemSerializer(serializers.Serializer):
    kind = serializers.CharField()
    ms = serializers.FloatField(help_text="this item's share of the difference (negative: faster)")
    text = serializers.CharField()
    step_ids = serializers.ListField(child=serializers.CharField(), help_text="this task's steps behind it")
    other_step_ids = serializers.ListField(child=serializers.CharField(), help_text="the other task's steps")
    verdict = serializers.CharField()


class DiffSerializer(serializers.Serializer):
    available = serializers.BooleanField(help_text="false when there is nothing to compare with (see reason)")
    reason = serializers.CharField(required=False)
    task_id = serializers.CharField()
    against = serializers.CharField()
    running = serializers.BooleanField(required=False)
    task_ms = serializers.FloatField(required=False)
    other_ms = serializers.FloatField(required=False, help_text="the typical (median) or the other task's duration")
    difference_ms = serializers.FloatField(required=False)
    headline = serializers.CharField(required=False)
    items = DiffItemSerializer(many=True, required=False, help_text="largest first; they sum to difference_ms")
    typical = serializers.JSONField(required=False)
    row_fields = serializers.ListField(child=serializers.CharField(), required=False,
                                       help_text="the names of each row's values, in order")
    rows = serializers.ListField(child=serializers.ListField(child=serializers.JSONField(allow_null=True)),
                                 required=False, help_text="the aligned steps, one list of values per row "
                                 "(status same|slower|faster|extra|missing, label, turn, other_turn, step_id, "
                                 "other_step_id, start_ms, duration_ms, other_start_ms, other_duration_ms, kind, "
                                 "delta_ms)")


class TaskDiffView(APIView):
    """What made this task slower (or faster) than its typical run or another task."""

    @extend_schema(operation_id="task_diff", responses=DiffSerializer, parameters=[
        PROJECT,
        OpenApiParameter("against", OpenApiTypes.STR, required=False,
                         description="`typical` (default) or the task id of another task of the project"),
        OpenApiParameter("rows", OpenApiTypes.BOOL, required=False, description="include the aligned rows (default 1)")])
    def get(self, request, task_id: str):
        project = request_project(request)
        task = selectors.task_get(project=project, task_id=task_id)
        if task is None:
            raise NotFound("no such task")
        rows = request.query_params.get("rows", "1")
        if rows not in ("0", "1", "true", "false"):
            raise ValidationError({"error": "rows: must be 1 or 0"})
        return Response(diff_data(project=project, task=task, against=against_or_400(request.query_params),
                                  rows=rows in ("1", "true")))


class SessionSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    turns = serializers.IntegerField()
    total_ms = serializers.FloatField(help_text="the time the user waited, all turns")
    slowest_ms = serializers.FloatField(help_text="the slowest turn")
    mean_ms = serializers.FloatField()
    first_started = serializers.DateTimeField()
    last_started = serializers.DateTimeField()
    errors = serializers.IntegerField(help_text="failed turns")
    names = serializers.ListField(child=serializers.CharField())
    wasted_ms = serializers.FloatField()
    findings = serializers.IntegerField(help_text="findings that count")


class SessionPageSerializer(serializers.Serializer):
    results = SessionSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class TurnSerializer(serializers.Serializer):
    turn = serializers.IntegerField(source="number")
    task = TaskSerializer()
    waited_ms = serializers.FloatField(allow_null=True, help_text="the time the user waited for this answer")
    since_previous_ms = serializers.FloatField(allow_null=True, help_text="from the previous answer to this request")
    running = serializers.BooleanField()
    findings = FindingSerializer(many=True)


class SessionDetailSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    turns = TurnSerializer(many=True)


class SessionListView(APIView):
    """Sessions (tasks sharing a session id) with the task list's filters."""

    @extend_schema(operation_id="session_list", responses=SessionPageSerializer, parameters=[
        p for p in TASK_FILTER_PARAMETERS if p.name != "sort"] + [
        OpenApiParameter("sort", OpenApiTypes.STR, required=False, enum=sorted(sessions.SORTS))])
    def get(self, request):
        project = request_project(request)
        filters = filters_or_400(request.query_params)
        try:
            rows, next_cursor = sessions.session_list(
                project=project, filters=filters, sort=request.query_params.get("sort", "-last_started"),
                limit=parse_limit(request.query_params), cursor=request.query_params.get("cursor", ""))
        except FilterError as exc:
            raise ValidationError({"error": str(exc)}) from None
        return Response(SessionPageSerializer({"results": rows, "next_cursor": next_cursor}).data)


class SessionDetailView(APIView):
    """One session: a row per turn with the time the user waited and the turn's findings."""

    @extend_schema(operation_id="session_detail", responses=SessionDetailSerializer, parameters=[PROJECT])
    def get(self, request, session_id: str):
        project = request_project(request)
        turns = sessions.session_detail(project=project, session_id=session_id)
        if not turns:
            raise NotFound("no such session")
        return Response(SessionDetailSerializer({"session_id": session_id, "turns": turns}).data)
