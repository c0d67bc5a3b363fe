"""OTLP ingest rate: N GenAI spans (traces of 16: an invoke_agent root, chat spans with model,
tokens and TTFT, execute_tool spans with JSON arguments) as pre-encoded protobuf
ExportTraceServiceRequests of 512 spans (the SDK's default batch) POSTed to /v1/traces by a
few concurrent senders against gunicorn on a free port. The rate counts spans *stored* (steps
read back from the database), not accepted. `--decode-only` times the pure decoder alone.

    .venv/bin/python bench/otlp_ingest.py --spans 100000 --batch 512 --senders 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402

SPANS_PER_TRACE = 16
T0 = 1_793_000_000_000_000_000
MS = 1_000_000


def _attrs(span, attributes: dict) -> None:
    for key, value in attributes.items():
        kv = span.attributes.add(key=key)
        if isinstance(value, str):
            kv.value.string_value = value
        elif isinstance(value, float):
            kv.value.double_value = value
        else:
            kv.value.int_value = value


def make_batches(total: int, batch_size: int) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    bodies = []
    for first in range(0, total, batch_size):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        _attrs(resource_spans.resource, {"service.name": "support", "service.version": "2.3.0",
                                         "deployment.environment.name": "prod"})
        spans = resource_spans.scope_spans.add().spans
        for i in range(first, min(first + batch_size, total)):
            trace, position = divmod(i, SPANS_PER_TRACE)
            start = T0 + trace * 10_000 * MS + position * 400 * MS
            span = spans.add(trace_id=(trace + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                             kind=1, start_time_unix_nano=start, end_time_unix_nano=start + 350 * MS)
            if position == 0:
                span.name = "invoke_agent support"
                span.end_time_unix_nano = start + 6500 * MS
                _attrs(span, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                              "gen_ai.conversation.id": f"conv-{trace % 1000}"})
                continue
            span.parent_span_id = (trace * SPANS_PER_TRACE + 1).to_bytes(8, "big")
            if position % 2:
                span.name = "chat llama-3.1-70b"
                _attrs(span, {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "groq",
                              "gen_ai.request.model": "llama-3.1-70b", "gen_ai.usage.input_tokens": 1200 + i % 500,
                              "gen_ai.usage.output_tokens": 150, "gen_ai.response.time_to_first_chunk": 0.18,
                              "hw.id": f"groq-lpu-{trace % 4}"})
            else:
                span.name = "execute_tool search_orders"
                _attrs(span, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders",
                              "gen_ai.tool.call.id": f"call_{i}",
                              "gen_ai.tool.call.arguments": json.dumps({"order_id": trace, "q": "late delivery"})})
        bodies.append(request.SerializeToString())
    return bodies


def decode_only(*, spans: int, batch: int) -> dict:
    harness.setup_django(harness.bench_database_url(fresh=False))
    from ingest import otlp

    bodies = make_batches(spans, batch)
    started = time.perf_counter()
    for body in bodies:
        otlp.decode_traces(body, media=otlp.PROTOBUF)
    elapsed = time.perf_counter() - started
    return {"spans": spans, "decode_seconds": round(elapsed, 2), "decoded_spans_per_s": round(spans / elapsed)}


def run(*, spans: int, batch: int, senders: int, workers: int) -> dict:
    import requests

    url = harness.bench_database_url()
    harness.setup_django(url)
    harness.migrate()
    from ingest.models import Step
    from ingest.services import project_create

    project, key = project_create(name="bench-otlp")
    bodies = make_batches(spans, batch)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/x-protobuf"}
    with harness.web_server(url, workers=workers) as base:
        sessions = {}

        def send(body: bytes) -> None:
            import threading
            s = sessions.setdefault(threading.get_ident(), requests.Session())
            for _ in range(10):
                r = s.post(f"{base}/v1/traces", data=body, headers=headers, timeout=120)
                if r.status_code in (429, 502, 503, 504):
                    time.sleep(float(r.headers.get("Retry-After", 1)))
                    continue
                r.raise_for_status()
                return
            raise RuntimeError("gave up after retries")

        started = time.perf_counter()
        with ThreadPoolExecutor(senders) as pool:
            for n, _ in enumerate(pool.map(send, bodies), 1):
                harness.progress("otlp ingest", n, len(bodies))
        while Step.objects.filter(project=project).count() < spans:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
    return {"spans": spans, "batch": batch, "senders": senders, "web_workers": workers,
            "seconds": round(elapsed, 2), "spans_per_s": round(spans / elapsed)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--decode-only", action="store_true", help="time the pure decoder, no server")
    args = parser.parse_args()
    # A scratch database of its own, so this never collides with the native ingest benchmark.
    harness.BENCH_DB = "agentops_bench_otlp"
    if args.decode_only:
        print(json.dumps(decode_only(spans=args.spans, batch=args.batch)))
    else:
        print(json.dumps(run(spans=args.spans, batch=args.batch, senders=args.senders,
                             workers=args.workers)))
