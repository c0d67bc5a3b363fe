"""Numbers at the border (docs/otlp.md, "Numeric ranges"; docs/reliability.md, "One tenant's
data cannot stall the others"): every numeric field of a data point or a native event is checked
against its column's type and meaning. A point out of range is rejected alone and named in
partialSuccess; the points beside it are stored; nothing answers 500, and what was stored rolls
up."""

from __future__ import annotations

import json
import math

import pytest
from django.test import Client
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from analysis import rollups
from ingest import conventions, limits, otlp
from ingest.models import LatencyHistogram, ResourceSample
from tests.ingest.fixtures.otlp import MS, T0, key_values

GPU = {"hw.id": "gpu-0", "hw.type": "gpu", "hw.state": "ok"}
SERVER = {"server.address": "vllm-0:8000", "gen_ai.request.model": "llama"}
GOOD_DEVICE = "gpu-good"

# The extremes every field is tried with: beyond every bound a column has, at its edges, and
# the values a float or an int64 cannot hold.
EXTREMES = [1e30, -1e30, float(2**63), float(2**64), 2**63 - 1, -(2**63), -1, -1e-9, 0, 0.5,
            float("nan"), float("inf"), float("-inf"), 1.7976931348623157e308, 5e-324, 1e12, 1e12 + 1]
GAUGES = sorted(conventions.DEVICE_METRICS) + sorted(conventions.SERVER_METRICS) + ["agentops.device.custom"]
HISTOGRAMS = sorted(conventions.SERVER_HISTOGRAMS) + ["gen_ai.client.operation.duration"]
# Counts of a histogram: proto3 uint64, so the protobuf path can carry up to 2^64-1.
COUNTS = [0, 1, 2**63 - 1, 2**63, 2**64 - 1]


def _request() -> tuple[ExportMetricsServiceRequest, object]:
    request = ExportMetricsServiceRequest()
    scope = request.resource_metrics.add().scope_metrics.add()
    return request, scope


def _good_gauge(scope, *, ts_ms: float = 0) -> None:
    point = scope.metrics.add(name="hw.gpu.utilization").gauge.data_points.add(time_unix_nano=T0 + int(ts_ms * MS))
    point.attributes.extend(key_values({"hw.id": GOOD_DEVICE}))
    point.as_double = 0.5


def _gauge(scope, name: str, value, *, ts_ms: float = 0) -> None:
    attributes = SERVER if conventions.server_metric(name) else GPU
    point = scope.metrics.add(name=name).gauge.data_points.add(time_unix_nano=T0 + int(ts_ms * MS))
    point.attributes.extend(key_values(attributes))
    if isinstance(value, int):
        point.as_int = value
    else:
        point.as_double = value


def _histogram(scope, name: str, *, count: int = 3, total: float = 0.3, bucket: int | None = None,
               bound: float = 1.0, ts_ms: float = 0) -> None:
    attributes = SERVER if conventions.server_histogram(name) else {"gen_ai.request.model": "llama"}
    point = scope.metrics.add(name=name).histogram.data_points.add(time_unix_nano=T0 + int(ts_ms * MS))
    point.attributes.extend(key_values(attributes))
    point.count = count
    point.sum = total
    point.explicit_bounds.append(bound)
    point.bucket_counts.extend([count if bucket is None else bucket, 0])


@pytest.fixture
def client():
    return Client()


def _post(client, key: str, body: bytes, media: str = otlp.PROTOBUF):
    response = client.post("/v1/metrics", data=body, content_type=media, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content  # never a 500, never the whole request
    reply = response.json() if media == otlp.JSON else json_format.MessageToDict(
        ExportMetricsServiceResponse.FromString(response.content))
    return reply.get("partialSuccess", {})


def test_a_clock_reasons_reading_of_1e30_is_rejected_alone_and_the_gauge_beside_it_is_stored(
        client, project, ingest_key):
    request, scope = _request()
    _good_gauge(scope)
    _gauge(scope, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 1e30)
    partial = _post(client, ingest_key, request.SerializeToString())
    assert int(partial["rejectedDataPoints"]) == 1
    assert "metrics[1].dataPoints[0]: DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (clock_reasons)" in partial["errorMessage"]
    assert ResourceSample.objects.get(project=project, device=GOOD_DEVICE).utilization == 0.5
    assert not ResourceSample.objects.filter(project=project, device="gpu-0").exists()
    rollups.rollups_refresh()  # what was stored rolls up


def test_a_histogram_count_of_2_to_the_64_is_rejected_alone(client, project, ingest_key):
    """OTLP/JSON carries the count as a decimal string: 2^64 does not fit proto3's uint64, and only
    its data point is refused, not the body."""
    point = {"timeUnixNano": str(T0), "count": str(2**64), "sum": 1.0, "bucketCounts": [str(2**64), "0"],
             "explicitBounds": [1.0], "attributes": [{"key": "gen_ai.request.model", "value": {"stringValue": "a"}}]}
    good = dict(point, count="3", bucketCounts=["3", "0"],
                attributes=[{"key": "gen_ai.request.model", "value": {"stringValue": "b"}}])
    gauge = {"timeUnixNano": str(T0), "asDouble": 0.5,
             "attributes": [{"key": "hw.id", "value": {"stringValue": GOOD_DEVICE}}]}
    body = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "gen_ai.client.operation.duration", "histogram": {"dataPoints": [point, good]}},
        {"name": "hw.gpu.utilization", "gauge": {"dataPoints": [gauge]}}]}]}]}
    partial = _post(client, ingest_key, json.dumps(body).encode(), otlp.JSON)
    assert int(partial["rejectedDataPoints"]) == 1
    assert partial["errorMessage"].startswith("resourceMetrics[0].scopeMetrics[0].metrics[0].dataPoints[0]: "
                                              "gen_ai.client.operation.duration: Failed to parse count field")
    assert list(LatencyHistogram.objects.filter(project=project).values_list("model", "count")) == [("b", 3)]
    assert ResourceSample.objects.filter(project=project, device=GOOD_DEVICE).exists()


@pytest.mark.parametrize("count", [2**63, 2**64 - 1])
def test_a_histogram_count_beyond_int64_in_protobuf_is_rejected_alone(client, project, ingest_key, count):
    request, scope = _request()
    _histogram(scope, "gen_ai.client.operation.duration", count=count)
    _good_gauge(scope)
    partial = _post(client, ingest_key, request.SerializeToString())
    assert int(partial["rejectedDataPoints"]) == 1
    assert "metrics[0].dataPoints[0]: gen_ai.client.operation.duration (count)" in partial["errorMessage"]
    assert not LatencyHistogram.objects.filter(project=project).exists()
    assert ResourceSample.objects.filter(project=project, device=GOOD_DEVICE).exists()


def test_two_series_that_add_up_beyond_int64_reject_the_second(client, project, ingest_key):
    request, scope = _request()
    for _ in range(2):  # differ only in an attribute agentops does not key on: added up
        _histogram(scope, "gen_ai.client.operation.duration", count=2**62 + 1)
    partial = _post(client, ingest_key, request.SerializeToString())
    assert int(partial["rejectedDataPoints"]) == 1
    assert "metrics[1].dataPoints[0]" in partial["errorMessage"]
    assert LatencyHistogram.objects.get(project=project).count == 2**62 + 1


def _stored_reading_in_range(project, name: str) -> None:
    column = (conventions.server_metric(name) or conventions.device_metric(name))[0]
    for sample in ResourceSample.objects.filter(project=project).exclude(device=GOOD_DEVICE):
        value = getattr(sample, column, None) if column in ResourceSample.METRICS else sample.extra.get(column)
        if value is None:
            continue
        if column == "clock_reasons":
            assert value == int(value) and 0 <= value < 2**limits.CLOCK_REASONS_BITS, (name, value)
        else:
            assert math.isfinite(value) and abs(value) <= limits.MAX_READING, (name, value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(GAUGES),
       value=st.sampled_from(EXTREMES) | st.floats() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
       media=st.sampled_from([otlp.PROTOBUF, otlp.JSON]))
def test_every_gauge_field_with_the_extremes(client, project, ingest_key, name, value, media):
    ResourceSample.objects.filter(project=project).delete()
    request, scope = _request()
    _gauge(scope, name, value)
    _good_gauge(scope)
    body = json.dumps(json_format.MessageToDict(request)).encode() if media == otlp.JSON else request.SerializeToString()
    partial = _post(client, ingest_key, body, media)
    assert ResourceSample.objects.filter(project=project, device=GOOD_DEVICE).exists()
    rejected = int(partial.get("rejectedDataPoints", 0))
    assert rejected <= 1
    if rejected:
        assert partial["errorMessage"].startswith(f"resourceMetrics[0].scopeMetrics[0].metrics[0].dataPoints[0]: {name}")
    _stored_reading_in_range(project, name)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(HISTOGRAMS), count=st.sampled_from(COUNTS + [2**64, 2**70]),
       bucket=st.sampled_from(COUNTS + [2**64]), total=st.sampled_from(EXTREMES), bound=st.sampled_from(EXTREMES),
       media=st.sampled_from([otlp.PROTOBUF, otlp.JSON]))
def test_every_histogram_field_with_the_extremes(client, project, ingest_key, name, count, bucket, total, bound,
                                                 media):
    """Counts past uint64 exist only in OTLP/JSON, where they are decimal strings."""
    LatencyHistogram.objects.filter(project=project).delete()
    request, scope = _request()
    _histogram(scope, name, count=0, bucket=0, total=float(total), bound=float(bound))
    _good_gauge(scope)
    if media == otlp.PROTOBUF and max(count, bucket) < 2**64:
        point = request.resource_metrics[0].scope_metrics[0].metrics[0].histogram.data_points[0]
        point.count, point.bucket_counts[0] = count, bucket
        body = request.SerializeToString()
    else:
        media, payload = otlp.JSON, json_format.MessageToDict(request)
        point = payload["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["histogram"]["dataPoints"][0]
        point.update(count=str(count), bucketCounts=[str(bucket), "0"])
        body = json.dumps(payload).encode()
    partial = _post(client, ingest_key, body, media)
    assert ResourceSample.objects.filter(project=project, device=GOOD_DEVICE).exists()
    if int(partial.get("rejectedDataPoints", 0)):
        assert partial["errorMessage"].startswith(f"resourceMetrics[0].scopeMetrics[0].metrics[0].dataPoints[0]: {name}")
    for histogram in LatencyHistogram.objects.filter(project=project):
        assert 0 <= histogram.count <= limits.INT64_MAX


def test_every_field_at_every_extreme_in_one_request_then_the_rollups_run(client, project, ingest_key):
    """All the extremes of all the fields at once, each at its own instant: whatever was stored
    rolls up (the refresh casts clock reasons to bigint and sums every reading)."""
    request, scope = _request()
    at = 0
    for name in GAUGES:
        for value in EXTREMES:
            _gauge(scope, name, value, ts_ms=at)
            at += 1000
    for name in HISTOGRAMS:
        for count in COUNTS:
            _histogram(scope, name, count=count, ts_ms=at)
            at += 1000
    _good_gauge(scope)
    partial = _post(client, ingest_key, request.SerializeToString())
    assert int(partial["rejectedDataPoints"]) > 0
    assert ResourceSample.objects.filter(project=project, device=GOOD_DEVICE).exists()
    for name in GAUGES:
        _stored_reading_in_range(project, name)
    rollups.rollups_refresh()
    rollups.rollups_rebuild(workers=1)


def test_a_native_sample_out_of_range_is_rejected_alone_naming_the_field(client, project, ingest_key):
    events = [{"type": "resource", "device": "gpu-1", "ts": "2026-11-01T10:00:00Z",
               "metrics": {"clock_reasons": 1e30}},
              {"type": "resource", "device": "gpu-1", "ts": "2026-11-01T10:00:01Z",
               "metrics": {"power_w": -5}},
              {"type": "resource", "device": "gpu-2", "ts": "2026-11-01T10:00:00Z",
               "metrics": {"clock_reasons": 2**64 - 1, "power_w": 300}}]
    response = client.post("/api/v1/ingest", data=json.dumps({"events": events}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["accepted"] == 1
    assert [(r["index"], r["error"].split(":")[0]) for r in body["rejected"]] == [
        (0, "metrics.clock_reasons"), (1, "metrics.power_w")]
    sample = ResourceSample.objects.get(project=project, device="gpu-2")
    # A mask at or above 2^53 keeps its low 53 bits: every DCGM reason bit, exactly.
    assert sample.clock_reasons == 2**limits.CLOCK_REASONS_BITS - 1 and sample.power_w == 300
