"""`/mcp` in the Django process: the read API's authentication and tenancy, then one JSON-RPC
exchange with the SDK per POST (the transports end to end are test_http.py and test_stdio.py)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ingest.models import IngestKey
from ingest.services import key_revoke
from tests.analysis.mcp import world as w

pytestmark = pytest.mark.django_db

ACCEPT = "application/json, text/event-stream"
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def rpc(client: Client, message: dict, **headers):
    return client.post("/mcp", json.dumps(message), content_type="application/json", HTTP_ACCEPT=ACCEPT,
                       HTTP_MCP_PROTOCOL_VERSION="2025-06-18", **headers)


def call(name: str, arguments: dict, id_: int = 2) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def keyed(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


@pytest.fixture
def world(project, other_project):
    return w.build(project, other_project)


def test_no_key_a_wrong_key_or_a_revoked_key_is_401_and_says_nothing(world, read_key):
    revoked = IngestKey.objects.get(prefix=read_key.split("_")[1])
    answers = [rpc(Client(), LIST_TOOLS), rpc(keyed("ao_nope_nope"), LIST_TOOLS), rpc(keyed("garbage"), LIST_TOOLS)]
    key_revoke(key=revoked)
    answers.append(rpc(keyed(read_key), call("explain_task", {"task_id": "run-0"})))
    for response in answers:
        assert response.status_code == 401, response.content
        assert response["WWW-Authenticate"] == 'Bearer realm="agentops"'
        for word in (b"acme", b"checkout", b"search_tasks", w.SECRET.encode()):
            assert word not in response.content


def test_a_key_without_read_is_403_and_another_project_404(world, ingest_key, read_key):
    assert rpc(keyed(ingest_key), LIST_TOOLS).status_code == 403
    assert keyed(ingest_key).get("/mcp").status_code == 403
    wrong = keyed(read_key).post("/mcp?project=globex", json.dumps(LIST_TOOLS), content_type="application/json",
                                 HTTP_ACCEPT=ACCEPT)
    assert wrong.status_code == 404 and w.SECRET.encode() not in wrong.content


def test_only_post_is_served_no_stream_is_ever_opened(world, read_key):
    client = keyed(read_key)
    for method in (client.get, client.delete, client.put):
        response = method("/mcp", HTTP_ACCEPT="text/event-stream")
        assert response.status_code == 405 and "POST" in response["Allow"]
        assert not response.streaming


def test_a_read_key_lists_the_tools_and_calls_them_in_its_own_project(world, read_key):
    client = keyed(read_key)
    listed = rpc(client, LIST_TOOLS)
    assert listed.status_code == 200 and listed["Content-Type"] == "application/json"
    tools = {t["name"]: t for t in listed.json()["result"]["tools"]}
    assert set(tools) == {"search_tasks", "explain_task", "compare_tasks", "critical_path", "latency_percentiles",
                          "list_findings", "compare_releases", "get_session", "device_status"}
    assert "project" not in tools["search_tasks"]["inputSchema"]["properties"]  # from the key, never an argument
    assert all(t["annotations"]["readOnlyHint"] for t in tools.values())
    answer = rpc(client, call("explain_task", {"task_id": "run-0"})).json()["result"]
    assert not answer["isError"]
    data = json.loads(answer["content"][0]["text"])
    assert data["project"] == "acme" and data["task"]["name"] == "checkout"
    other = rpc(client, call("explain_task", {"task_id": "globex-only"})).json()["result"]
    assert other["isError"] and "no such task 'globex-only'" in other["content"][0]["text"]


def test_bad_requests_are_errors_in_the_protocol_never_500(world, read_key):
    client = keyed(read_key)
    for message in [call("search_tasks", {"limit": "lots"}), call("search_tasks", {"sort": "name"}),
                    call("explain_task", {}), call("no_such_tool", {}), call("critical_path", {"task_id": 7}),
                    {"jsonrpc": "2.0", "id": 3, "method": "no/such/method"}]:
        response = rpc(client, message)
        assert response.status_code < 500, (message, response.content)
        body = response.json()
        assert body.get("error") or body["result"]["isError"], body
    garbled = client.post("/mcp", b"{not json", content_type="application/json", HTTP_ACCEPT=ACCEPT)
    assert 400 <= garbled.status_code < 500
    too_big = client.post("/mcp", b" " * (300 * 1024), content_type="application/json", HTTP_ACCEPT=ACCEPT)
    assert too_big.status_code == 413


def test_a_member_session_reads_its_project_with_csrf_as_on_the_read_api(world, project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert rpc(browser, LIST_TOOLS).status_code == 403  # no CSRF token: a page of another site cannot call it
    relaxed = Client()
    relaxed.force_login(user)
    data = json.loads(rpc(relaxed, call("search_tasks", {"limit": 1})).json()["result"]["content"][0]["text"])
    assert data["project"] == "acme"


def test_a_tool_call_is_cut_off_after_its_sql_time(world, project, monkeypatch):
    from django.db import connection, transaction
    from mcp.server.mcpserver.exceptions import ToolError

    from analysis.mcp import server

    def slow_tool(*, project):
        with transaction.atomic(), connection.cursor() as cursor:  # as release_compare reads
            cursor.execute("SELECT pg_sleep(5)")

    monkeypatch.setattr(server, "TOOL_TIMEOUT_SECONDS", 0.3)
    token = server._caller.set(server.Caller(project=project))
    try:
        with pytest.raises(ToolError, match=r"slow_tool took longer than 0.3 s: narrow the filters"):
            server._run_tool(slow_tool, {})
    finally:
        server._caller.reset(token)
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"  # the connection serves the next request unbounded, as before
