"""The native ingest endpoint and the API's shared error handling."""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.db import InterfaceError, OperationalError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import parsers, serializers
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from ingest import limits
from ingest.auth import HasIngestScope
from ingest.events import parse_event
from ingest.http import BodyError, request_body
from ingest.records import Batch, RecordError
from ingest.services import batch_store

log = logging.getLogger("agentops.ingest")

RETRY_AFTER_SECONDS = 5
QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement cancelled by statement_timeout


def query_canceled(exc: Exception) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) == QUERY_CANCELED


def read_timeout_message() -> str:
    return (f"this read took longer than {settings.AGENTOPS_READ_TIMEOUT_SECONDS:g} s and was stopped: "
            "narrow it (a time range, a task name, a pattern with fewer `*`)")


def exception_handler(exc, context):
    """DRF's handler, plus: a database that is down answers 503 with Retry-After, and a read that
    ran past AGENTOPS_READ_TIMEOUT_SECONDS 503 saying so; never 500."""
    if isinstance(exc, OperationalError) and query_canceled(exc):
        log.warning("api.read_timeout path=%s", context["request"].path if context.get("request") else "")
        return Response({"error": read_timeout_message()}, status=503)
    if isinstance(exc, OperationalError | InterfaceError):
        log.warning("ingest.database_unavailable: %s", exc)
        return Response({"error": "database unavailable, retry later"}, status=503,
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, APIException) and isinstance(response.data, dict):
        detail = response.data.pop("detail", None)
        if detail is not None:
            response.data["error"] = str(detail)
    return response


class RawBodyParser(parsers.BaseParser):
    """Leaves the body to the view, which reads it within the limits."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return None


def decode_json(body: bytes) -> object:
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise BodyError(400, f"malformed JSON at line {exc.lineno} column {exc.colno} "
                             f"(char {exc.pos}): {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise BodyError(400, f"body: not UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise BodyError(400, "body: JSON nested too deeply") from None


def parse_native_batch(payload: object) -> tuple[Batch, list[dict]]:
    """The events of a native batch as records, and the rejected ones as {index, error}."""
    if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
        raise BodyError(400, 'body: must be an object {"events": [...]}')
    events = payload["events"]
    if len(events) > limits.MAX_EVENTS_PER_BATCH:
        raise BodyError(413, f"events: {len(events)} events is over the limit of "
                             f"{limits.MAX_EVENTS_PER_BATCH} per batch")
    batch = Batch()
    rejected = []
    for index, event in enumerate(events):
        try:
            record = parse_event(event)
        except RecordError as exc:
            rejected.append({"index": index, "error": str(exc)})
            continue
        batch.add(record)
    return batch, rejected


class IngestView(APIView):
    parser_classes = [RawBodyParser]
    permission_classes = [HasIngestScope]

    @extend_schema(
        operation_id="ingest_batch",
        request={"application/json": OpenApiTypes.OBJECT},
        responses={200: inline_serializer("IngestResult", {
            "accepted": serializers.IntegerField(),
            "rejected": serializers.ListField(child=inline_serializer("IngestRejection", {
                "index": serializers.IntegerField(), "error": serializers.CharField()})),
        }), 400: OpenApiTypes.OBJECT, 401: OpenApiTypes.OBJECT, 408: OpenApiTypes.OBJECT,
            413: OpenApiTypes.OBJECT, 503: OpenApiTypes.OBJECT},
        examples=[OpenApiExample("one step", value={"events": [{
            "type": "step", "step_id": "s1", "task_id": "t1", "kind": "tool", "name": "search",
            "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:01Z"}]})],
        description="Native batch of task, step and resource events. One bad event never loses "
                    "the good ones; the same ids sent again update, never duplicate.",
    )
    def post(self, request):
        try:
            with request_body(request) as body:
                batch, rejected = parse_native_batch(decode_json(body))
                del body
                if len(batch):
                    batch_store(project=request.auth.project, batch=batch)
        except BodyError as exc:
            return Response({"error": exc.message}, status=exc.status, headers=exc.headers)
        log.info("ingest.received project=%s accepted=%d rejected=%d",
                 request.auth.project_id, len(batch), len(rejected))
        return Response({"accepted": len(batch), "rejected": rejected})

