"""Whether a tool acts (changes what it or another tool would answer next) or only reads, from its
name. docs/analysis.md, "Tools that act", says why a name.

Tool annotations would say it outright (MCP's `readOnlyHint` / `destructiveHint`), but they live
in the server's tool list, not on the spans: no instrumentation records them on a tool call today.
The name does: tools are named verb-first by every framework's convention and in the MCP
specification's examples (`get_weather`, `create_issue`, `browser_click`), and the verbs below are
the general vocabulary of state-changing operations (HTTP's POST/PUT/PATCH/DELETE, CRUD's create /
update / delete, a browser's click / type / navigate, a file system's write / move), not words
fitted to any corpus. The first word of the name that is a known verb decides, so that a namespace
(`browser_click`, `mcp__fs__write_file`) does not hide it; a name with no known verb is taken as
a read.
"""

from __future__ import annotations

import re

ACTING_VERBS = frozenset({
    # writes (CRUD, HTTP, files, version control)
    "write", "create", "update", "delete", "remove", "insert", "upsert", "save", "set", "put", "post", "patch",
    "apply", "edit", "modify", "add", "append", "replace", "move", "rename", "copy", "upload", "commit", "push",
    "merge", "deploy", "install", "uninstall", "drop", "truncate", "mkdir", "rm", "mv", "touch",
    # a browser or a UI
    "click", "fill", "type", "press", "submit", "navigate", "goto", "go", "open", "close", "select", "hover", "drag", "scroll", "tap", "swipe", "focus", "login", "logout", "sign",
    # messages and transactions
    "send", "reply", "email", "notify", "publish", "book", "reserve", "cancel", "confirm", "refund",
    "pay", "charge", "transfer", "order", "purchase", "buy", "sell", "approve", "reject", "assign", "schedule",
    "enable", "disable", "start", "stop", "restart", "kill", "reset", "grant", "revoke", "issue", "escalate",
})
READING_VERBS = frozenset({
    "get", "read", "fetch", "search", "find", "list", "lookup", "look", "query", "describe", "view", "show", "load",
    "retrieve", "count", "inspect", "screenshot", "snapshot", "capture", "take", "summarize", "analyze", "compute",
    "calculate", "estimate", "convert", "translate", "validate", "verify", "check", "lint", "diff", "status", "browse",
    "explain", "parse", "extract", "classify", "rank", "rerank", "embed", "recall", "forecast", "weather",
})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def words(name: str) -> list[str]:
    """A tool name's words, lower case: `browser_click`, `browserClick`, `browser.click` → browser, click."""
    return [w.lower() for w in _WORD.findall(name)]


def acts(name: str) -> bool:
    """Whether the tool named `name` acts: the first known verb of its name is an acting one."""
    for word in words(name):
        if word in ACTING_VERBS:
            return True
        if word in READING_VERBS:
            return False
    return False
