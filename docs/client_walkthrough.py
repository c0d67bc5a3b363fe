"""The five slowest tools of release v3 and their p95 by device: the walk-through of docs/client.md,
run against `make demo` (http://127.0.0.1:8000, the demo project's key in .data/demo-ingest-key).

    .venv/bin/python docs/client_walkthrough.py [BASE_URL] [KEY]

Part 1 is the dozen lines a notebook needs; part 2 asks the server for the same numbers the way
the dashboard's Latency page computes them (`/latency?release=v3&group_by=tool[&device=…]`, the
same selector behind `GET /api/v1/latency`) and prints both side by side."""

import sys
from pathlib import Path

import pandas as pd

from agentops.client import Client

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
KEY = sys.argv[2] if len(sys.argv) > 2 else (Path(__file__).parents[1] / ".data" / "demo-ingest-key").read_text().strip()
pd.set_option("display.width", 140)

# --- 1. the notebook: a dozen lines ---------------------------------------------------------------
client = Client(BASE, KEY)
tools = client.steps(release="v3", kind="tool")                         # every tool call of v3 (Parquet)
p95 = tools.groupby("tool_name").duration_ms.quantile(0.95)              # percentile_cont, as the dashboard
slowest = p95.nlargest(5)
llm = client.steps(release="v3", kind="llm")[["task_id", "device"]]     # where each task's LLM calls ran
calls = tools[tools.tool_name.isin(slowest.index)][["task_id", "tool_name", "duration_ms"]].merge(
    llm.drop_duplicates(), on="task_id")
by_device = calls.pivot_table(index="tool_name", columns="device", values="duration_ms",
                              aggfunc=lambda d: d.quantile(0.95)).loc[slowest.index]
print(f"{len(tools):,} tool calls in release v3; the five slowest tools by p95 (ms):")
print(slowest.round(1).to_string())
print("\ntheir p95 (ms) by device (tasks whose LLM calls ran on it):")
print(by_device.round(1).to_string())

# --- 2. the same numbers from the dashboard's own query ---------------------------------------------
page = client.latency(group_by="tool", release="v3").set_index("group")
check = pd.DataFrame({"pandas p95": slowest, "dashboard p95": page.loc[slowest.index, "p95"]})
check["Δ %"] = 100 * (check["dashboard p95"] / check["pandas p95"] - 1)
print("\n/latency?release=v3&group_by=tool (the Latency page's table):")
print(check.round(2).to_string())
worst = 0.0
for device in by_device.columns:
    rows = client.latency(group_by="tool", release="v3", device=device).set_index("group")
    for tool in slowest.index:
        if tool in rows.index and not pd.isna(by_device.loc[tool, device]):
            worst = max(worst, abs(rows.loc[tool, "p95"] / by_device.loc[tool, device] - 1))
print(f"\n/latency?release=v3&group_by=tool&device=<each>: largest difference from pandas {100 * worst:.3f} %")
