"""The alerts API: rules CRUD and their event history. Reads need a `read`-scope key or a
session; writes a session (CSRF-checked by DRF) or an `admin`-scope key."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from analysis.access import request_project
from analysis.alerts import selectors
from analysis.alerts.serializers import AlertEventPageSerializer, AlertRuleSerializer
from analysis.filters import FilterError, parse_limit
from ingest.models import IngestKey

PROJECT = OpenApiParameter("project", OpenApiTypes.STR, required=False)


def _rule_or_404(project, rule_id: int):
    rule = selectors.rule_get(project=project, rule_id=rule_id)
    if rule is None:
        raise NotFound("no such alert rule")
    return rule


class RuleListView(APIView):
    @extend_schema(operation_id="alert_rule_list", parameters=[PROJECT],
                   responses=AlertRuleSerializer(many=True))
    def get(self, request):
        project = request_project(request)
        return Response(AlertRuleSerializer(selectors.rule_list(project=project), many=True).data)

    @extend_schema(operation_id="alert_rule_create", parameters=[PROJECT],
                   request=AlertRuleSerializer, responses={201: AlertRuleSerializer})
    def post(self, request):
        project = request_project(request, scope=IngestKey.SCOPE_ADMIN)
        serializer = AlertRuleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rule = serializer.save(project=project)
        return Response(AlertRuleSerializer(rule).data, status=201)


class RuleDetailView(APIView):
    @extend_schema(operation_id="alert_rule_detail", parameters=[PROJECT], responses=AlertRuleSerializer)
    def get(self, request, rule_id: int):
        rule = _rule_or_404(request_project(request), rule_id)
        return Response(AlertRuleSerializer(rule).data)

    @extend_schema(operation_id="alert_rule_update", parameters=[PROJECT],
                   request=AlertRuleSerializer, responses=AlertRuleSerializer)
    def patch(self, request, rule_id: int):
        rule = _rule_or_404(request_project(request, scope=IngestKey.SCOPE_ADMIN), rule_id)
        serializer = AlertRuleSerializer(rule, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        return Response(AlertRuleSerializer(serializer.save()).data)

    @extend_schema(operation_id="alert_rule_delete", parameters=[PROJECT], responses={204: None})
    def delete(self, request, rule_id: int):
        rule = _rule_or_404(request_project(request, scope=IngestKey.SCOPE_ADMIN), rule_id)
        rule.delete()
        return Response(status=204)


class EventListView(APIView):
    @extend_schema(operation_id="alert_event_list", responses=AlertEventPageSerializer, parameters=[
        PROJECT, OpenApiParameter("rule", OpenApiTypes.INT, required=False),
        OpenApiParameter("limit", OpenApiTypes.INT, required=False),
        OpenApiParameter("cursor", OpenApiTypes.STR, required=False)])
    def get(self, request):
        project = request_project(request)
        params = request.query_params
        try:
            rule_id = _int(params, "rule")
            before_id = _int(params, "cursor")
            limit = parse_limit(params)
        except FilterError as exc:
            raise ValidationError({"error": str(exc)}) from None
        if rule_id is not None:
            _rule_or_404(project, rule_id)
        events, next_id = selectors.event_list(project=project, rule_id=rule_id, before_id=before_id,
                                               limit=limit)
        page = {"results": events, "next_cursor": None if next_id is None else str(next_id)}
        return Response(AlertEventPageSerializer(page).data)


def _int(params, key: str) -> int | None:
    value = params.get(key)
    if value in (None, ""):
        return None
    if not value.isdigit() or len(value) > 18:
        raise FilterError(f"{key}: {value!r} is not a whole number")
    return int(value)
