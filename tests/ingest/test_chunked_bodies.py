"""Request bodies sent with `Transfer-Encoding: chunked` and no Content-Length, as the Node.js OTLP
exporter sends every request: stored on every ingest endpoint when gunicorn serves them (as
runstack does), under the same limits, and never answered 2xx unread."""

from __future__ import annotations

import gzip
import http.client
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ingest import limits
from ingest.models import IngestKey, Project, ResourceSample, Step, Task
from ingest.services import key_create
from tests.conftest import faults_pass
from tests.ingest.fixtures.otlp import T0, gauge_request, span, trace_request

PB = "application/x-protobuf"
AI_SDK_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents" / "ai_sdk"


def post_chunked(url: str, path: str, body: bytes, *, key: str, content_type: str,
                 gzipped: bool = False, chunk: int = 700) -> tuple[int, bytes]:
    """POST `body` in chunks of `chunk` bytes, with no Content-Length (http.client frames it)."""
    if gzipped:
        body = gzip.compress(body)
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Content-Type": content_type, "Authorization": f"Bearer {key}",
               "Transfer-Encoding": "chunked", **({"Content-Encoding": "gzip"} if gzipped else {})}
    try:
        conn.request("POST", path, body=(body[i:i + chunk] for i in range(0, len(body), chunk)),
                     headers=headers, encode_chunked=True)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def traces_body(trace: int, n_spans: int) -> bytes:
    spans = [span(trace, 1, name="invoke_agent", end_ms=10 * n_spans + 10,
                  attributes={"gen_ai.operation.name": "invoke_agent"})]
    spans += [span(trace, 2 + i, parent=1, name="execute_tool", start_ms=10 * i, end_ms=10 * i + 8,
                   attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{i}",
                               "gen_ai.tool.call.arguments": json.dumps({"q": "x" * 200, "i": i})})
              for i in range(n_spans)]
    return trace_request(spans, resource={"service.name": "node-agent"}).SerializeToString()


def otlp_json_body(trace_hex: str) -> bytes:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [{
        "traceId": trace_hex, "spanId": "00000000000000a1", "name": "ai.generateText", "kind": 1,
        "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 5_000_000),
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]}).encode()


@pytest.mark.slow
@faults_pass
def test_chunked_bodies_are_stored_on_every_ingest_endpoint_under_gunicorn(stack_env, tmp_path):
    from tests.agentops.test_runstack import Stack

    project = Project.objects.create(name="chunked")
    _, key = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST])
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "1", "--worker-concurrency", "1",
               "--no-beat") as stack:
        # OTLP protobuf, plain and gzip, each over many chunks.
        for trace, gzipped in ((0x11, False), (0x12, True)):
            status, reply = post_chunked(stack.url, "/v1/traces", traces_body(trace, 40), key=key,
                                         content_type=PB, gzipped=gzipped)
            assert status == 200, (reply, stack.output()[-3000:])
            assert Step.objects.filter(project=project, task__task_id=f"{trace:032x}").count() == 41
        # OTLP/JSON as the Node exporter sends it.
        status, reply = post_chunked(stack.url, "/v1/traces", otlp_json_body("ab" * 16), key=key,
                                     content_type="application/json")
        assert status == 200, reply
        assert Task.objects.filter(project=project, task_id="ab" * 16).exists()
        # Every body the AI SDK's Node exporter posted when its fixtures were recorded, chunked.
        sent = 0
        for body in sorted(AI_SDK_FIXTURES.glob("*.json")):
            status, reply = post_chunked(stack.url, "/v1/traces", body.read_bytes(), key=key,
                                         content_type="application/json")
            assert status == 200 and b"rejected" not in reply, (body.name, reply)
            payload = json.loads(body.read_bytes())
            sent += sum(len(ss.get("spans", [])) for rs in payload["resourceSpans"] for ss in rs["scopeSpans"])
        assert sent > 400
        assert Step.objects.filter(project=project, task__attributes__contains={
            "service.name": "ai-sdk-support"}).count() == sent
        # Native batch.
        event = {"type": "task", "task_id": "native-chunked", "name": "checkout",
                 "started_at": "2026-11-01T10:00:00Z", "ended_at": "2026-11-01T10:00:02Z"}
        status, reply = post_chunked(stack.url, "/api/v1/ingest", json.dumps({"events": [event]}).encode(),
                                     key=key, content_type="application/json", chunk=16, gzipped=True)
        assert (status, json.loads(reply)) == (200, {"accepted": 1, "rejected": []})
        # Metrics.
        metrics = gauge_request([("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "UUID": "GPU-chunk"}, 61)])
        status, reply = post_chunked(stack.url, "/v1/metrics", metrics.SerializeToString(), key=key,
                                     content_type=PB)
        assert status == 200, reply
        assert ResourceSample.objects.get(project=project).temperature_c == 61.0
        # The size limit holds without a Content-Length to check first.
        too_big = b'{"events": [' + b" " * (limits.MAX_BODY_BYTES + 10) + b"]}"
        status, reply = post_chunked(stack.url, "/api/v1/ingest", too_big, key=key,
                                     content_type="application/json", chunk=1 << 20)
        assert status == 413, reply
        assert b"over the limit" in reply


def test_a_chunked_body_the_server_cannot_decode_is_refused_not_dropped(live_server, project, ingest_key):
    """Django's development server passes the chunk framing through: 411, never a 200 for nothing."""
    status, reply = post_chunked(live_server.url, "/v1/traces", otlp_json_body("cd" * 16), key=ingest_key,
                                 content_type="application/json")
    assert status == 411
    assert b"Content-Length" in reply
    assert not Task.objects.filter(project=project).exists()


def test_a_truncated_gzip_body_is_400_not_a_partial_store(live_server, project, ingest_key):
    import requests

    body = gzip.compress(traces_body(0x21, 40))
    r = requests.post(f"{live_server.url}/v1/traces", data=body[: len(body) // 2], timeout=30,
                      headers={"Content-Type": PB, "Content-Encoding": "gzip",
                               "Authorization": f"Bearer {ingest_key}"})
    assert r.status_code == 400
    assert not Task.objects.filter(project=project).exists()
