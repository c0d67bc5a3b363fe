"""Hardware verdicts from telemetry in the shapes real exporters send, replayed over OTLP/HTTP with
the OpenTelemetry SDK's exporters: dcgm-exporter series keyed by UUID and Hostname, vLLM's server
gauges keyed by instance, vLLM's `llm_request` server span under the client's chat span, and
client spans that name only `server.address`/`server.port` (no hw.id). Three incidents: a vLLM
queue burst, a DCGM power brake (clock-event reasons 0x88, SM clock 570 of 1,410 MHz) and a
KV-cache saturation with preemptions; non-streamed calls (no TTFT anywhere)."""

from __future__ import annotations

import random
import time

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
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

from analysis.engine import batch, pipeline
from analysis.engine.baselines import baselines_refresh
from analysis.models import Finding
from ingest.models import Device, ResourceSample, Step, Task

S = 1_000_000_000  # ns per second
TASKS = 90
EVERY_S = 20
# (first task, last task) of each incident, and what it does.
QUEUE_BURST = range(30, 38)
POWER_BRAKE = range(50, 58)
KV_FULL = range(70, 78)
GPU = {"gpu": "0", "UUID": "GPU-5f1c9a2e-71d0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "vllm-1"}


def _incident(i: int) -> str:
    return ("queue" if i in QUEUE_BURST else "brake" if i in POWER_BRAKE else "kv" if i in KV_FULL else "")


def _calls(base_ns: int):
    """(task index, start ns, server timings in s, output tokens) of each chat call."""
    rng = random.Random(11)
    for i in range(TASKS):
        start = base_ns + i * EVERY_S * S + 2 * S
        out = rng.randint(90, 110)
        prefill, decode, queue = 0.09 * rng.uniform(0.9, 1.1), 0.007 * out * rng.uniform(0.92, 1.08), 0.01
        incident = _incident(i)
        if incident == "queue":
            queue = rng.uniform(1.5, 3.0)
        elif incident == "brake":
            decode *= 2.4
            prefill *= 2.4
        elif incident == "kv":
            queue += rng.uniform(0.2, 0.4)
            decode *= 1.9  # preempted and recomputed
        yield i, start, {"queue": queue, "prefill": prefill, "decode": decode}, out


def _send_traces(url: str, key: str, base_ns: int) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    providers = {}
    for name, attrs in (("client", {"service.name": "support-agent", "service.version": "1.4.0"}),
                        ("server", {"service.name": "vllm", "host.name": "vllm-1"})):
        provider = TracerProvider(resource=Resource.create(attrs))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers=headers)))
        providers[name] = provider
    agent, vllm = providers["client"].get_tracer("agent"), providers["server"].get_tracer("vllm")
    try:
        for _i, start, t, out in _calls(base_ns):
            e2e = t["queue"] + t["prefill"] + t["decode"]
            end = start + int((e2e + 0.004) * S)
            root = agent.start_span("support-agent", start_time=start - S // 10,
                                    attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"})
            ctx = trace.set_span_in_context(root)
            chat = agent.start_span("chat llama-3.1-70b", context=ctx, kind=trace.SpanKind.CLIENT, start_time=start,
                                    attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "llama-3.1-70b",
                                                "gen_ai.provider.name": "openai", "server.address": "vllm-1",
                                                "server.port": 8000, "gen_ai.usage.input_tokens": 1500,
                                                "gen_ai.usage.output_tokens": out})
            if _i not in POWER_BRAKE:  # those calls are judged on the GPU's metrics alone
                server = vllm.start_span("llm_request", context=trace.set_span_in_context(chat),
                                         kind=trace.SpanKind.SERVER, start_time=start + 2_000_000, attributes={
                                             "gen_ai.response.model": "llama-3.1-70b", "gen_ai.request.id": f"cmpl-{_i}",
                                             "gen_ai.usage.prompt_tokens": 1500, "gen_ai.usage.completion_tokens": out,
                                             "gen_ai.latency.time_in_queue": t["queue"],
                                             "gen_ai.latency.time_to_first_token": t["queue"] + t["prefill"],
                                             "gen_ai.latency.time_in_model_prefill": t["prefill"],
                                             "gen_ai.latency.time_in_model_decode": t["decode"],
                                             "gen_ai.latency.time_in_model_inference": t["prefill"] + t["decode"],
                                             "gen_ai.latency.e2e": e2e})
                server.end(end_time=end - 2_000_000)
            chat.end(end_time=end)
            root.end(end_time=end + S // 10)
    finally:
        for provider in providers.values():
            provider.shutdown()


def _points(series: dict[str, list[tuple[dict, int, float]]]) -> list[Metric]:
    metrics = []
    for name, points in series.items():
        data = [NumberDataPoint(attributes=a, start_time_unix_nano=0, time_unix_nano=ts, value=v) for a, ts, v in points]
        if name.endswith("_total"):
            metrics.append(Metric(name, "", "1", Sum(data, AggregationTemporality.CUMULATIVE, True)))
        else:
            metrics.append(Metric(name, "", "", Gauge(data)))
    return metrics


def _send_metrics(url: str, key: str, base_ns: int) -> None:
    """dcgm-exporter and vLLM's /metrics as an OpenTelemetry Collector's Prometheus receiver passes
    them on, every 5 s: DCGM labels on the points, vLLM's instance in service.instance.id."""
    exporter = OTLPMetricExporter(endpoint=f"{url}/v1/metrics", headers={"Authorization": f"Bearer {key}"})
    rng = random.Random(5)
    dcgm: dict[str, list] = {n: [] for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK",
                                             "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_POWER_USAGE",
                                             "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED")}
    server: dict[str, list] = {n: [] for n in ("vllm:num_requests_waiting", "vllm:num_requests_running",
                                               "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total")}
    model = {"model_name": "llama-3.1-70b", "engine": "0"}
    preemptions = 0
    for k in range(TASKS * EVERY_S // 5):
        ts = base_ns + k * 5 * S
        incident = _incident(k * 5 // EVERY_S)
        util, clock, reasons, power, temp = rng.uniform(55, 75), rng.choice((1395, 1410, 1410)), 0, rng.uniform(380, 430), rng.uniform(52, 58)
        waiting, running, kv = rng.choice((0, 0, 0, 1, 2)), rng.randint(6, 10), rng.uniform(0.3, 0.45)
        if incident == "queue":
            waiting, util, kv = rng.randint(33, 41), rng.uniform(80, 92), rng.uniform(0.55, 0.7)
        elif incident == "brake":
            clock, reasons, power = rng.randint(560, 580), 0x88, rng.uniform(180, 220)
        elif incident == "kv":
            kv, waiting, preemptions = rng.uniform(0.97, 1.0), rng.randint(2, 4), preemptions + rng.randint(1, 3)
        for name, value in (("DCGM_FI_DEV_GPU_UTIL", util), ("DCGM_FI_DEV_SM_CLOCK", clock),
                            ("DCGM_FI_DEV_MAX_SM_CLOCK", 1410), ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", reasons),
                            ("DCGM_FI_DEV_POWER_USAGE", power), ("DCGM_FI_DEV_GPU_TEMP", temp),
                            ("DCGM_FI_DEV_FB_USED", 71_000)):
            dcgm[name].append((GPU, ts, value))
        for name, value in (("vllm:num_requests_waiting", waiting), ("vllm:num_requests_running", running),
                            ("vllm:kv_cache_usage_perc", kv), ("vllm:num_preemptions_total", preemptions)):
            server[name].append((model, ts, value))
    scope = InstrumentationScope("otelcol/prometheusreceiver")
    batches = [
        (Resource.create({"service.name": "dcgm-exporter", "service.instance.id": "vllm-1:9400"}), dcgm),
        (Resource.create({"service.name": "vllm", "service.instance.id": "vllm-1:8000"}), server),
    ]
    for resource, series in batches:
        data = MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, _points(series), "")], "")])
        assert exporter.export(data) == MetricExportResult.SUCCESS
    exporter.shutdown()


@pytest.fixture(params=["one task", "batch"])
def replayed(request, live_server, project, ingest_key):
    """The replay, analysed task by task (batches of one) or as one batch: the same findings."""
    base_ns = (time.time_ns() // S - 3 * 3600) * S
    _send_metrics(live_server.url, ingest_key, base_ns)
    _send_traces(live_server.url, ingest_key, base_ns)
    baselines_refresh(project=project, full=True)
    pks = list(Task.objects.filter(project=project).values_list("pk", flat=True))
    if request.param == "batch":
        batch.run_ids(pks, force=True, top_up=False)
    else:
        for pk in pks:
            assert pipeline.run(pk, force=True) == "analysed"
    return project


def _findings(project, kind):
    return list(Finding.objects.filter(project=project, kind=kind).select_related("task"))


def _index(finding) -> int:
    step = Step.objects.get(task=finding.task, step_id=finding.step_ids[0])
    root = Step.objects.filter(task=finding.task, kind="agent").order_by("started_at").first()
    first = Step.objects.filter(project=finding.project, kind="agent").order_by("started_at").first()
    assert step.kind == "llm"
    return round((root.started_at - first.started_at).total_seconds() / EVERY_S)


def _series_read(replayed):
    gpu = Device.objects.get(project=replayed, name=GPU["UUID"])
    server = Device.objects.get(project=replayed, name="vllm-1:8000")
    assert (gpu.host, gpu.role, gpu.vendor, gpu.hardware) == ("vllm-1", "gpu", "nvidia", "NVIDIA H100 80GB HBM3")
    assert (server.host, server.role) == ("vllm-1", "server")
    brake = ResourceSample.objects.filter(project=replayed, device=GPU["UUID"], clock_reasons=0x88).first()
    assert brake.sm_clock_max_mhz == 1410 and 560 <= brake.sm_clock_mhz <= 580 and brake.extra["fb_used_mib"] == 71_000
    assert 0.3 <= brake.utilization <= 0.75  # DCGM's percent read as a fraction
    assert ResourceSample.objects.filter(project=replayed, device="vllm-1:8000", queue_depth__gte=33).exists()
    assert ResourceSample.objects.filter(project=replayed, device="vllm-1:8000", kv_cache_usage__gte=0.97).exists()


def _server_span_folded(replayed):
    chat = Step.objects.filter(project=replayed, kind="llm")
    assert chat.count() == TASKS and {s.device for s in chat} == {"vllm-1:8000"}
    server = Step.objects.filter(project=replayed, name="llm_request")
    assert server.count() == TASKS - len(POWER_BRAKE)
    assert {s.kind for s in server} == {"other"} and all(s.input_tokens is None for s in server)
    assert server.first().attributes["agentops.serving"]["queue_ms"] > 0
    # The task's tokens are the client call's, counted once.
    assert {t.input_tokens for t in Task.objects.filter(project=replayed)} == {1500}
    # The server's span is judged through the call it served: never a slow_step of its own.
    flagged = {sid for f in Finding.objects.filter(project=replayed) for sid in f.step_ids}
    assert not flagged & {s.step_id for s in server}


def _step_panel(replayed, admin_client):
    """The step panel names the server that answered and the GPUs on its host, each linked to its
    telemetry at that moment."""
    chat = Step.objects.filter(project=replayed, kind="llm").select_related("task").first()
    step = admin_client.get(f"/tasks/{chat.task.task_id}/steps/{chat.step_id}.json",
                            {"project": replayed.name}).json()
    assert step["device"] == step["server"] == "vllm-1:8000"
    assert step["served_with"] == [GPU["UUID"]]
    assert step["links"]["served_with"][0].startswith("/devices?") and f"device={GPU['UUID']}" in step["links"]["served_with"][0]


def _queue_burst(replayed):
    found = _findings(replayed, "hardware_queueing")
    assert sorted(_index(f) for f in found) == list(QUEUE_BURST)
    summary = found[0].summary
    assert "in queue" in summary and "requests waiting vs a usual" in summary and "vllm-1:8000" in summary
    assert found[0].evidence["verdict"] == "queueing"


def _power_brake(replayed):
    found = _findings(replayed, "hardware_throttling")
    assert sorted(_index(f) for f in found) == list(POWER_BRAKE)
    assert all("clock-event reasons 0x88 (HW slowdown, HW power brake)" in f.summary for f in found)
    # The clock under its max is named where the GPU was busy as usual during the call (a clock that
    # drops while the GPU idles is no slowdown): not every call of the brake, and in no set order.
    assert any("SM clock 5" in f.summary and "of a 1,410 MHz max" in f.summary for f in found)


def _kv_full(replayed):
    found = _findings(replayed, "hardware_kv_cache_pressure")
    assert sorted(_index(f) for f in found) == list(KV_FULL)
    assert "preempted during the call" in found[0].summary
    assert not _findings(replayed, "slow_step")


# One replay (≈20 s) serves every check; each helper above is one behaviour.
@pytest.mark.parametrize("replayed", ["one task"], indirect=True)
def test_dcgm_and_vllm_series_are_read_without_configuration_and_the_server_span_is_folded(replayed, admin_client):
    _series_read(replayed)
    _server_span_folded(replayed)
    _step_panel(replayed, admin_client)


def test_a_queue_burst_a_power_brake_and_a_full_kv_cache_each_get_their_verdict_and_say_what_was_seen(replayed):
    _queue_burst(replayed)
    _power_brake(replayed)
    _kv_full(replayed)
