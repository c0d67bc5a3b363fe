"""Latency of every MCP tool against a running agentops, through the SDK's own client, as an
assistant sees it (docs/mcp.md has the figures on the demo):

    .venv/bin/python -m bench.mcp_tools --url http://127.0.0.1:8000/mcp --key-file .data/demo-ingest-key

It takes its ids from the project's own answers (the newest tasks, the slowest, a session, the
releases), calls each tool --repeat times and prints the first call and the median, in ms, with
the size of the answer. Nothing is written: every tool reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def run(url: str, key: str, repeat: int) -> list[tuple[str, float, float, int]]:
    rows = []
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
                Client(streamable_http_client(url, http_client=http)) as client):

        async def timed(name: str, args: dict) -> dict:
            times, text = [], ""
            for _ in range(repeat):
                started = time.monotonic()
                result = await client.call_tool(name, args)
                times.append(1000 * (time.monotonic() - started))
                text = result.content[0].text
                if result.is_error:
                    raise SystemExit(f"{name} {args}: {text}")
            label = name + (f" {next(iter(args.values()))}" if name == "latency_percentiles" else "")
            rows.append((label, times[0], statistics.median(times), len(text)))
            return json.loads(text)

        newest = (await timed("search_tasks", {"limit": 50}))["tasks"]
        slowest = (await timed("search_tasks", {"sort": "-duration_ms", "limit": 5}))["tasks"]
        oldest = (await timed("search_tasks", {"sort": "started_at", "limit": 5}))["tasks"]
        if not newest:
            raise SystemExit("the project has no tasks")
        task, other = slowest[0]["task_id"], newest[0]["task_id"]
        await timed("explain_task", {"task_id": task})
        await timed("compare_tasks", {"task_id": task, "other_task_id": other})
        await timed("critical_path", {"task_id": task})
        for group in ("task", "kind", "name", "tool", "model", "device", "session"):
            await timed("latency_percentiles", {"group_by": group})
        await timed("list_findings", {"limit": 50})
        first, last = oldest[0]["release"], newest[0]["release"]
        if first and last and first != last:
            await timed("compare_releases", {"a": first, "b": last})
        session = next((t["session_id"] for t in newest if t.get("session_id")), "")
        if session:
            await timed("get_session", {"session_id": session})
        await timed("device_status", {})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/mcp")
    parser.add_argument("--key", help="a project key with the read scope")
    parser.add_argument("--key-file", help="a file holding the key (e.g. .data/demo-ingest-key)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    key = args.key or (Path(args.key_file).read_text().strip() if args.key_file else "")
    if not key:
        parser.error("--key or --key-file")
    rows = asyncio.run(run(args.url, key, max(args.repeat, 1)))
    print(f"{'tool':<30} {'first ms':>9} {'median ms':>10} {'chars':>7}")
    for name, first, median, chars in rows:
        print(f"{name:<30} {first:>9.0f} {median:>10.0f} {chars:>7}")
    print(f"slowest first call: {max(r[1] for r in rows):.0f} ms; slowest median: {max(r[2] for r in rows):.0f} ms")


if __name__ == "__main__":
    main()
