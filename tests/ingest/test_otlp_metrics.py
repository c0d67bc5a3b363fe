"""POST /v1/metrics: device gauges and sums (hw.*, agentops.device.*, DCGM) become resource
samples, gen_ai.* histograms are kept per model, everything else is ignored."""

from __future__ import annotations

import json

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from ingest.models import Device, LatencyHistogram, ResourceSample
from tests.ingest.fixtures.otlp import MS, T0, gauge_request

PB = "application/x-protobuf"


@pytest.fixture
def send(live_server):
    def _send(key, body: bytes, *, content_type=PB):
        return requests.post(f"{live_server.url}/v1/metrics", data=body, timeout=30,
                             headers={"Content-Type": content_type, "Authorization": f"Bearer {key}"})
    return _send


def test_sdk_metric_exporter_gauges_and_genai_histograms(live_server, project, ingest_key):
    exporter = OTLPMetricExporter(endpoint=f"{live_server.url}/v1/metrics",
                                  headers={"Authorization": f"Bearer {ingest_key}"})
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "node-exporter"}))
    try:
        meter = provider.get_meter("hw")
        gpu = {"hw.id": "gpu-0", "hw.type": "gpu", "hw.vendor": "NVIDIA", "hw.model": "H100"}
        meter.create_observable_gauge("hw.gpu.utilization", [lambda _: [Observation(0.82, gpu)]], unit="1")
        meter.create_observable_gauge("hw.gpu.power", [lambda _: [Observation(612.5, gpu)]], unit="W")
        meter.create_observable_gauge("hw.temperature", [lambda _: [Observation(71, gpu)]], unit="Cel")
        meter.create_observable_up_down_counter("agentops.device.queue_depth",
                                                [lambda _: [Observation(9, gpu)]])
        meter.create_observable_gauge("process.cpu.utilization", [lambda _: [Observation(0.5, {})]])
        ttft = meter.create_histogram("gen_ai.client.operation.time_to_first_chunk", unit="s",
                                      explicit_bucket_boundaries_advisory=[0.1, 0.25, 0.5, 1.0])
        for seconds, model, operation in [(0.2, "llama-3-70b", "chat"), (0.3, "llama-3-70b", "chat"),
                                          (0.7, "llama-3-70b", "text_completion"), (0.05, "gpt-4o", "chat")]:
            ttft.record(seconds, {"gen_ai.request.model": model, "gen_ai.operation.name": operation})
        meter.create_histogram("http.server.request.duration").record(0.1)
    finally:
        provider.shutdown()  # one final collection and export

    [sample] = ResourceSample.objects.filter(project=project)
    assert sample.device == "gpu-0"
    assert (sample.utilization, sample.power_w, sample.temperature_c, sample.queue_depth) == (0.82, 612.5, 71.0, 9.0)
    device = Device.objects.get(project=project, name="gpu-0")
    assert (device.vendor, device.hardware) == ("nvidia", "H100")
    histograms = {h.model: h for h in LatencyHistogram.objects.filter(project=project)}
    assert set(histograms) == {"llama-3-70b", "gpt-4o"}
    llama = histograms["llama-3-70b"]
    # The chat and text_completion series of one model add up to one histogram.
    assert llama.metric == "gen_ai.client.operation.time_to_first_chunk"
    assert (llama.count, llama.bounds, llama.counts) == (3, [0.1, 0.25, 0.5, 1.0], [0, 1, 1, 1, 0])
    assert llama.sum == pytest.approx(1.2)


def test_dcgm_exporter_names_and_labels(send, project, ingest_key):
    labels = {"gpu": "0", "UUID": "GPU-8c1a7f3e", "Hostname": "node-a", "modelName": "NVIDIA H100 80GB HBM3"}
    points = [{"timeUnixNano": str(T0), "asInt": "87", "attributes": [
        {"key": k, "value": {"stringValue": v}} for k, v in labels.items()]}]
    body = {"resourceMetrics": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "dcgm-exporter"}}]}, "scopeMetrics": [{"metrics": [
            {"name": "DCGM_FI_DEV_GPU_UTIL", "unit": "%", "gauge": {"dataPoints": points}},
            {"name": "DCGM_FI_DEV_POWER_USAGE", "gauge": {"dataPoints": [{**points[0], "asInt": None,
                                                                           "asDouble": 301.25}]}},
            {"name": "DCGM_FI_DEV_GPU_TEMP", "gauge": {"dataPoints": [{**points[0], "asInt": 64}]}},
            {"name": "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge": {"dataPoints": [{**points[0], "asInt": "40"}]}},
        ]}]}]}
    r = send(ingest_key, json.dumps(body).encode(), content_type="application/json")
    assert r.status_code == 200, r.text
    assert r.json() == {}
    sample = ResourceSample.objects.get(project=project)
    assert sample.device == "GPU-8c1a7f3e"
    # DCGM reports utilisation in percent; agentops stores fractions.
    assert (sample.utilization, sample.power_w, sample.temperature_c, sample.mem_bw_util) == (
        0.87, 301.25, 64.0, 0.40)
    device = Device.objects.get(project=project)
    assert (device.vendor, device.hardware) == ("nvidia", "NVIDIA H100 80GB HBM3")


def test_dcgm_without_uuid_names_the_device_by_host_and_index(send, project, ingest_key):
    request = gauge_request([("DCGM_FI_DEV_GPU_TEMP", {"gpu": "3", "Hostname": "node-b"}, 55)])
    assert send(ingest_key, request.SerializeToString()).status_code == 200
    assert ResourceSample.objects.get(project=project).device == "node-b-gpu3"


def test_resource_hw_id_and_agentops_device_metrics(send, project, ingest_key):
    request = gauge_request([("agentops.device.tokens_per_s", {}, 1850.0),
                             ("agentops.device.throttled", {}, 1),
                             ("agentops.device.kv_cache_hit_rate", {}, 0.64),
                             ("agentops.device.sram_resident_fraction", {}, 0.9)],
                            resource={"hw.id": "corsair-01", "hw.vendor": "d-Matrix", "hw.model": "Corsair"},
                            ts_ms=250)
    assert send(ingest_key, request.SerializeToString()).status_code == 200
    sample = ResourceSample.objects.get(project=project)
    assert (sample.device, sample.tokens_per_s, sample.throttled, sample.kv_cache_hit_rate) == (
        "corsair-01", 1850.0, 1.0, 0.64)
    assert sample.extra == {"sram_resident_fraction": 0.9}
    assert sample.ts.timestamp() == pytest.approx((T0 + 250 * MS) / 1e9)
    assert Device.objects.get(project=project).vendor == "dmatrix"


def test_device_points_without_device_or_time_are_rejected_and_the_rest_kept(send, project, ingest_key):
    request = gauge_request([("hw.gpu.utilization", {}, 0.5),
                             ("hw.gpu.utilization", {"hw.id": "gpu-1"}, 0.6)])
    bad_time = request.resource_metrics[0].scope_metrics[0].metrics.add(name="hw.power")
    bad_time.gauge.data_points.add(time_unix_nano=0, as_double=300.0).attributes.add(key="hw.id").value.string_value = "gpu-1"
    r = send(ingest_key, request.SerializeToString())
    assert r.status_code == 200
    partial = ExportMetricsServiceResponse.FromString(r.content).partial_success
    assert partial.rejected_data_points == 2
    assert "metrics[0].dataPoints[0]: hw.gpu.utilization: no hw.id" in partial.error_message
    assert "metrics[2].dataPoints[0]: timeUnixNano" in partial.error_message
    assert list(ResourceSample.objects.filter(project=project).values_list("device", "utilization")) == [("gpu-1", 0.6)]


def test_undecodable_metrics_are_400(send, ingest_key):
    r = send(ingest_key, b"\x0a\xff\xff\xff\xff")
    assert r.status_code == 400 and b"ExportMetricsServiceRequest" in r.content
    r = send(ingest_key, b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"gauge": 5}]}]}]}',
             content_type="application/json")
    assert r.status_code == 400 and "gauge" in r.json()["message"]


def test_metrics_of_one_project_never_land_in_another(send, project, other_project, ingest_key, other_keys):
    send(other_keys["ingest"], gauge_request([("hw.gpu.utilization", {"hw.id": "their-gpu"}, 0.9)]).SerializeToString())
    send(ingest_key, gauge_request([("hw.gpu.utilization", {"hw.id": "my-gpu"}, 0.1)]).SerializeToString())
    assert list(ResourceSample.objects.filter(project=project).values_list("device", flat=True)) == ["my-gpu"]
    assert list(Device.objects.filter(project=project).values_list("name", flat=True)) == ["my-gpu"]
    assert list(ResourceSample.objects.filter(project=other_project).values_list("device", flat=True)) == ["their-gpu"]


def test_a_host_mapped_by_hand_joins_a_server_to_its_gpus_and_the_exporters_keep_it(send, project, ingest_key,
                                                                                    admin_client):
    """The clients reach vLLM through a load balancer (server key lb-7:8000) while dcgm-exporter
    says Hostname gpu-box-3: nothing joins them until an admin maps the host, and later scrapes
    keep the mapping; emptied, the exporters' host comes back."""
    from analysis.engine.serving import related_devices

    def scrape(ts_ms: int, resource: dict | None = None):
        server = gauge_request([("vllm:num_requests_waiting", {}, 3)], ts_ms=ts_ms,
                               resource={"service.instance.id": "lb-7:8000", **(resource or {})})
        gpu = gauge_request([("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": "GPU-1", "Hostname": "gpu-box-3"}, 70)],
                            ts_ms=ts_ms)
        for request in (server, gpu):
            assert send(ingest_key, request.SerializeToString()).status_code == 200

    scrape(0)
    assert related_devices(project.pk, {"lb-7:8000"}) == {}
    server = Device.objects.get(project=project, name="lb-7:8000")
    page = admin_client.get(f"/admin/ingest/device/{server.pk}/change/")
    assert page.status_code == 200 and b"load balancer" in page.content
    assert admin_client.post(f"/admin/ingest/device/{server.pk}/change/", {"host": "GPU-Box-3.internal"}).status_code == 302
    server.refresh_from_db()
    assert (server.host, server.host_by_hand) == ("gpu-box-3", True)
    scrape(5_000, resource={"hw.vendor": "vLLM project"})  # new facts of the server: its row is written again
    server.refresh_from_db()
    assert (server.host, server.vendor) == ("gpu-box-3", "vllmproject")
    assert related_devices(project.pk, {"lb-7:8000"}) == {"lb-7:8000": ("GPU-1",)}

    assert admin_client.post(f"/admin/ingest/device/{server.pk}/change/", {"host": ""}).status_code == 302
    scrape(10_000, resource={"hw.model": "vllm 0.11"})
    server.refresh_from_db()
    assert (server.host, server.host_by_hand) == ("lb-7", False)


def test_otel_hardware_gpu_status_memory_and_per_task_utilisation(send, project, ingest_key):
    gpu = {"hw.id": "gpu-0", "hw.type": "gpu"}
    request = gauge_request([
        ("hw.gpu.utilization", {**gpu, "hw.gpu.task": "general"}, 0.91),
        ("hw.gpu.utilization", {**gpu, "hw.gpu.task": "decoder"}, 0.05),
        ("hw.gpu.memory.usage", gpu, 68 * 1024 ** 3),
        ("hw.gpu.memory.limit", gpu, 80 * 1024 ** 3),
        ("hw.status", {**gpu, "hw.state": "ok"}, 0),
        ("hw.status", {**gpu, "hw.state": "degraded"}, 1),
        ("hw.status", {**gpu, "hw.state": "failed"}, 0),
        # A fan's status is no GPU's.
        ("hw.status", {"hw.id": "fan-1", "hw.type": "fan", "hw.state": "failed"}, 1),
    ], resource={"host.name": "node-c"})
    assert send(ingest_key, request.SerializeToString()).status_code == 200
    [sample] = ResourceSample.objects.filter(project=project)
    assert sample.device == "gpu-0" and sample.utilization == 0.91  # the busiest task, not the last sent
    assert sample.extra == {"fb_used_mib": 68 * 1024, "fb_total_mib": 80 * 1024, "hw_status": 1.0}
    assert not Device.objects.filter(project=project, name="fan-1").exists()


def test_a_server_the_client_names_by_its_full_host_name_finds_the_series_scraped_by_its_short_one(send, project,
                                                                                                  ingest_key):
    """The client dials vllm-a.prod.internal:8000 (its spans' server.address), Prometheus scrapes the
    target vllm-a:8000: the same host and port, so the call reads that server's series and its GPUs',
    never another port's on the host."""
    from analysis.engine.serving import related_devices

    for port, waiting in ((8000, 41), (8001, 0)):
        request = gauge_request([("vllm:num_requests_waiting", {}, waiting)], resource={"service.instance.id": f"vllm-a:{port}"})
        assert send(ingest_key, request.SerializeToString()).status_code == 200
    gpu = gauge_request([("DCGM_FI_DEV_SM_CLOCK", {"gpu": "0", "UUID": "GPU-a0", "Hostname": "vllm-a"}, 900)])
    assert send(ingest_key, gpu.SerializeToString()).status_code == 200
    assert related_devices(project.pk, {"vllm-a.prod.internal:8000"}) == {
        "vllm-a.prod.internal:8000": ("vllm-a:8000", "GPU-a0")}
    assert related_devices(project.pk, {"vllm-a:8000"}) == {"vllm-a:8000": ("GPU-a0",)}
    # Once a call's span has named it, the client's spelling is a server of its own on that host
    # (no series of its own): it still reads the scraped one.
    from django.utils import timezone

    now = timezone.now()
    Device.objects.create(project=project, name="vllm-a.prod.internal:8000", host="vllm-a", role="server",
                          first_seen=now, last_seen=now)
    assert related_devices(project.pk, {"vllm-a.prod.internal:8000"}) == {
        "vllm-a.prod.internal:8000": ("vllm-a:8000", "GPU-a0")}
