"""`manage.py mcp --project P` driven by the SDK's stdio client: the same tools, project P only."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from analysis.mcp.tools import OUTPUT_CHARS
from tests.analysis.mcp import world as w

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


async def calls(env: dict, project: str, wanted) -> list:
    server = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp", "--project", project],
                                   env=env, cwd=str(ROOT))
    out = []
    with open(Path(env["AGENTOPS_DATA_DIR"]) / "mcp-stderr.log", "w") as errlog:
        async with Client(stdio_client(server, errlog=errlog)) as client:
            out.append(sorted(t.name for t in (await client.list_tools()).tools))
            for name, args in wanted:
                out.append(await client.call_tool(name, args))
    return out


def test_the_stdio_server_answers_for_its_project_only(stack_env, project, other_project, tmp_path):
    w.build(project, other_project)
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    listed, found, explained, versus, foreign, bad, devices = asyncio.run(calls(stack_env, "acme", [
        ("search_tasks", {"q": "search", "limit": 3}), ("explain_task", {"task_id": "slow-1"}),
        ("compare_tasks", {"task_id": "slow-1", "other_task_id": "run-0"}),
        ("explain_task", {"task_id": "globex-only"}), ("latency_percentiles", {"group_by": "nope"}),
        ("device_status", {})]))
    assert len(listed) == 9 and "critical_path" in listed
    for result in (found, explained, versus, devices):
        text = result.content[0].text
        assert not result.is_error, text
        assert len(text) <= OUTPUT_CHARS and w.SECRET not in text
        assert json.loads(text)["project"] == "acme"
    assert json.loads(explained.content[0].text)["typical_run"]["available"]
    assert foreign.is_error and "no such task 'globex-only'" in foreign.content[0].text
    assert bad.is_error and "group_by" in bad.content[0].text


def test_an_unknown_project_stops_the_command_with_a_message(stack_env, tmp_path):
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "manage.py", "mcp", "--project", "nope"], cwd=ROOT, env=stack_env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "no project 'nope'" in done.stderr and done.stdout == ""
