"""/v1/metrics decode + store of dcgm-exporter-shaped batches: 1,000 series (125 GPUs x 8 DCGM fields) x 10
points, built with the OpenTelemetry SDK encoder. Run: AGENTOPS_DATA_DIR=... python manage.py shell < bench/otlp_metrics_dcgm.py"""
import time

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ingest import otlp
from ingest.models import Project
from ingest.services import batch_store

project, _ = Project.objects.get_or_create(name="bench-dcgm")
names = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
         "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
def body(round_):
    t0 = (time.time_ns() // 10**9 - 7200 + round_ * 100) * 10**9
    # 1,000 series: 125 GPUs (16 hosts x 8) x 8 fields; 10 points each (every 5 s)
    metrics = []
    for n in names:
        pts = [NumberDataPoint({"gpu": str(g % 8), "UUID": f"GPU-{round_}-{g:04d}", "Hostname": f"node-{g // 8}",
                                "modelName": "NVIDIA H100 80GB HBM3"}, 0, t0 + k * 5 * 10**9, 50 + g % 7)
               for g in range(125) for k in range(10)]
        metrics.append(Metric(n, "", "", Gauge(pts)))
    data = MetricsData([ResourceMetrics(Resource.create({"service.name": "dcgm-exporter"}),
                                        [ScopeMetrics(InstrumentationScope("prom"), metrics, "")], "")])
    return encode_metrics(data).SerializeToString()
for r in range(4):
    raw = body(r)
    t = time.perf_counter()
    decoded = otlp.decode_metrics(raw, media=otlp.PROTOBUF)
    t1 = time.perf_counter()
    batch_store(project=project, batch=decoded.batch)
    t2 = time.perf_counter()
    print(f"round {r}: {len(raw)/1e6:.2f} MB, 10000 points, {len(decoded.batch.samples)} samples; decode {t1-t:.3f}s store {t2-t1:.3f}s -> {10000/(t2-t):,.0f} points/s")
