"""A server's queue time from its own metrics alone, in the shapes the exporters send, replayed over
OTLP/HTTP with the OpenTelemetry SDK's exporters: vLLM's `vllm:request_queue_time_seconds`
histogram and Triton's `nv_inference_queue_duration_us` / `nv_inference_request_success`
counters, as an OpenTelemetry Collector's Prometheus receiver passes them on (cumulative, keyed
by the scrape's instance). No request spans, no waiting-requests gauge, no TTFT: the clients'
chat spans name only `server.address`/`server.port`. During a burst the calls wait ~2 s in
the server's queue, and so do the server's other requests."""

from __future__ import annotations

import random
import time

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from analysis.engine import batch
from analysis.engine.baselines import baselines_refresh
from analysis.models import Baseline, Finding
from ingest.models import ResourceSample, Step, Task

S = 1_000_000_000
TASKS = 80  # per server
EVERY_S = 20
SCRAPE_S = 5
BURST = range(30, 37)
SERVERS = {"vllm": ("vllm-1", 8000, "llama-3.1-70b"), "triton": ("triton-1", 8001, "llama-3.1-8b")}
BOUNDS = [0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0]


def _in_burst(t_s: float) -> bool:
    return BURST.start * EVERY_S <= t_s < BURST.stop * EVERY_S


def _send_traces(url: str, key: str, base_ns: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"{url}/v1/traces", headers={"Authorization": f"Bearer {key}"})))
    tracer = provider.get_tracer("agent")
    rng = random.Random(3)
    try:
        for flavour, (host, port, model) in SERVERS.items():
            for i in range(TASKS):
                start = base_ns + i * EVERY_S * S + (2 if flavour == "vllm" else 9) * S
                took = rng.uniform(0.75, 0.85) + (rng.uniform(1.8, 2.2) if i in BURST else 0.0)
                root = tracer.start_span(f"{flavour}-agent", start_time=start - S // 10, attributes={
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"{flavour}-agent"})
                chat = tracer.start_span(f"chat {model}", context=trace.set_span_in_context(root),
                                         kind=trace.SpanKind.CLIENT, start_time=start, attributes={
                                             "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                             "gen_ai.provider.name": "openai", "server.address": host,
                                             "server.port": port, "gen_ai.usage.input_tokens": 900,
                                             "gen_ai.usage.output_tokens": rng.randint(90, 110)})
                chat.end(end_time=start + int(took * S))
                root.end(end_time=start + int(took * S) + S // 10)
    finally:
        provider.shutdown()


def _send_metrics(url: str, key: str, base_ns: int) -> None:
    """Every SCRAPE_S: the server's cumulative queue time and requests (its other clients'
    requests too: ~25 per scrape, ~10 ms each in queue, ~2 s during the burst)."""
    exporter = OTLPMetricExporter(endpoint=f"{url}/v1/metrics", headers={"Authorization": f"Bearer {key}"})
    rng = random.Random(8)
    scope = InstrumentationScope("otelcol/prometheusreceiver")
    totals = {flavour: [0.0, 0] for flavour in SERVERS}
    series: dict[str, list] = {flavour: [] for flavour in SERVERS}
    for k in range(TASKS * EVERY_S // SCRAPE_S + 2):
        t_s = k * SCRAPE_S
        for flavour in SERVERS:
            requests = rng.randint(20, 30)
            wait = rng.uniform(1.8, 2.2) if _in_burst(t_s) else rng.uniform(0.008, 0.012)
            totals[flavour][0] += requests * wait
            totals[flavour][1] += requests
            series[flavour].append((base_ns + t_s * S, *totals[flavour]))
    host, port, model = SERVERS["vllm"]
    vllm = Metric("vllm:request_queue_time_seconds", "", "s", Histogram([
        HistogramDataPoint({"model_name": model, "engine": "0"}, base_ns, ts, count, total,
                           [count] + [0] * len(BOUNDS), BOUNDS, 0.0, 0.0)
        for ts, total, count in series["vllm"]], AggregationTemporality.CUMULATIVE))
    host, port, model = SERVERS["triton"]
    labels = {"model": model, "version": "1"}
    triton = [
        Metric("nv_inference_queue_duration_us", "", "us", Sum(
            [NumberDataPoint(labels, base_ns, ts, int(total * 1e6)) for ts, total, _ in series["triton"]],
            AggregationTemporality.CUMULATIVE, True)),
        Metric("nv_inference_request_success", "", "1", Sum(
            [NumberDataPoint(labels, base_ns, ts, count) for ts, _, count in series["triton"]],
            AggregationTemporality.CUMULATIVE, True)),
    ]
    for instance, metrics in ((f"{SERVERS['vllm'][0]}:{SERVERS['vllm'][1]}", [vllm]),
                              (f"{SERVERS['triton'][0]}:{SERVERS['triton'][1]}", triton)):
        resource = Resource.create({"service.name": instance.split("-")[0], "service.instance.id": instance})
        data = MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])
        assert exporter.export(data) == MetricExportResult.SUCCESS
    exporter.shutdown()


@pytest.fixture
def replayed(live_server, project, ingest_key):
    base_ns = (time.time_ns() // S - 3 * 3600) * S
    _send_metrics(live_server.url, ingest_key, base_ns)
    _send_traces(live_server.url, ingest_key, base_ns)
    baselines_refresh(project=project, full=True)
    batch.run_ids(list(Task.objects.filter(project=project).values_list("pk", flat=True)), force=True, top_up=False)
    return project


def _burst_index(finding) -> int:
    step = Step.objects.get(task=finding.task, step_id=finding.step_ids[0])
    first = Step.objects.filter(project=finding.project, kind="llm", device=step.device).order_by("started_at").first()
    return round((step.started_at - first.started_at).total_seconds() / EVERY_S)


def test_queue_time_counters_of_vllm_and_triton_say_which_calls_queued(replayed):
    # Read as the server's two counters, summed over its series, and a usual queue time learned.
    for flavour, (host, port, _) in SERVERS.items():
        server = f"{host}:{port}"
        sample = ResourceSample.objects.filter(project=replayed, device=server).order_by("-ts").first()
        assert sample.extra["queue_time_requests"] > TASKS * EVERY_S // SCRAPE_S * 20, flavour
        normal = Baseline.objects.get(project=replayed, kind="device", device=server).stats["metrics"]
        assert 8 <= normal["queue_time_ms"]["median"] <= 12, flavour
    found = list(Finding.objects.filter(project=replayed, kind="hardware_queueing").select_related("task"))
    by_server: dict[str, list[int]] = {}
    for f in found:
        by_server.setdefault(f.evidence["device"], []).append(_burst_index(f))
    # Every burst call of each server, and nothing else.
    assert {k: sorted(v) for k, v in by_server.items()} == {
        f"{h}:{p}": list(BURST) for h, p, _ in SERVERS.values()}
    summary = found[0].summary
    assert "requests waited 1.9" in summary or "requests waited 2" in summary, summary
    assert "in queue on average during the call vs a usual 1" in summary, summary
    assert not Finding.objects.filter(project=replayed, kind="slow_step").exists()
