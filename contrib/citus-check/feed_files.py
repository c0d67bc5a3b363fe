"""Step 2b of the Citus browser check: feed two projects over HTTP only.

corpus-a: the OTLP trace bodies of ../shared/eval/corpus-a to /v1/traces as the SDK posted
them, and its device samples (native resource events in the file) converted to OTLP gauges
(`agentops.device.<field>`, the device as `hw.id`) and posted to /v1/metrics.
recorded: every recorded request body under tests/fixtures/agents (as tests/recorded replays
them) to /v1/traces, then native events to /api/v1/ingest: 60 tasks in 20 sessions of 3, two
releases. (browser_check.py sends a running task itself, `live`, while its page is open.)

    python contrib/citus-check/feed_files.py http://127.0.0.1:18731 CORPUS_INGEST RECORDED_INGEST
"""
from __future__ import annotations

import json
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, NumberDataPoint, ResourceMetrics

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(ROOT.parent / "shared" / "eval" / "corpus-a")
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/eval/corpus-a")
FIXTURES = ROOT / "tests" / "fixtures" / "agents"
MEDIA = {".pb": "application/x-protobuf", ".json": "application/json"}


def post(url: str, key: str, path: str, body: bytes, media: str) -> requests.Response:
    r = requests.post(url + path, data=body, timeout=120,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": media})
    assert r.status_code == 200, (path, r.status_code, r.text[:500])
    return r


def kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def samples_as_otlp(events: list[dict], chunk: int = 400) -> list[bytes]:
    bodies = []
    for start in range(0, len(events), chunk):
        req = ExportMetricsServiceRequest()
        rm: ResourceMetrics = req.resource_metrics.add()
        rm.resource.attributes.append(kv("service.name", "corpus-a-devices"))
        sm = rm.scope_metrics.add()
        by_field: dict[str, Metric] = {}
        for e in events[start:start + chunk]:
            for field, value in e["metrics"].items():
                m = by_field.get(field)
                if m is None:
                    m = by_field[field] = sm.metrics.add(name=f"agentops.device.{field}")
                m.gauge.data_points.append(NumberDataPoint(
                    time_unix_nano=int(e["ts"]), as_double=float(value),
                    attributes=[kv("hw.id", e["device"]), kv("hw.vendor", e["vendor"]),
                                kv("hw.model", e["hardware"])]))
        bodies.append(req.SerializeToString())
    return bodies


def feed_corpus(url: str, key: str) -> None:
    for body in sorted(CORPUS.glob("traces-*.pb")):
        post(url, key, "/v1/traces", body.read_bytes(), MEDIA[".pb"])
        print("corpus-a", body.name, flush=True)
    events = json.loads((CORPUS / "device-samples.json").read_text())["events"]
    rejected = 0
    for body in samples_as_otlp(events):
        r = post(url, key, "/v1/metrics", body, "application/x-protobuf")
        rejected += len(r.content) > 0 and b"rejected" in r.content
    print("corpus-a samples", len(events), "requests with a rejection:", rejected, flush=True)


def native_events(now: datetime) -> list[dict]:
    rng = random.Random(5)
    events: list[dict] = []
    for i in range(60):
        start = now - timedelta(hours=30) + timedelta(minutes=29 * i)
        task = f"native-{i:03d}"
        release = "native-1" if i < 30 else "native-2"
        t = start
        steps = []
        for turn in range(rng.randint(2, 4)):
            llm = (rng.uniform(0.4, 1.6) + (1.5 if release == "native-2" else 0)) * 1000
            steps.append({"type": "step", "task_id": task, "step_id": f"llm{turn}", "kind": "llm",
                          "name": "chat", "model": "gpt-4o-mini", "device": "api-openai",
                          "started_at": t.isoformat(), "ended_at": (t + timedelta(milliseconds=llm)).isoformat(),
                          "input_tokens": 400 + 300 * turn, "output_tokens": 60, "ttft_ms": llm * 0.3,
                          "parent_step_id": "root"})
            t += timedelta(milliseconds=llm)
            tool = rng.uniform(80, 400) * (8 if i % 17 == 3 and turn == 1 else 1)
            steps.append({"type": "step", "task_id": task, "step_id": f"tool{turn}", "kind": "tool",
                          "name": "lookup_invoice", "tool_name": "lookup_invoice",
                          "tool_args": {"invoice": 1000 + i}, "tool_result": {"total": i * 3.5},
                          "started_at": t.isoformat(), "ended_at": (t + timedelta(milliseconds=tool)).isoformat(),
                          "parent_step_id": "root"})
            t += timedelta(milliseconds=tool)
        events.append({"type": "task", "task_id": task, "name": "billing-agent", "release": release,
                       "environment": "production", "session_id": f"sess-{i // 3:02d}",
                       "started_at": start.isoformat(), "ended_at": t.isoformat(), "status": "ok",
                       "attributes": {"customer.tier": "gold" if i % 2 else "silver"}})
        events.append({"type": "step", "task_id": task, "step_id": "root", "kind": "agent", "name": "billing-agent",
                       "started_at": start.isoformat(), "ended_at": t.isoformat()})
        events.extend(steps)
    return events


def live_task(url: str, key: str, task_id: str, start: datetime, steps: int, end: bool = False) -> None:
    """A running task: its first `steps` steps, 3 s apart from `start` (sent again, the same
    steps update), and no task event (a reported task is one whose end is known: its bounds
    come from its steps); with `end`, the task event that ends it."""
    events = []
    if end:
        events.append({"type": "task", "task_id": task_id, "name": "billing-agent", "release": "native-2",
                       "started_at": start.isoformat(), "session_id": "sess-live", "status": "ok",
                       "ended_at": (start + timedelta(seconds=3 * steps)).isoformat()})
    for n in range(steps):
        s = start + timedelta(seconds=3 * n)
        step = {"type": "step", "task_id": task_id, "step_id": f"s{n}", "kind": "tool" if n % 2 else "llm",
                "name": "lookup_invoice" if n % 2 else "chat", "started_at": s.isoformat(),
                "ended_at": (s + timedelta(seconds=2)).isoformat()}
        step.update({"tool_name": "lookup_invoice"} if n % 2 else {"model": "gpt-4o-mini"})
        events.append(step)
    post(url, key, "/api/v1/ingest", json.dumps({"events": events}).encode(), "application/json")


def feed_recorded(url: str, key: str) -> None:
    n = 0
    for family in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name not in ("record", "content_off")):
        for body in sorted(family.iterdir()):
            if body.suffix in MEDIA and body.stem.isdigit():
                post(url, key, "/v1/traces", body.read_bytes(), MEDIA[body.suffix])
                n += 1
        print("recorded", family.name, flush=True)
    now = datetime.now(UTC)
    r = post(url, key, "/api/v1/ingest", json.dumps({"events": native_events(now)}).encode(), "application/json")
    print("recorded: bodies", n, "native", r.json()["accepted"], "rejected", r.json()["rejected"][:3], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "live":  # feed_files.py live URL KEY TASK_ID START STEPS: a running task
        live_task(sys.argv[2], sys.argv[3], sys.argv[4], datetime.fromisoformat(sys.argv[5]), int(sys.argv[6]),
                  end=sys.argv[7:] == ["end"])
    else:
        url, corpus_key, recorded_key = sys.argv[1:4]
        feed_corpus(url, corpus_key)
        feed_recorded(url, recorded_key)
