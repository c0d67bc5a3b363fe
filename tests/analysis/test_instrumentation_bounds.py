"""/instrumentation and GET /api/v1/instrumentation past their cardinality limits (issue #39.3:
96,000 spans, each with its own service and scope, made a 227 MB page in 94 s): the busiest
MAX_SERVICES services, then one block "other (N services)" whose scopes are summed across them;
per service the busiest MAX_SCOPES scopes, then one row "other (N scopes)". No span is lost in
the grouping, and `service=` lists any one service alone."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from analysis.dashboard.instrumentation import MAX_SCOPES, MAX_SERVICES
from ingest.instrumentation import FIELDS
from ingest.models import InstrumentationCount
from tests.analysis.crowds import insert_services
from tests.analysis.factories import T0, make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client, project):
    make_task(project, "t1")  # a page without tasks shows how to send some instead
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client.force_login(user)
    return client


def api(client, key, **params):
    return client.get("/api/v1/instrumentation", params, HTTP_AUTHORIZATION=f"Bearer {key}")


def total_spans(project) -> int:
    return sum(InstrumentationCount.objects.filter(project=project).values_list("spans", flat=True))


def test_20000_services_are_the_busiest_20_and_one_block_of_the_others(client, member, project, read_key):
    insert_services(project, services=20_000)
    r = api(client, read_key)
    body = r.json()
    services = body["services"]
    assert len(services) == MAX_SERVICES + 1 and len(r.content) < 1_000_000
    listed, other = services[:-1], services[-1]
    assert all(s["other_services"] == 0 and len(s["scopes"]) == 1 for s in listed)
    assert [s["spans"] for s in listed] == sorted((s["spans"] for s in listed), reverse=True)
    assert other["service"] is None and other["other_services"] == 20_000 - MAX_SERVICES
    assert len(other["scopes"]) == MAX_SCOPES + 1
    assert other["scopes"][-1]["other_scopes"] == 20_000 - MAX_SERVICES - MAX_SCOPES
    assert other["scopes"][-1]["library"]["key"] == "several"
    assert sum(s["spans"] for s in services) == total_spans(project)  # nothing lost in the grouping
    assert min(s["spans"] for s in listed) >= max(sc["spans"] for sc in other["scopes"][:-1])
    page = member.get("/instrumentation", {"project": project.name})
    assert page.status_code == 200 and len(page.content) < 1_000_000
    html = page.content.decode()
    assert html.count('<section class="instr-service') == MAX_SERVICES + 1
    assert f"other ({20_000 - MAX_SERVICES} services)" in html
    assert f"other ({20_000 - MAX_SERVICES - MAX_SCOPES} scopes)" in html


def test_a_service_of_many_scopes_lists_its_busiest_and_one_row_of_the_others(client, project, read_key):
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO ingest_instrumentationcount (project_id, hour, service, scope_name, scope_version, sdk_name,"
            f" sdk_language, sdk_version, release, environment, kind, spans, {', '.join(FIELDS)})"
            " SELECT %s, %s, 'many', 'openinference.instrumentation.x' || c, '1.0', '', '', '', 'v1', 'prod', 'tool',"
            f" 100 + c, {', '.join('0' for _ in FIELDS)} FROM generate_series(1, 30) c", [project.pk, T0])
    [service] = api(client, read_key).json()["services"]
    assert [s["scope"]["name"] for s in service["scopes"][:MAX_SCOPES]] == [
        f"openinference.instrumentation.x{c}" for c in range(30, 30 - MAX_SCOPES, -1)]
    other = service["scopes"][-1]
    assert other["other_scopes"] == 30 - MAX_SCOPES and other["spans"] == sum(100 + c for c in range(1, 23))
    assert other["kinds"] == {"tool": other["spans"]}
    # Tool arguments on none of the spans: blind in the summed row too, with each library's switch.
    repeated = next(c for c in other["checks"] if c["check"] == "repeated_tool_call")
    assert repeated["status"] == "blind" and "service=" in repeated["fixes"][0]["text"]


def test_any_service_past_the_busiest_is_listed_alone_on_request(client, member, project, read_key):
    insert_services(project, services=200)
    [service] = api(client, read_key, service="svc-7").json()["services"]
    assert service["service"] == "svc-7" and [s["scope"]["name"] for s in service["scopes"]] == ["scope-7"]
    assert api(client, read_key, service="nobody").json()["services"] == []
    page = member.get("/instrumentation", {"project": project.name, "service": "svc-7"}).content.decode()
    assert 'data-service="svc-7"' in page and page.count('<section class="instr-service') == 1
