"""The MCP server: the dashboard's answers (tasks, typical-run diffs, critical paths, latency,
findings, release comparisons, sessions, devices) as tools an assistant can call (docs/mcp.md)."""
