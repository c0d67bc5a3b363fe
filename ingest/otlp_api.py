"""OTLP/HTTP receivers: `POST /v1/traces` and `POST /v1/metrics`.

Thin views: authenticate the project key, read the body within the limits, decode with the
pure `ingest.otlp`, store through `batch_store` (the one write path), reply in the request's
encoding. Any OpenTelemetry SDK pointed at agentops with OTEL_EXPORTER_OTLP_ENDPOINT and
OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer <key>" sends here unchanged.

Failures answer a google.rpc.Status in the request's encoding (OTLP/HTTP asks for it), with
the status the clients understand: 400 is permanent, 429/503 (with Retry-After) are retried.
"""

from __future__ import annotations

import logging

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest import otlp
from ingest.api import RawBodyParser
from ingest.auth import HasIngestScope, IngestKeyAuthentication
from ingest.http import BodyError, request_body
from ingest.services import batch_store

log = logging.getLogger("agentops.ingest")

_KEEP_HEADERS = ("Retry-After", "WWW-Authenticate")


class OtlpStatusSerializer(serializers.Serializer):
    """google.rpc.Status, the body of an OTLP/HTTP failure reply."""

    code = serializers.IntegerField(help_text="google.rpc.Code")
    message = serializers.CharField()


def _schema(*, operation_id: str, what: str, rejected_field: str, description: str):
    partial = inline_serializer(f"{what}PartialSuccess", {
        rejected_field: serializers.CharField(help_text="int64, as a decimal string"),
        "errorMessage": serializers.CharField(),
    }, required=False)  # omitted on full success, as the OTLP spec says
    errors = {code: OpenApiResponse(OtlpStatusSerializer, description=text) for code, text in (
        (400, "undecodable body (the message says what and where)"), (401, "no or unknown key"),
        (403, "the key has no 'ingest' scope"), (413, "body over the limit after decompression"),
        (415, "Content-Type is not application/x-protobuf or application/json"),
        (408, "the body stopped arriving mid-way"),
        (503, "database unavailable, or the process holds as many bodies as it may; retry after "
              "Retry-After seconds"))}
    return extend_schema(
        operation_id=operation_id,
        tags=["otlp"],
        request={otlp.PROTOBUF: OpenApiTypes.BINARY, otlp.JSON: OpenApiTypes.OBJECT},
        responses={
            (200, otlp.PROTOBUF): OpenApiTypes.BINARY,
            (200, otlp.JSON): inline_serializer(f"Export{what}ServiceResponse", {
                "partialSuccess": partial}),
            **errors,
        },
        description=description,
    )


class _OtlpView(APIView):
    authentication_classes = [IngestKeyAuthentication]
    permission_classes = [HasIngestScope]
    parser_classes = [RawBodyParser]
    what = ""

    def decode(self, body: bytes, *, media: str) -> otlp.Decoded:
        raise NotImplementedError

    def reply(self, decoded: otlp.Decoded, *, media: str) -> bytes:
        raise NotImplementedError

    def handle(self, request):
        header = request.META.get("CONTENT_TYPE", "")
        media = otlp.media_type(header)
        if media is None:
            return _status(415, f"Content-Type: {header[:80]!r} is not supported "
                                f"(use {otlp.PROTOBUF} or {otlp.JSON})", otlp.JSON)
        project = request.auth.project
        try:
            with request_body(request) as body:
                decoded = self.decode(body, media=media)
                del body
                if len(decoded.batch):
                    batch_store(project=project, batch=decoded.batch)
        except BodyError as exc:
            response = _status(exc.status, exc.message, media)
            for name, value in exc.headers.items():
                response[name] = value
            return response
        except otlp.OtlpDecodeError as exc:
            return _status(400, str(exc), media)
        log.info("ingest.received source=otlp_%s project=%s records=%d rejected=%d",
                 self.what, project.pk, len(decoded.batch), decoded.rejected)
        return HttpResponse(self.reply(decoded, media=media), content_type=media)

    def finalize_response(self, request, response, *args, **kwargs):
        # Errors raised by DRF (401, 403, 503 from the exception handler) become a Status
        # in the request's encoding too.
        if isinstance(response, Response) and response.status_code >= 400:
            data = response.data
            message = str(data.get("error", data)) if isinstance(data, dict) else str(data)
            media = otlp.media_type(request.META.get("CONTENT_TYPE", "")) or otlp.JSON
            status = _status(response.status_code, message, media)
            for name in _KEEP_HEADERS:
                if name in response:
                    status[name] = response[name]
            response = status
        return super().finalize_response(request, response, *args, **kwargs)


def _status(http_status: int, message: str, media: str) -> HttpResponse:
    return HttpResponse(otlp.status_body(http_status, message, media=media), status=http_status,
                        content_type=media)


class OtlpTracesView(_OtlpView):
    what = "traces"

    def decode(self, body, *, media):
        return otlp.decode_traces(body, media=media)

    def reply(self, decoded, *, media):
        return otlp.trace_response(decoded, media=media)

    @_schema(operation_id="otlp_traces_export", what="Trace", rejected_field="rejectedSpans",
             description="OTLP/HTTP trace export (ExportTraceServiceRequest), protobuf or proto3 "
                         "JSON, optionally gzip. A trace is a task, a span a step. Invalid spans are "
                         "refused one by one and reported in partialSuccess; the rest are stored.")
    def post(self, request):
        return self.handle(request)


class OtlpMetricsView(_OtlpView):
    what = "metrics"

    def decode(self, body, *, media):
        return otlp.decode_metrics(body, media=media)

    def reply(self, decoded, *, media):
        return otlp.metrics_response(decoded, media=media)

    @_schema(operation_id="otlp_metrics_export", what="Metrics", rejected_field="rejectedDataPoints",
             description="OTLP/HTTP metrics export (ExportMetricsServiceRequest). Device gauges and "
                         "sums (hw.*, agentops.device.*, DCGM exporter) with a device id become "
                         "resource samples; gen_ai.* histograms are kept per model.")
    def post(self, request):
        return self.handle(request)
