"""Hardware verdicts that reach the server and the right GPUs (issue #40, section 3), each case
replayed over OTLP/HTTP with the OpenTelemetry SDK's exporters in the shapes real deployments send:
vLLM's gauges as a Collector's Prometheus receiver passes them on (`server.address`, `server.port`
a string, `service.instance.id` host:port, k8s resource attributes), dcgm-exporter's series (UUID,
`gpu`, `Hostname`, its pod labels in Kubernetes), and clients' chat spans that name their server
(`server.port` an int) and their GPU (`hw.id`). No call is streamed: there is no TTFT anywhere."""

from __future__ import annotations

import random
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from analysis.engine import batch
from analysis.engine.baselines import baselines_refresh
from analysis.models import Finding
from ingest.models import Step, Task

S = 1_000_000_000
TASKS = 60  # per client
EVERY_S = 20
SCRAPE_S = 5
INCIDENT = range(30, 37)
SCOPE = InstrumentationScope("otelcol/prometheusreceiver")
MODEL = "llama-3.1-70b"


def _in_incident(t_s: float) -> bool:
    return INCIDENT.start * EVERY_S <= t_s < INCIDENT.stop * EVERY_S


def _exporters(url, key):
    """The metrics exporter, and a maker of span exporters (one per provider: a resource each)."""
    headers = {"Authorization": f"Bearer {key}"}
    return (OTLPMetricExporter(endpoint=f"{url}/v1/metrics", headers=headers, timeout=120),
            lambda: OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers=headers, timeout=120))


def _send_metrics(exporter, batches) -> None:
    """`batches`: (resource attributes, {metric name: [(point attributes, t_s, value)]})."""
    def metrics(series, base_ns):
        return [Metric(name, "", "", Gauge([NumberDataPoint(a, 0, base_ns + int(t * S), v) for a, t, v in points]))
                for name, points in series.items()]
    for resource, series, base_ns in batches:
        data = MetricsData([ResourceMetrics(Resource.create(resource), [ScopeMetrics(SCOPE, metrics(series, base_ns), "")], "")])
        assert exporter.export(data) == MetricExportResult.SUCCESS


def _vllm(rng, flooded) -> dict[str, list]:
    """vLLM's gauges every SCRAPE_S: 0-1 requests waiting, 10-50 during a flood."""
    out: dict[str, list] = {"vllm:num_requests_waiting": [], "vllm:num_requests_running": [],
                            "vllm:kv_cache_usage_perc": []}
    model = {"model_name": MODEL, "engine": "0"}
    for k in range(TASKS * EVERY_S // SCRAPE_S + 2):
        t = k * SCRAPE_S
        flood = flooded and _in_incident(t)
        out["vllm:num_requests_waiting"].append((model, t, rng.randint(10, 50) if flood else rng.choice((0, 0, 0, 1))))
        out["vllm:num_requests_running"].append((model, t, rng.randint(28, 32) if flood else rng.randint(6, 10)))
        out["vllm:kv_cache_usage_perc"].append((model, t, rng.uniform(0.3, 0.45)))
    return out


def _dcgm(rng, gpus: dict[str, dict], throttled: set[str], *, stock: bool = False) -> dict[str, list]:
    """dcgm-exporter's series every SCRAPE_S for each GPU (labels as given). A throttled GPU during
    the incident: SM clock ~690 of 1,410 MHz, power down, utilisation high. `stock`: the default
    counters, no max clock and no clock-event reasons."""
    names = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"]
    if not stock:
        names += ["DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    out: dict[str, list] = {n: [] for n in names}
    for k in range(TASKS * EVERY_S // SCRAPE_S + 2):
        t = k * SCRAPE_S
        for gpu, labels in gpus.items():
            hot = gpu in throttled and _in_incident(t)
            values = {"DCGM_FI_DEV_GPU_UTIL": rng.uniform(88, 97) if hot else rng.uniform(60, 75),
                      "DCGM_FI_DEV_SM_CLOCK": rng.randint(675, 705) if hot else rng.choice((1395, 1410, 1410)),
                      "DCGM_FI_DEV_POWER_USAGE": rng.uniform(190, 220) if hot else rng.uniform(380, 430),
                      "DCGM_FI_DEV_GPU_TEMP": rng.uniform(52, 58),
                      "DCGM_FI_DEV_MAX_SM_CLOCK": 1410, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x40 if hot else 0}
            for name in names:
                out[name].append((labels, t, values[name]))
    return out


def _gpu(host: str, index: int, **labels) -> dict:
    return {"gpu": str(index), "UUID": f"GPU-{host}-{index}", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host,
            **labels}


def _send_calls(exporter, base_ns: int, calls) -> None:
    """`calls`: (agent, chat span attributes, slowed(i) → extra seconds, server span or None) per client;
    TASKS calls each, 0.75-0.85 s, non-streamed."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    provider.add_span_processor(BatchSpanProcessor(exporter()))
    servers: dict[str, TracerProvider] = {}
    tracer = provider.get_tracer("agent")
    rng = random.Random(3)
    try:
        for offset, (agent, attrs, slowed, answering) in enumerate(calls):
            for i in range(TASKS):
                server = answering
                start = base_ns + i * EVERY_S * S + (2 + 3 * offset) * S
                took = rng.uniform(0.75, 0.85) + slowed(i)
                end = start + int(took * S)
                root = tracer.start_span(agent, start_time=start - S // 10, attributes={
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
                chat = tracer.start_span(f"chat {MODEL}", context=trace.set_span_in_context(root),
                                         kind=trace.SpanKind.CLIENT, start_time=start, attributes={
                                             "gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL,
                                             "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 900,
                                             "gen_ai.usage.output_tokens": 100, **attrs})
                answered = server(i) if callable(server) else server
                if answered is not None:
                    server = answered
                    if server["service.instance.id"] not in servers:
                        sp = TracerProvider(resource=Resource.create(server))
                        sp.add_span_processor(BatchSpanProcessor(exporter()))
                        servers[server["service.instance.id"]] = sp
                    span = servers[server["service.instance.id"]].get_tracer("vllm").start_span(
                        "llm_request", context=trace.set_span_in_context(chat), kind=trace.SpanKind.SERVER,
                        start_time=start + 2_000_000, attributes={
                            "gen_ai.response.model": MODEL, "gen_ai.latency.time_in_queue": 0.01,
                            "gen_ai.latency.e2e": took - 0.004})
                    span.end(end_time=end - 2_000_000)
                chat.end(end_time=end)
                root.end(end_time=end + S // 10)
    finally:
        provider.shutdown()
        for sp in servers.values():
            sp.shutdown()


def _analyse(project) -> None:
    baselines_refresh(project=project, full=True)
    batch.run_ids(list(Task.objects.filter(project=project).values_list("pk", flat=True)), force=True, top_up=False)


def _index(finding) -> int:
    step = Step.objects.get(task=finding.task, step_id=finding.step_ids[0])
    first = Step.objects.filter(project=finding.project, kind="llm", name=step.name,
                                attributes__contains={"server.address": step.attributes.get("server.address")}
                                ).order_by("started_at").first()
    return round((step.started_at - first.started_at).total_seconds() / EVERY_S)


def _found(project, kind, *, address=None):
    found = Finding.objects.filter(project=project, kind=kind).select_related("task")
    if address is not None:
        found = [f for f in found if Step.objects.get(task=f.task, step_id=f.step_ids[0]).attributes.get(
            "server.address") == address]
    return list(found)


def _base_ns() -> int:
    return (time.time_ns() // S - 3 * 3600) * S


def _flood(i: int) -> float:
    return 2.0 if i in INCIDENT else 0.0


def test_a_non_streamed_call_naming_its_gpu_during_a_waiting_requests_flood_is_queueing_on_its_server(
        live_server, project, ingest_key):
    """The chat span names its GPU (hw.id) and its server (port an int); the server's series carry
    server.port as a string. The GPU is nominal; the server's queue is not."""
    metrics, spans = _exporters(live_server.url, ingest_key)
    base_ns, rng = _base_ns(), random.Random(5)
    gpu = _gpu("gpu-node-7", 0)
    _send_metrics(metrics, [
        ({"service.name": "vllm", "server.address": "vllm-a", "server.port": "8000",
          "service.instance.id": "vllm-a:8000"}, _vllm(rng, flooded=True), base_ns),
        ({"service.name": "dcgm-exporter", "service.instance.id": "gpu-node-7:9400"},
         _dcgm(rng, {gpu["UUID"]: gpu}, set()), base_ns)])
    _send_calls(spans, base_ns, [("support", {"server.address": "vllm-a", "server.port": 8000, "hw.id": gpu["UUID"]},
                                  _flood, None)])
    _analyse(project)
    found = _found(project, "hardware_queueing")
    assert sorted(_index(f) for f in found) == list(INCIDENT)
    summary = found[0].summary
    assert "because its server was saturated (vllm-a:8000:" in summary, summary
    assert "requests waiting vs a usual 0" in summary, summary
    assert found[0].evidence["device"] == "vllm-a:8000"
    assert not _found(project, "slow_step")


def test_a_server_named_by_its_instance_host_and_port_is_the_one_the_call_names(live_server, project, ingest_key):
    """The series carry server.address and the scrape's instance `host:port` in service.instance.id,
    no server.port; the span sends server.port as an int."""
    metrics, spans = _exporters(live_server.url, ingest_key)
    base_ns, rng = _base_ns(), random.Random(6)
    _send_metrics(metrics, [({"service.name": "vllm", "server.address": "vllm-b", "service.instance.id": "vllm-b:8000"},
                             _vllm(rng, flooded=True), base_ns)])
    _send_calls(spans, base_ns, [("support", {"server.address": "vllm-b", "server.port": 8000}, _flood, None)])
    _analyse(project)
    found = _found(project, "hardware_queueing")
    assert sorted(_index(f) for f in found) == list(INCIDENT)
    assert "(vllm-b:8000:" in found[0].summary and "requests waiting vs a usual 0" in found[0].summary


NODE_GPUS = {i: _gpu("gpu-node-7", i) for i in range(8)}


def _two_servers(live_server, project, ingest_key, *, spans_name_gpus: bool):
    """vllm-a (port 8000) on GPUs 0-3 and vllm-b (port 8001) on GPUs 4-7 of gpu-node-7; GPU 5
    throttles thermally during the incident. Both servers' calls are 1.5-2 s slower then (vllm-a's
    for a reason of its own: its GPUs are nominal). `spans_name_gpus`: the servers' own request
    spans name their GPUs (hw.id), else nothing says which GPU is whose."""
    metrics, spans = _exporters(live_server.url, ingest_key)
    base_ns, rng = _base_ns(), random.Random(7)
    servers = []
    for name, port, gpus in (("a", 8000, range(4)), ("b", 8001, range(4, 8))):
        resource = {"service.name": f"vllm-{name}", "server.address": "gpu-node-7", "server.port": str(port),
                    "service.instance.id": f"gpu-node-7:{port}", "host.name": "gpu-node-7"}
        if spans_name_gpus:
            resource["hw.id"] = [NODE_GPUS[i]["UUID"] for i in gpus]
        servers.append(resource)
    _send_metrics(metrics, [
        *((r, _vllm(rng, flooded=False), base_ns) for r in servers),
        ({"service.name": "dcgm-exporter", "service.instance.id": "gpu-node-7:9400"},
         _dcgm(rng, {g["UUID"]: g for g in NODE_GPUS.values()}, {NODE_GPUS[5]["UUID"]}), base_ns)])
    slow = lambda i: 1.5 if i in INCIDENT else 0.0  # noqa: E731
    _send_calls(spans, base_ns, [
        ("agent-a", {"server.address": "gpu-node-7", "server.port": 8000}, slow, servers[0]),
        ("agent-b", {"server.address": "gpu-node-7", "server.port": 8001}, slow, servers[1])])
    _analyse(project)


def _by_port(project, kind, port):
    out = []
    for f in Finding.objects.filter(project=project, kind=kind).select_related("task"):
        step = Step.objects.get(task=f.task, step_id=f.step_ids[0])
        if step.attributes.get("server.port") == port:
            out.append(f)
    return out


def test_a_throttled_gpu_is_blamed_on_its_own_servers_calls_only(live_server, project, ingest_key):
    _two_servers(live_server, project, ingest_key, spans_name_gpus=True)
    assert not _by_port(project, "hardware_throttling", 8000)
    b = _by_port(project, "hardware_throttling", 8001)
    assert len(b) == len(INCIDENT)
    assert "clock-event reasons 0x40 (HW thermal slowdown)" in b[0].summary
    assert b[0].evidence["signals"]["clock_reasons"]["source"] == NODE_GPUS[5]["UUID"]
    assert b[0].confidence != "low"


def test_gpus_that_cannot_be_told_apart_make_a_possible_throttle_that_says_so(live_server, project, ingest_key):
    _two_servers(live_server, project, ingest_key, spans_name_gpus=False)
    for port in (8000, 8001):
        found = _by_port(project, "hardware_throttling", port)
        assert len(found) == len(INCIDENT), port
        assert all(f.confidence == "low" for f in found)
        assert "possibly because its GPU was throttling (" in found[0].summary
        assert "2 servers share gpu-node-7; its GPU 5 throttled" in found[0].summary
        assert found[0].confidence_reason.startswith("Possible: 2 servers share gpu-node-7; its GPU 5 throttled")


PODS = [("10.4.1.11", "vllm-llama-7d9c5b8f6-x2k4p"), ("10.4.2.12", "vllm-llama-7d9c5b8f6-q8w3z"),
        ("10.4.3.13", "vllm-llama-7d9c5b8f6-m5n7c")]
POD_RESOURCES = [{"service.name": "vllm", "server.address": ip, "server.port": "8000", "service.instance.id": f"{ip}:8000",
                  "k8s.pod.name": pod, "k8s.namespace.name": "inference", "k8s.deployment.name": "vllm-llama"}
                 for ip, pod in PODS]


def _service(live_server, project, ingest_key, *, answered=None):
    """Chat spans name the Service; the vLLM series carry each pod's address and k8s attributes;
    the second pod of three floods. `answered(i)`: the pod whose own span is under call i."""
    metrics, spans = _exporters(live_server.url, ingest_key)
    base_ns, rng = _base_ns(), random.Random(8)
    _send_metrics(metrics, [(r, _vllm(rng, flooded=n == 1), base_ns) for n, r in enumerate(POD_RESOURCES)])
    _send_calls(spans, base_ns, [("support", {"server.address": "vllm-llama.inference.svc.cluster.local",
                                              "server.port": 8000}, _flood, answered)])
    _analyse(project)


def test_a_service_in_front_of_three_pods_queues_on_the_pod_that_floods(live_server, project, ingest_key):
    _service(live_server, project, ingest_key)
    found = _found(project, "hardware_queueing")
    assert sorted(_index(f) for f in found) == list(INCIDENT)
    summary = found[0].summary
    assert "queueing on 1 of 3 pods behind vllm-llama" in summary, summary
    assert "requests waiting vs a usual 0" in summary
    # Slow on its own (2 s over 0.8 s): the call's slowdown corroborates the one pod's queue.
    assert {f.confidence for f in found} <= {"medium", "high"}


def test_a_stock_dcgm_exporter_clock_fall_is_a_throttle(live_server, project, ingest_key):
    """No clock-event reasons, no max clock: the SM clock falls from 1,410 to ~690 MHz, utilisation
    high, power down, temperature as usual."""
    metrics, spans = _exporters(live_server.url, ingest_key)
    base_ns, rng = _base_ns(), random.Random(9)
    gpu = _gpu("gpu-node-3", 2)
    _send_metrics(metrics, [({"service.name": "dcgm-exporter", "service.instance.id": "gpu-node-3:9400"},
                             _dcgm(rng, {gpu["UUID"]: gpu}, {gpu["UUID"]}, stock=True), base_ns)])
    _send_calls(spans, base_ns, [("support", {"server.address": "vllm-c", "server.port": 8000, "hw.id": gpu["UUID"]},
                                  lambda i: 0.6 if i in INCIDENT else 0.0, None)])
    _analyse(project)
    found = _found(project, "hardware_throttling")
    assert sorted(_index(f) for f in found) == list(INCIDENT)
    summary = found[0].summary
    assert "SM clock 6" in summary and "MHz vs a usual 1,410 MHz (no max clock or clock-event reasons reported" in summary
    assert "power " in summary


def test_the_pod_whose_own_span_answered_is_the_one_read(live_server, project, ingest_key):
    """The pods' own request spans under the calls say which pod answered: the flooded pod during
    the incident, the others before and after. Only that pod is read, and no "1 of 3" is said."""
    _service(live_server, project, ingest_key,
             answered=lambda i: POD_RESOURCES[1] if i in INCIDENT else POD_RESOURCES[0 if i % 2 else 2])
    found = _found(project, "hardware_queueing")
    assert sorted(_index(f) for f in found) == list(INCIDENT)
    assert "of 3 pods" not in found[0].summary and "requests waiting vs a usual 0" in found[0].summary
    assert found[0].evidence["signals"]["devices"] == ["10.4.2.12:8000"]
