"""Ids are the sender's: a task, step, session, release, device or environment id may hold any
printable character ("/", "..", "%2F", "?", "#", "~", quotes, markup, other scripts). Every page
and API that shows one links to it and opens it; none answers 5xx (one task id "pin/1" used to
make /tasks answer 500 for the whole project)."""

from __future__ import annotations

import json
import string
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils.html import escape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentops.client import _segment
from ingest.ids import from_segment, to_segment
from ingest.models import Task

START, MID, END = "2026-11-01T10:00:00Z", "2026-11-01T10:00:01Z", "2026-11-01T10:00:02Z"

TRICKY = ["pin/1", "/", "//", ".", "..", "...", "a/../b", "../../admin", "%2F", "a%2Fb", "~2F", "~",
          "~7E", "?x=1#y", "#", "a b", "\\", "tasks.csv", "x.json", "<script>alert(1)</script>",
          "'\"", "ｂob", "日本語/タスク", "emoji 🚀/1", string.printable.strip()[:120]]
printable_ids = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FFF,
                                               blacklist_categories=("Cs", "Cc")),
                        min_size=1, max_size=40).filter(lambda s: s.strip() == s and s)


@given(st.text(min_size=1, max_size=60))
def test_a_segment_has_no_slash_and_decodes_to_the_id(value):
    segment = to_segment(value)
    assert "/" not in segment and set(segment) != {"."}
    assert from_segment(segment) == value


@pytest.fixture
def browser(client, db):
    user = User.objects.create_superuser("ids-admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def ingest(client, key, ident: str) -> None:
    events = [
        {"type": "task", "task_id": ident, "name": ident, "release": ident, "environment": ident,
         "session_id": ident, "started_at": START, "ended_at": END},
        {"type": "step", "task_id": ident, "step_id": ident, "kind": "llm", "name": ident, "model": ident,
         "device": ident, "started_at": START, "ended_at": MID, "input_tokens": 10, "output_tokens": 5},
        {"type": "step", "task_id": ident, "step_id": ident + "-tool", "parent_step_id": ident,
         "kind": "tool", "name": "lookup", "tool_name": ident, "tool_args": {"id": ident},
         "started_at": MID, "ended_at": END},
        {"type": "resource", "device": ident, "vendor": "nvidia", "hardware": "H100", "ts": MID,
         "metrics": {"utilization": 0.5}},
    ]
    r = client.post("/api/v1/ingest", json.dumps({"events": events}), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 200 and r.json()["rejected"] == [], r.content


def opened(client, ident: str, read_key: str) -> dict[str, int]:
    """Every URL that shows or opens the id, by its status."""
    q = {"release": ident, "environment": ident, "session_id": ident, "q": ident, "model": ident,
         "tool": ident, "device": ident}
    urls = [reverse("tasks"), reverse("tasks") + "?sort=-started_at",
            reverse("tasks-csv"), reverse("sessions"), reverse("latency"), reverse("devices"),
            reverse("overview"), reverse("compare") + "?" + urlencode([("task", ident), ("task", ident)]),
            reverse("task-detail", args=[ident]), reverse("task-waterfall", args=[ident]),
            reverse("step-detail", args=[ident, ident]), reverse("task-compare", args=[ident]) + "?against=typical",
            reverse("task-compare-json", args=[ident]) + "?against=typical", reverse("task-live", args=[ident]),
            reverse("session-detail", args=[ident]),
            reverse("api-task-detail", args=[ident]), reverse("api-task-diff", args=[ident]) + "?against=typical",
            reverse("api-session-detail", args=[ident])]
    statuses = {}
    for url in urls:
        statuses[url] = client.get(url, HTTP_AUTHORIZATION=f"Bearer {read_key}" if "/api/" in url else "").status_code
    for name, value in q.items():
        url = reverse("tasks")
        statuses[f"{url}?{name}"] = client.get(url, {name: value}).status_code
        api = reverse("api-task-list")
        statuses[f"{api}?{name}"] = client.get(api, {name: value},
                                               HTTP_AUTHORIZATION=f"Bearer {read_key}").status_code
    return statuses


def assert_opens(client, ident: str, read_key: str) -> None:
    statuses = opened(client, ident, read_key)
    assert not {u: s for u, s in statuses.items() if s >= 500}, (ident, statuses)
    for name in ("task-detail", "task-waterfall", "session-detail", "step-detail"):
        args = [ident, ident] if name == "step-detail" else [ident]
        assert statuses[reverse(name, args=args)] == 200, (ident, name, statuses)
    # The task list links to the task, and the link opens it.
    page = client.get(reverse("tasks")).content.decode()
    assert escape(reverse("task-detail", args=[ident])) in page
    # The read client (agentops.client) builds the same paths without Django.
    assert client.get(f"/tasks/{_segment(ident)}/waterfall.json").status_code == 200


@pytest.mark.parametrize("ident", TRICKY)
def test_tricky_ids_are_linked_and_opened_everywhere(browser, project, ingest_key, read_key, ident):
    ingest(browser, ingest_key, ident)
    assert Task.objects.get(project=project).task_id == ident
    assert_opens(browser, ident, read_key)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ident=printable_ids)
def test_any_printable_id_opens_without_5xx(browser, project, ingest_key, read_key, ident):
    Task.objects.filter(project=project).delete()
    ingest(browser, ingest_key, ident)
    assert_opens(browser, ident, read_key)
