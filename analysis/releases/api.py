"""The release endpoints: `GET /api/v1/releases/compare` (the comparison the Releases page shows)
and `GET /api/v1/releases` (the list). Thin views: validate, call one selector, serialise."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from analysis.access import request_project
from analysis.costs import release_costs_cached
from analysis.filters import FilterError
from analysis.releases.compare import UnknownRelease, parse_threshold, release_compare, release_list
from analysis.releases.scope import compared_tasks, parse_compare_filters
from analysis.releases.serializers import ReleaseComparisonSerializer, ReleaseListSerializer

FILTER_PARAMETERS = [
    OpenApiParameter("project", OpenApiTypes.STR, required=False),
    OpenApiParameter("name", OpenApiTypes.STR, required=False, description="task name"),
    OpenApiParameter("environment", OpenApiTypes.STR, required=False),
    OpenApiParameter("device", OpenApiTypes.STR, required=False),
    OpenApiParameter("vendor", OpenApiTypes.STR, required=False,
                     description="device vendor: tasks with a step on one of its devices"),
    OpenApiParameter("since", OpenApiTypes.DATETIME, required=False),
    OpenApiParameter("until", OpenApiTypes.DATETIME, required=False),
    OpenApiParameter("range", OpenApiTypes.STR, required=False, description="15m, 1h, 6h, 24h, 7d, 30d"),
]


def _bad_request(message: str) -> ValidationError:
    return ValidationError({"error": message})


class ReleaseCompareView(APIView):
    @extend_schema(
        operation_id="release_compare",
        description="Compare release b against baseline release a: p50/p90/p95/p99 per task name "
                    "with bootstrap confidence intervals, Mann-Whitney p-values and a `regressed` "
                    "flag, and where the time changed (steps, tools, models, findings, budget).",
        parameters=[
            OpenApiParameter("a", OpenApiTypes.STR, required=True, description="baseline release"),
            OpenApiParameter("b", OpenApiTypes.STR, required=True, description="candidate release"),
            OpenApiParameter("threshold_pct", OpenApiTypes.NUMBER, required=False,
                             description="smallest p95 increase (percent) called a regression; default 10"),
            OpenApiParameter("alpha", OpenApiTypes.NUMBER, required=False,
                             description="significance level; default 0.05"),
            *FILTER_PARAMETERS,
        ],
        responses=ReleaseComparisonSerializer,
    )
    def get(self, request):
        project = request_project(request)
        params = request.query_params
        for param in ("a", "b"):
            if not params.get(param, "").strip():
                raise _bad_request(f"{param}: required (the name of a release)")
        try:
            filters = parse_compare_filters(params)
            threshold_pct, alpha = parse_threshold(params)
            comparison = release_compare(project=project, a=params["a"].strip(), b=params["b"].strip(),
                                         filters=filters, threshold_pct=threshold_pct, alpha=alpha)
        except (FilterError, UnknownRelease) as exc:
            raise _bad_request(str(exc)) from None
        a, b = params["a"].strip(), params["b"].strip()
        cost = release_costs_cached(project=project, tasks=compared_tasks(project=project, releases=[a, b],
                                                                          filters=filters), a=a, b=b, key=filters)
        return Response(ReleaseComparisonSerializer({**comparison.report, "cost": cost}).data)


class ReleaseListView(APIView):
    @extend_schema(operation_id="release_list", parameters=FILTER_PARAMETERS,
                   responses=ReleaseListSerializer)
    def get(self, request):
        project = request_project(request)
        try:
            filters = parse_compare_filters(request.query_params)
        except FilterError as exc:
            raise _bad_request(str(exc)) from None
        return Response(ReleaseListSerializer({"results": release_list(project=project,
                                                                        filters=filters)}).data)
