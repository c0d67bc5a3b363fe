"""The Instrumentation page (`/instrumentation`) and its API (`GET /api/v1/instrumentation`): what each
service's instrumentation sends and what that leaves the findings unable to see
(analysis/dashboard/instrumentation.py)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from analysis.access import request_project
from analysis.dashboard import instrumentation as health_reads
from analysis.dashboard.api import filters_or_400
from analysis.dashboard.instrumentation import BLIND, MOST, NONE, OK, WEAKENED
from analysis.dashboard.views import _page, _scope

STATUSES = [BLIND, WEAKENED, OK]


def _level(field: str, share: float | None) -> str:
    if share is None:
        return ""
    if field == "call_ids":  # a final answer requests no calls: any share but none is as it should be
        return "none" if share < NONE else "all"
    return "none" if share < NONE else "some" if share < MOST else "all"


@login_required
def instrumentation_page(request):
    project, filters, error = _scope(request)
    health = None
    if project and not error:
        health = health_reads.instrumentation_health(project=project, filters=filters,
                                                     service=request.GET.get("service"))
        for service in health["services"]:
            service["problems"] = [c for c in service["checks"] if c["status"] != OK]
            for scope in service["scopes"]:
                scope["problems"] = [c for c in scope["checks"] if c["status"] != OK]
                for f in scope["fields"]:
                    f["level"] = _level(f["field"], f["share"])
    return _page(request, "analysis/instrumentation.html", project, error, health=health,
                 service=request.GET.get("service"),
                 none_pct=round(NONE * 100), most_pct=round(MOST * 100))


class FixSerializer(serializers.Serializer):
    switch = serializers.CharField(help_text="the environment variable or setting; empty when the library has none")
    text = serializers.CharField()


class CheckSerializer(serializers.Serializer):
    check = serializers.CharField(help_text="a finding kind (repeated_tool_call, parallelizable_calls, slow_step, "
                                            "context_growth), 'hardware verdicts' or 'sessions'")
    status = serializers.ChoiceField(choices=STATUSES)
    because = serializers.CharField()
    fixes = FixSerializer(many=True)


class FieldSerializer(serializers.Serializer):
    field = serializers.CharField()
    label = serializers.CharField()
    of = serializers.CharField(help_text="the step kinds whose spans it is counted over ('all': every span)")
    count = serializers.IntegerField(help_text="spans that carried it")
    spans = serializers.IntegerField(help_text="spans it is counted over")
    share = serializers.FloatField(allow_null=True)


class NameVersionSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True)
    version = serializers.CharField(allow_blank=True)


class SdkSerializer(NameVersionSerializer):
    language = serializers.CharField(allow_blank=True)


class LibrarySerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    package = serializers.CharField(allow_blank=True)


class ScopeSerializer(serializers.Serializer):
    scope = NameVersionSerializer(help_text="otel.scope.name / version; empty for the native API and for the "
                                            "row of other scopes")
    other_scopes = serializers.IntegerField(help_text="0, or the row sums the service's scopes past the busiest "
                                                      f"{health_reads.MAX_SCOPES}: how many")
    sdk = SdkSerializer(help_text="telemetry.sdk.* of the resource")
    library = LibrarySerializer()
    spans = serializers.IntegerField()
    kinds = serializers.DictField(child=serializers.IntegerField(), help_text="spans per step kind")
    unclassified = serializers.IntegerField(help_text="spans no convention classified (kind other)")
    server_spans = serializers.IntegerField(help_text="inference servers' own request spans (gen_ai.latency.*)")
    fields = FieldSerializer(many=True)
    checks = CheckSerializer(many=True)


class ServiceSerializer(serializers.Serializer):
    service = serializers.CharField(allow_blank=True, allow_null=True,
                                    help_text="resource service.name; null for the block of other services")
    other_services = serializers.IntegerField(help_text="0, or the block sums the services past the busiest "
                                                        f"{health_reads.MAX_SERVICES}: how many")
    spans = serializers.IntegerField()
    session_share = serializers.FloatField(allow_null=True)
    blind = serializers.ListField(child=serializers.CharField(), help_text="checks blind in some scope")
    weakened = serializers.ListField(child=serializers.CharField())
    scopes = ScopeSerializer(many=True)
    checks = CheckSerializer(many=True, help_text="checks of the service as a whole (sessions)")


class ThresholdSerializer(serializers.Serializer):
    none = serializers.FloatField(help_text="a share under this is 'not recorded'")
    most = serializers.FloatField(help_text="a share under this is 'recorded on some'")


class InstrumentationSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    clipped = serializers.BooleanField(help_text="the range asked for was longer than 31 days: its last 31 are read")
    thresholds = ThresholdSerializer()
    max_services = serializers.IntegerField(help_text="services listed, by spans; the rest are one block")
    max_scopes = serializers.IntegerField(help_text="scopes listed per service, by spans; the rest are one row")
    services = ServiceSerializer(many=True)


class InstrumentationView(APIView):
    @extend_schema(operation_id="instrumentation",
                   parameters=[OpenApiParameter(name, OpenApiTypes.STR, required=False)
                               for name in ("project", "since", "until", "range", "release", "environment")]
                   + [OpenApiParameter("service", OpenApiTypes.STR, required=False,
                                       description="this service alone (one past the busiest listed, say)")],
                   responses=InstrumentationSerializer)
    def get(self, request):
        project = request_project(request)
        filters = filters_or_400(request.query_params)
        health = health_reads.instrumentation_health(project=project, filters=filters,
                                                     service=request.query_params.get("service"))
        return Response(InstrumentationSerializer(health).data)
