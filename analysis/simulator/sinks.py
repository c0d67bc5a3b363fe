"""Where a simulated workload goes: into a project in-process, or to a server over HTTP.

A workload is native task/step events and OTLP requests (the inference servers' `llm_request`
spans, the device telemetry as dcgm-exporter, vLLM and the simulated accelerators' exporters
send it). Both sinks put each through the same decoder the API uses (`ingest.events.parse_event`,
`ingest.otlp.decode_traces` / `decode_metrics`, the mapping of OTLP names onto samples), so a
workload stored either way is the same data: in-process is simply the API without the
network. Over HTTP the OTLP requests go to /v1/traces and /v1/metrics as JSON; 429 and 503 are
answered with Retry-After and retried, as any well-behaved sender must.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

from ingest.events import parse_event
from ingest.models import Project
from ingest.otlp import JSON, PROTOBUF, decode_metrics, decode_traces
from ingest.records import Batch, RecordError
from ingest.services import batch_store

Progress = Callable[[int], None]
MAX_RETRIES = 8
MAX_RETRY_WAIT_S = 30.0


class SinkError(Exception):
    """The destination refused the data; the message says what it answered."""


def _size(item: list[dict] | dict) -> int:
    """Events in a native batch; spans or data points in an OTLP request."""
    if isinstance(item, list):
        return len(item)
    body = item["body"]
    if item["otlp"] == "traces":
        return sum(len(s["spans"]) for r in body["resourceSpans"] for s in r["scopeSpans"])
    return sum(len(m[k]["dataPoints"]) for r in body["resourceMetrics"] for s in r["scopeMetrics"]
               for m in s["metrics"] for k in ("gauge", "sum", "histogram") if k in m)


def _any_value(value: dict):
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    if "stringValue" in value:
        return AnyValue(string_value=value["stringValue"])
    if "intValue" in value:
        return AnyValue(int_value=int(value["intValue"]))
    if "doubleValue" in value:
        return AnyValue(double_value=float(value["doubleValue"]))
    return AnyValue(bool_value=bool(value.get("boolValue")))


def _metrics_protobuf(body: dict) -> bytes:
    """The simulator's OTLP JSON metrics request as the protobuf bytes an exporter would send:
    the same message, built directly (json_format's ParseDict takes ~0.25 ms a data point, which
    made an evaluation's telemetry take minutes). Gauges and sums of doubles, what the
    simulator writes."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    def kvs(attrs: list[dict]) -> list:
        return [KeyValue(key=a["key"], value=_any_value(a["value"])) for a in attrs]

    request = ExportMetricsServiceRequest()
    for r in body.get("resourceMetrics", ()):
        resource = request.resource_metrics.add()
        resource.resource.attributes.extend(kvs(r["resource"]["attributes"]))
        for s in r["scopeMetrics"]:
            scope = resource.scope_metrics.add()
            scope.scope.name = s.get("scope", {}).get("name", "")
            for m in s["metrics"]:
                metric = scope.metrics.add()
                metric.name, metric.unit = m["name"], m.get("unit", "")
                if "sum" in m:
                    data = metric.sum
                    data.aggregation_temporality = int(m["sum"].get("aggregationTemporality", 2))
                    data.is_monotonic = bool(m["sum"].get("isMonotonic"))
                    points = m["sum"]["dataPoints"]
                else:
                    data = metric.gauge
                    points = m["gauge"]["dataPoints"]
                cache: dict[int, list] = {}
                for p in points:
                    attrs = p.get("attributes", [])
                    built = cache.get(id(attrs))
                    if built is None:
                        built = cache[id(attrs)] = kvs(attrs)
                    point = data.data_points.add()
                    point.time_unix_nano = int(p["timeUnixNano"])
                    if "startTimeUnixNano" in p:
                        point.start_time_unix_nano = int(p["startTimeUnixNano"])
                    point.as_double = float(p["asDouble"])
                    point.attributes.extend(built)
    return request.SerializeToString()


def store_in_process(*, project: Project, batches: Iterable[list[dict] | dict], progress: Progress) -> int:
    """Parse and store each batch (a list of native events, or {"otlp": "traces" | "metrics",
    "body": OTLP JSON}); returns how many events, spans or data points were rejected."""
    rejected = 0
    for events in batches:
        if isinstance(events, dict):
            if events["otlp"] == "traces":
                decoded = decode_traces(json.dumps(events["body"], separators=(",", ":")).encode(), media=JSON)
            else:
                decoded = decode_metrics(_metrics_protobuf(events["body"]), media=PROTOBUF)
            rejected += decoded.rejected
            if len(decoded.batch):
                batch_store(project=project, batch=decoded.batch)
            progress(_size(events))
            continue
        batch = Batch()
        for event in events:
            try:
                record = parse_event(event)
            except RecordError:
                rejected += 1
                continue
            batch.add(record)
        if len(batch):
            batch_store(project=project, batch=batch)
        progress(len(events))
    return rejected


def post_http(*, url: str, key: str, batches: Iterable[list[dict]], progress: Progress,
              sleep: Callable[[float], None] = time.sleep) -> int:
    """POST each batch to `{url}/api/v1/ingest`; returns how many events the server rejected."""
    import requests

    base = url.rstrip("/")
    session = requests.Session()
    session.headers.update({"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    rejected = 0
    for events in batches:
        if isinstance(events, dict):
            endpoint = f"{base}/v1/{events['otlp']}"
            body = json.dumps(events["body"], separators=(",", ":")).encode()
        else:
            endpoint = base + "/api/v1/ingest"
            body = json.dumps({"events": events}, separators=(",", ":")).encode()
        for attempt in range(MAX_RETRIES + 1):
            try:
                response = session.post(endpoint, data=body, timeout=120)
            except requests.ConnectionError as exc:
                if attempt == MAX_RETRIES:
                    raise SinkError(f"{endpoint}: cannot connect ({exc})") from exc
                sleep(min(2.0 ** attempt, MAX_RETRY_WAIT_S))
                continue
            if response.status_code in (429, 503) and attempt < MAX_RETRIES:
                sleep(_retry_after(response.headers.get("Retry-After"), attempt))
                continue
            if response.status_code != 200:
                raise SinkError(f"{endpoint} answered {response.status_code}: {response.text[:300]}")
            reply = response.json()
            if isinstance(events, dict):
                partial = reply.get("partialSuccess") or {}
                rejected += int(partial.get("rejectedSpans") or partial.get("rejectedDataPoints") or 0)
            else:
                rejected += len(reply.get("rejected", []))
            break
        progress(_size(events))
    return rejected


def _retry_after(header: str | None, attempt: int) -> float:
    try:
        return min(max(float(header), 0.0), MAX_RETRY_WAIT_S)
    except (TypeError, ValueError):
        return min(2.0 ** attempt, MAX_RETRY_WAIT_S)
