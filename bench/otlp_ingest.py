"""OTLP ingest rate: N GenAI spans (traces of 16: an invoke_agent root, chat spans with model,
tokens and TTFT, execute_tool spans with JSON arguments) made by the OpenTelemetry SDK's tracer
and sent by the SDK's own OTLPSpanExporter (opentelemetry-exporter-otlp-proto-http) in batches
of 512 spans (the BatchSpanProcessor's default), from a few concurrent senders, to /v1/traces on
gunicorn on a free port. The rate counts spans *stored* (steps read back from the database),
not accepted.

By default each batch is encoded by the exporter's encoder before the clock starts and the
exporter's HTTP client (its retries and backoff included) sends the bytes: the server receives
exactly what `export()` sends, and the encoding, which an agent does on its own machine, is not
charged to this 2-core box. `--encode-in-loop` times `export()` whole instead (encoding on the
same cores as the server). `--decode-only` times the pure decoder alone.

    .venv/bin/python bench/otlp_ingest.py --spans 100000 --batch 512 --senders 4
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402

SPANS_PER_TRACE = 16
T0 = 1_793_000_000_000_000_000
MS = 1_000_000
RESOURCE = {"service.name": "support", "service.version": "2.3.0", "deployment.environment.name": "prod"}


def make_spans(total: int) -> list:
    """`total` finished spans (ReadableSpan) from the SDK's tracer, in the order they ended."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    finished = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(RESOURCE))
    provider.add_span_processor(SimpleSpanProcessor(finished))
    tracer = provider.get_tracer("agentops-bench")
    for first in range(0, total, SPANS_PER_TRACE):
        trace_no = first // SPANS_PER_TRACE
        start = T0 + trace_no * 10_000 * MS
        root = tracer.start_span("invoke_agent support", start_time=start, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": f"conv-{trace_no % 1000}"})
        parent = trace.set_span_in_context(root)
        for i in range(first + 1, min(first + SPANS_PER_TRACE, total)):
            at = start + (i - first) * 400 * MS
            if (i - first) % 2:
                span = tracer.start_span("chat llama-3.1-70b", context=parent, start_time=at, attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": "groq",
                    "gen_ai.request.model": "llama-3.1-70b", "gen_ai.usage.input_tokens": 1200 + i % 500,
                    "gen_ai.usage.output_tokens": 150, "gen_ai.response.time_to_first_chunk": 0.18,
                    "hw.id": f"groq-lpu-{trace_no % 4}"})
            else:
                span = tracer.start_span("execute_tool search_orders", context=parent, start_time=at, attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders",
                    "gen_ai.tool.call.id": f"call_{i}",
                    "gen_ai.tool.call.arguments": json.dumps({"order_id": trace_no, "q": "late delivery"})})
            span.end(end_time=at + 350 * MS)
        root.end(end_time=start + 6500 * MS)
    provider.shutdown()
    return list(finished.get_finished_spans())


def make_batches(total: int, batch_size: int) -> list[list]:
    """The spans in export batches of `batch_size`, as a BatchSpanProcessor hands them over."""
    spans = make_spans(total)
    return [spans[i:i + batch_size] for i in range(0, len(spans), batch_size)]


def encode(batches: list[list]) -> list[bytes]:
    """Each batch as the exporter serialises it (its own encoder, byte for byte)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return [encode_spans(batch).SerializePartialToString() for batch in batches]


def sender(endpoint: str, *, headers: dict[str, str], encode_in_loop: bool) -> Callable[[object], bool]:
    """A function sending one batch (spans, or bytes from `encode`) through an OTLPSpanExporter of
    the calling thread's own (the SDK's exporter is used from one thread at a time); False when
    the exporter gave up on it (after its own retries with backoff: the batch is lost, as it
    would be for an agent)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    local = threading.local()

    def send(item) -> bool:
        exporter = getattr(local, "exporter", None)
        if exporter is None:
            exporter = local.exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=120)
        if encode_in_loop:
            return exporter.export(item) == SpanExportResult.SUCCESS
        return exporter._client.export(item).success  # export() minus the encoding done beforehand
    return send


def sdk_version() -> str:
    from importlib.metadata import version

    return f"opentelemetry-exporter-otlp-proto-http {version('opentelemetry-exporter-otlp-proto-http')}"


def decode_only(*, spans: int, batch: int) -> dict:
    harness.setup_django(harness.bench_database_url(fresh=False))
    from ingest import otlp

    bodies = encode(make_batches(spans, batch))
    started = time.perf_counter()
    for body in bodies:
        otlp.decode_traces(body, media=otlp.PROTOBUF)
    elapsed = time.perf_counter() - started
    return {"spans": spans, "decode_seconds": round(elapsed, 2), "decoded_spans_per_s": round(spans / elapsed)}


def project_names(prefix: str, projects: int) -> list[str]:
    """`prefix` alone for one project; `prefix-1` … `prefix-N` for several."""
    return [prefix] if projects == 1 else [f"{prefix}-{n}" for n in range(1, projects + 1)]


def run(*, spans: int, batch: int, senders: int, workers: int, encode_in_loop: bool = False,
        projects: int = 1) -> dict:
    """`projects` > 1: the batches go to that many projects in turn, each with its own key (on
    Citus, spread over the workers: harness.projects_create)."""
    url = harness.bench_database_url()
    harness.setup_django(url)
    harness.migrate()
    from ingest.models import Step

    made = harness.projects_create(project_names("bench-otlp", projects))
    batches = make_batches(spans, batch)
    items = batches if encode_in_loop else encode(batches)
    with harness.web_server(url, workers=workers) as base:
        sends = [sender(f"{base}/v1/traces", headers={"Authorization": f"Bearer {key}"},
                        encode_in_loop=encode_in_loop) for _project, key in made]
        started = time.perf_counter()
        with ThreadPoolExecutor(senders) as pool:
            results = pool.map(lambda n: sends[n % len(sends)](items[n]), range(len(items)))
            for n, ok in enumerate(results, 1):
                if not ok:
                    raise RuntimeError("the exporter gave up on a batch agentops refused (see its log above)")
                harness.progress("otlp ingest", n, len(items))
        while Step.objects.filter(project__in=[p for p, _ in made]).count() < spans:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
    return {"spans": spans, "batch": batch, "senders": senders, "web_workers": workers,
            "placement": harness.placement([p for p, _ in made]),
            "sender": sdk_version() + (": export() timed whole, encoding included" if encode_in_loop
                                       else ": bodies encoded by its encoder beforehand, sent by its HTTP client"),
            "seconds": round(elapsed, 2), "spans_per_s": round(spans / elapsed)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--decode-only", action="store_true", help="time the pure decoder, no server")
    parser.add_argument("--encode-in-loop", action="store_true",
                        help="time the exporter's export() whole, encoding on the server's cores")
    args = parser.parse_args()
    # A scratch database of its own, so this never collides with the native ingest benchmark.
    harness.BENCH_DB = "agentops_bench_otlp"
    harness.stop_on_signals()
    try:
        with harness.embedded_services():  # run alone; under soak.py they are its
            if args.decode_only:
                print(json.dumps(decode_only(spans=args.spans, batch=args.batch)))
            else:
                print(json.dumps(run(spans=args.spans, batch=args.batch, senders=args.senders,
                                     workers=args.workers, encode_in_loop=args.encode_in_loop)))
    except KeyboardInterrupt as exc:
        harness.exit_interrupted("otlp_ingest", exc)
