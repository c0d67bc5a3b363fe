"""Where a name leads: a tool or a model to the task list filtered by it, a device or an
inference server to the Devices page at that host, an agent to its call graph, a session to its
turns. One definition for the pages, the step panel and the template filter `entity_link`
(docs/ui.md, "The step panel"); every link keeps the page's global filters."""

from __future__ import annotations

from urllib.parse import urlencode

from django.urls import reverse

KINDS = ("tool", "model", "device", "server", "agent", "session")


def entity_url(kind: str, name: str, params: dict[str, str] | None = None) -> str:
    """The page of `name` (a tool, model, device, server, agent or session); "" for an empty
    name or an unknown kind."""
    if not name or kind not in KINDS:
        return ""
    query = dict(params or {})
    if kind in ("tool", "model"):
        query.pop("cursor", None)
        query[kind] = name
        return reverse("tasks") + "?" + urlencode(query)
    if kind in ("device", "server"):
        query["device"] = name
        return reverse("devices") + "?" + urlencode(query)
    path = reverse("agent-detail" if kind == "agent" else "session-detail", args=[name])
    return path + ("?" + urlencode(query) if query else "")
