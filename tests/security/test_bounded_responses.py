"""Every page and API response stays under the byte bound docs/reliability.md ("Bounded
responses") gives it, on a project stuffed with hostile cardinality (issue #39.3): 20,000
services each with its own scope, an agent whose 1,000-call turn learned 499,500 pairs, and a
task of one 1,000-call turn.

The URLs are every route Django resolves (as tests/security/test_isolation.py enumerates them),
and the bounds are read from the documentation's table: a route missing from the table, or a
bound the table does not state, fails the test, so a new page is bounded and documented at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from analysis.alerts.models import AlertRule
from analysis.models import ModelPrice
from ingest.models import IngestKey, ProjectMembership, Step
from ingest.services import key_create, member_add
from tests.analysis.crowds import insert_services, insert_wide_turn
from tests.analysis.factories import insert_big_task, make_task
from tests.security.test_isolation import PARAM, routed_paths

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
UNITS = {"B": 1, "KB": 1000, "MB": 1000**2}
ROW = re.compile(r"^\| `(/[^`]*)` \| ([^|]+) \| ([^|]+) \|\s*$")


def documented_bounds() -> dict[str, str]:
    """route (as `/agents/<name>`) → its bound, from the table under "## Bounded responses"."""
    text = DOC.read_text().split("## Bounded responses", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(3).strip() for line in text.splitlines() if (m := ROW.match(line))}


def bound_bytes(bound: str, *, steps: int) -> int | None:
    """"256 KB" → 256,000; "64 KB + 2 KB a step" → for a task of `steps` steps; "streamed" → None."""
    if bound.startswith("streamed"):
        return None
    m = re.fullmatch(r"([\d,.]+) (B|KB|MB)(?: \+ ([\d,.]+) (B|KB|MB) a step)?", bound)
    assert m, f"bound {bound!r}: write it as 'N KB', 'N KB + M KB a step' or 'streamed …'"
    total = float(m.group(1).replace(",", "")) * UNITS[m.group(2)]
    if m.group(3):
        total += float(m.group(3).replace(",", "")) * UNITS[m.group(4)] * steps
    return int(total)


# The query a route needs to answer more than a 400 (besides ?project=).
QUERIES = {
    "/api/v1/search/values": {"field": "tool"},
    "/api/v1/releases/compare": {"a": "v1", "b": "v2"},
    "/releases/compare": {"a": "v1", "b": "v2"},
    "/compare": {"task": ["wide-task", "wide-task"]},
    "/tasks/<task_id>/compare": {"against": "typical"},
    "/tasks/<task_id>/compare.json": {"against": "typical"},
    "/tasks/<task_id>/search.json": {"q": "call"},
}


def doc_route(route: str) -> str:
    return "/" + PARAM.sub(lambda m: f"<{m.group(1)}>", route)


@pytest.fixture
def stuffed(project):
    insert_services(project, services=20_000)
    insert_wide_turn(project, "wide-agent", calls=1000)
    task = insert_big_task(project, "wide-task", turns=1, per_turn=1000, name="wide-agent")
    make_task(project, "wide-task-v2", release="v2", name="wide-agent")
    task.session_id = "wide-session"
    task.save(update_fields=["session_id"])
    user = get_user_model().objects.create_user("ana", password="pw")
    member_add(project=project, user=user, role=ProjectMembership.ROLE_ADMIN)
    rule = AlertRule.objects.create(project=project, name="p95", metric="task_duration_p95", threshold=1.0)
    key, _ = key_create(project=project, scopes=[IngestKey.SCOPE_READ])
    price = ModelPrice.objects.create(model="m", input_per_million=1, output_per_million=2,
                                      effective_from=task.started_at)
    values = {"task_id": task.task_id, "step_id": "s0.500", "rule_id": rule.pk, "session_id": "wide-session",
              "name": "wide-agent", "project": project.name, "prefix": key.prefix, "user_id": user.pk,
              "entity": "steps", "price_id": price.pk}
    return {"user": user, "values": values, "steps": Step.objects.filter(task=task).count()}


def test_every_response_stays_under_its_documented_bound(client, project, stuffed):
    bounds = documented_bounds()
    routes = {doc_route(r): r for r in routed_paths() if not r.startswith("admin/")}
    assert set(routes) - set(bounds) == set(), "document these routes' bounds in docs/reliability.md"
    assert set(bounds) - set(routes) == set(), "these documented routes no longer exist"
    client.force_login(stuffed["user"])
    over, sizes = [], {}
    for route, pattern in sorted(routes.items()):
        limit = bound_bytes(bounds[route], steps=stuffed["steps"])
        if limit is None:
            continue
        url = "/" + PARAM.sub(lambda m: str(stuffed["values"][m.group(1)]), pattern)
        response = client.get(url, {"project": project.name, **QUERIES.get(route, {})})
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code < 500, f"GET {url}: {response.status_code}"
        sizes[route] = (response.status_code, len(body), limit)
        if len(body) > limit:
            over.append(f"{route}: {len(body):,} B > {limit:,} B")
    assert sizes["/api/v1/agents/<name>"][0] == sizes["/api/v1/instrumentation"][0] == 200
    for route, (status, size, limit) in sizes.items():
        print(f"{route:55} {status} {size:>10,} B  (bound {limit:,})")
    assert not over, over
