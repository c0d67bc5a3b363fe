"""The MCP SDK's own client against `/mcp` on the running stack (`manage.py runstack`: gunicorn
gthread, the WSGI tier users run): every tool in both protocol eras (the 2026 single-exchange
POST and the handshake of 2025), another project's ids, bad arguments, a 50,000-step task, the
key check, and clients that stall mid-request: each is answered 408 after AGENTOPS_BODY_IDLE_SECONDS
and its thread serves again."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time

import httpx2
import pytest
import requests
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from analysis.mcp.tools import OUTPUT_CHARS
from ingest.models import IngestKey
from tests.agentops.test_runstack import Stack
from tests.analysis.mcp import world as w
from tests.conftest import faults_pass, subprocess_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BODY_IDLE_SECONDS = 1
GUNICORN_DRAIN_SECONDS = 5  # gthread drains an unread body this long before it keeps a connection alive
WEB_THREADS = 4
CALLS = [
    ("search_tasks", {"q": "search", "limit": 5}), ("search_tasks", {"sort": "-duration_ms", "limit": 100}),
    ("explain_task", {"task_id": "slow-1"}), ("compare_tasks", {"task_id": "slow-1", "other_task_id": "run-0"}),
    ("critical_path", {"task_id": w.ODD_ID}), ("latency_percentiles", {"group_by": "tool"}),
    ("latency_percentiles", {"group_by": "session"}), ("list_findings", {"limit": 50}),
    ("compare_releases", {"a": "v1", "b": "v2"}), ("get_session", {"session_id": "sess-1"}),
    ("device_status", {}),
    # the 50,000-step task: bounded answers
    ("critical_path", {"task_id": w.BIG, "limit": 100}), ("explain_task", {"task_id": w.BIG}),
    ("compare_tasks", {"task_id": w.BIG, "other_task_id": "run-0"}), ("list_findings", {"task_id": w.BIG}),
]
REFUSED = [
    ("explain_task", {"task_id": "globex-only"}, "no such task 'globex-only'"),
    ("compare_tasks", {"task_id": "run-0", "other_task_id": "globex-only"}, "no such task 'globex-only'"),
    ("get_session", {"session_id": "globex-session"}, "no such session"),
    ("search_tasks", {"limit": 1000}, "limit"), ("search_tasks", {"status": "broken"}, "status: must be one of"),
    ("explain_task", {}, "task_id"), ("compare_releases", {"a": "v1", "b": "v9"}, "no release 'v9'"),
    ("critical_path", {"task_id": "run-0", "cursor": "x"}, "cursor"), ("no_such_tool", {}, "no_such_tool"),
]


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    """One stack for the module, on this run's test database (each test commits its own rows)."""
    data = tmp_path_factory.mktemp("mcp")  # short: the control socket's path is limited
    with django_db_blocker.unblock():
        database_url = subprocess_database_url()
    env = {**os.environ, "DATABASE_URL": database_url, "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
           "DJANGO_SETTINGS_MODULE": "tests.settings", "SECRET_KEY": "test-secret-key", "DEBUG": "1",
           "AGENTOPS_DATA_DIR": str(data),
           "AGENTOPS_BODY_IDLE_SECONDS": str(BODY_IDLE_SECONDS), "WEB_THREADS": str(WEB_THREADS),
           "AGENTOPS_BASE_URL": "https://agentops.example"}
    with Stack(env, data / "stack.log", "--web-workers", "1", "--worker-concurrency", "1", "--no-beat") as s:
        yield s


@pytest.fixture
def keys(project, other_project, make_key) -> dict[str, str]:
    w.build(project, other_project)
    return {"read": make_key(project, IngestKey.SCOPE_READ), "ingest": make_key(project, IngestKey.SCOPE_INGEST),
            "b": make_key(other_project, IngestKey.SCOPE_READ)}


async def session_calls(url: str, key: str, mode: str, calls) -> list[tuple[str, dict, object, float]]:
    out = []
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
                Client(streamable_http_client(url, http_client=http), mode=mode) as client):
        listed = await client.list_tools()
        out.append(("tools/list", {}, sorted(t.name for t in listed.tools), 0.0))
        for name, args, *_ in calls:
            started = time.monotonic()
            result = await client.call_tool(name, args)
            out.append((name, args, result, time.monotonic() - started))
    return out


@faults_pass
def test_every_tool_over_streamable_http_on_the_running_stack(stack, keys, project):
    w.build_big(project)
    url = f"{stack.url}/mcp"
    for mode in ("auto", "legacy"):
        answers = asyncio.run(session_calls(url, keys["read"], mode, CALLS))
        assert answers[0][2] == sorted({name for name, _ in CALLS}), answers[0]
        for name, args, result, seconds in answers[1:]:
            text = result.content[0].text
            assert not result.is_error, (name, args, text)
            assert len(text) <= OUTPUT_CHARS and w.SECRET not in text, (name, args)
            data = json.loads(text)
            assert data["project"] == "acme" and data["url"].startswith("https://agentops.example/")
            assert seconds < 10, (name, args, seconds)  # a loaded 2-core CI box; the demo figures: docs/mcp.md
        refused = asyncio.run(session_calls(url, keys["read"], mode, REFUSED))
        for (name, args, result, _), (_, _, expected) in zip(refused[1:], REFUSED, strict=True):
            assert result.is_error and expected in result.content[0].text, (name, args, result)
            assert w.SECRET not in result.content[0].text
    # B's key reads B: the id both have answers with B's task, A's own ids are not found.
    b = asyncio.run(session_calls(url, keys["b"], "auto", [("explain_task", {"task_id": "run-0"}),
                                                                 ("explain_task", {"task_id": "run-1"})]))
    assert json.loads(b[1][2].content[0].text)["task"]["name"] == w.SECRET
    assert b[2][2].is_error and "no such task 'run-1'" in b[2][2].content[0].text


@faults_pass
def test_the_key_check_of_the_read_api_and_no_stream(stack, keys):
    url = f"{stack.url}/mcp"
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    for auth, status in [({}, 401), ({"Authorization": "Bearer ao_nope_nope"}, 401),
                         ({"Authorization": f"Bearer {keys['ingest']}"}, 403)]:
        response = requests.post(url, json=message, headers={**headers, **auth}, timeout=10)
        assert response.status_code == status, response.text
        assert b"acme" not in response.content and b"search_tasks" not in response.content
    stream = requests.get(url, headers={"Accept": "text/event-stream",
                                        "Authorization": f"Bearer {keys['read']}"}, timeout=10)
    assert stream.status_code == 405  # no SSE stream to hold a web thread open


def _stalled(stack, key: str) -> socket.socket:
    """A POST that declares a body and never sends most of it."""
    sock = socket.create_connection(("127.0.0.1", stack.port), timeout=30)
    sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                 "Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: 500\r\n\r\n{".encode())
    return sock


@faults_pass
def test_clients_that_stall_mid_request_free_their_threads(stack, keys):
    url = f"{stack.url}/mcp"
    stalled = [_stalled(stack, keys["read"]) for _ in range(WEB_THREADS)]  # every thread of the one worker
    time.sleep(0.5)  # each has a thread, reading its body
    started = time.monotonic()
    answers = asyncio.run(session_calls(url, keys["read"], "auto", [("search_tasks", {"limit": 1})]))
    waited = time.monotonic() - started
    assert not answers[1][2].is_error
    # Served once the stalled bodies timed out (and gunicorn gave up draining them, GUNICORN_DRAIN_SECONDS),
    # not never.
    assert waited < BODY_IDLE_SECONDS + GUNICORN_DRAIN_SECONDS + 4, waited
    for sock in stalled:
        head = sock.recv(200).decode()
        assert head.startswith("HTTP/1.1 408"), head
        sock.close()
