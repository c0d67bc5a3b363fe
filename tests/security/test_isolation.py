"""Tenant isolation over EVERY URL the product routes: a member or key of project A (acme) never
sees project B's (globex) data, whatever URL, path id or `?project=` it tries.

The URL list is not written by hand: it is enumerated from `django.urls.get_resolver()`, so a
URL added tomorrow is checked tomorrow. Each path parameter is filled with an id of B's object
(`PATH_VALUES`); a parameter this table does not know fails the test, which forces whoever adds
such a URL to say which object it names. B's rows all carry SECRET, and no answer to A may
contain it. Also here: `ingest`-only keys cannot read, revocation applies to the very next
request, and every state-changing POST is refused without a CSRF token.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from analysis.alerts.models import AlertRule
from analysis.models import ModelPrice
from ingest.models import IngestKey, InstrumentationCount, ProjectMembership, Step, Task
from ingest.services import key_create, key_revoke, member_add
from tests.analysis.factories import make_finding, make_step, make_task

pytestmark = pytest.mark.django_db

SECRET = "GLOBEX-SECRET"
SHARED_ID = "run-1"          # the same task id in both projects: A must get its own
B_ONLY_ID = "globex-only"
B_SESSION = "globex-session"  # B's tasks' session: A must find no such session
# What each path parameter names, as a function of B's objects.
PATH_VALUES = {
    "task_id": lambda b: B_ONLY_ID,
    "step_id": lambda b: "s1",
    "rule_id": lambda b: str(b["rule"].pk),
    "session_id": lambda b: B_SESSION,
    "name": lambda b: SECRET,  # /agents/<name>: B's agent (its tasks' name)
    "project": lambda b: b["b"].name,  # /projects/<project>/settings/…: B itself
    "prefix": lambda b: b["b_key"].prefix,  # B's key
    "user_id": lambda b: str(b["b_admin"].pk),  # B's member
}
# Path parameters that name a kind of data, not an object of B: only the no-leak check applies.
PATH_KINDS = {
    "entity": lambda b: "steps",  # /api/v1/export/<entity>: the export of the caller's own project
    "price_id": lambda b: str(b["price"].pk),  # model prices are the installation's, not a project's
}
# Open to anyone by design: the login form, logout, and the OpenAPI document (no data in it).
PUBLIC = {"login/", "logout/", "api/schema/", "api/docs"}  # no project data: the schema and its explorer
# Write-only endpoints: a GET is 405 (or 401/403 without an ingest key).
INGEST = {"api/v1/ingest", "v1/traces", "v1/metrics"}
PARAM = re.compile(r"<(?:\w+:)?(\w+)>")
INT_PARAMS = {"rule_id", "user_id", "price_id"}  # <int:…>: any number routes


def routed_paths() -> list[str]:
    """Every non-admin route, with its parameters in <converter:name> form."""
    out = []

    def walk(patterns, prefix):
        for p in patterns:
            route = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                if not route.startswith("admin/"):
                    walk(p.url_patterns, route)
            elif isinstance(p, URLPattern) and not route.startswith("admin/"):
                out.append(route)

    walk(get_resolver().url_patterns, "")
    return sorted(set(out))


def names_b_object(route: str) -> bool:
    return any(name not in PATH_KINDS for name in PARAM.findall(route))


def fill(route: str, b: dict) -> str:
    def value(match):
        name = match.group(1)
        if name in PATH_KINDS:
            return PATH_KINDS[name](b)
        assert name in PATH_VALUES, f"{route}: add '{name}' to PATH_VALUES (which of B's objects does it name?)"
        return PATH_VALUES[name](b)
    return "/" + PARAM.sub(value, route)


@pytest.fixture
def world(project, other_project):
    """A (acme) with a member and keys; B (globex) whose every row carries SECRET."""
    a_task = make_task(project, SHARED_ID, name="acme-checkout")
    make_step(a_task, "s1", name="acme-step")
    for task_id in (SHARED_ID, B_ONLY_ID):
        b_task = make_task(other_project, task_id, name=SECRET, release=SECRET, session_id=B_SESSION)
        make_step(b_task, "s1", name=SECRET, tool_args={"q": SECRET})
        make_finding(b_task, "repeated_tool_call", wasted_ms=10.0, step_ids=["s1"], summary=SECRET)
    rule = AlertRule.objects.create(project=other_project, name=SECRET, metric="task_duration_p95",
                                    threshold=1.0)
    # What B's instrumentation sends (the Instrumentation page's counters), named after B too.
    InstrumentationCount.objects.create(project=other_project, hour=a_task.started_at, service=SECRET,
                                        scope_name=SECRET, kind="tool", spans=2)
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    browser = Client()
    browser.force_login(user)
    keys = {scope: key_create(project=project, scopes=[scope])[1] for scope in IngestKey.SCOPES}
    # B's settings: a key and an admin named after B, a price whose edit form a member may not open.
    b_key, _ = key_create(project=other_project, scopes=[IngestKey.SCOPE_INGEST], name=SECRET)
    b_admin = get_user_model().objects.create_user(SECRET, password="pw")
    member_add(project=other_project, user=b_admin, role=ProjectMembership.ROLE_ADMIN)
    price = ModelPrice.objects.create(model="acme-model", input_per_million=1, output_per_million=2,
                                      effective_from=a_task.started_at)
    return {"rule": rule, "user": user, "browser": browser, "keys": keys, "b": other_project,
            "b_key": b_key, "b_admin": b_admin, "price": price}


def as_key(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def assert_no_leak(response, what: str) -> None:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert SECRET.encode() not in body, f"{what} leaked B's data"
    assert response.status_code < 500, f"{what}: {response.status_code}"


def test_the_url_table_is_not_empty_and_knows_every_parameter(world):
    routes = routed_paths()
    assert len(routes) >= 30, routes
    for route in routes:
        fill(route, world)  # fails naming a parameter nobody mapped


@pytest.mark.parametrize("who", ["member", "read_key", "admin_key"])
def test_no_url_shows_b_to_a_member_or_key(world, who):
    client = world["browser"] if who == "member" else as_key(world["keys"][who.split("_")[0]])
    for route in routed_paths():
        path = fill(route, world)
        for url in (path, f"{path}?project=globex", f"/{route}" if "<" not in route else path):
            response = client.get(url)
            assert_no_leak(response, f"{who} GET {url}")
            if route in PUBLIC or route in INGEST:
                continue
            if names_b_object(route) or "project=globex" in url:
                assert response.status_code in (302, 401, 403, 404, 405), f"{who} GET {url}: {response.status_code}"
    # The same task id in both projects: A reads its own task, never B's.
    shared = client.get(f"/api/v1/tasks/{SHARED_ID}" if who != "member" else f"/tasks/{SHARED_ID}")
    if who != "admin_key" or shared.status_code == 200:
        assert b"acme-checkout" in shared.content
    assert_no_leak(shared, f"{who} shared id")


def test_no_write_through_a_url_touches_b(world):
    rule = world["rule"]
    member, admin = world["browser"], as_key(world["keys"]["admin"])
    for client in (member, admin):
        for method, url in [("post", f"/alerts/{rule.pk}/mute"), ("post", f"/alerts/{rule.pk}/delete"),
                            ("post", f"/alerts/{rule.pk}/edit"),
                            ("delete", f"/api/v1/alerts/rules/{rule.pk}"),
                            ("patch", f"/api/v1/alerts/rules/{rule.pk}")]:
            response = getattr(client, method)(url, data={"name": "hijacked", "muted": "true"},
                                               content_type="application/json"
                                               if method == "patch" else "multipart/form-data; boundary=BoUnDaRy")
            assert response.status_code in (302, 401, 403, 404), f"{method} {url}: {response.status_code}"
    rule.refresh_from_db()
    assert rule.name == SECRET and not rule.muted


def test_an_ingest_key_writes_into_its_own_project_even_with_b_ids(world):
    before = Step.objects.filter(task__project=world["b"]).count()
    event = {"type": "step", "step_id": "s9", "task_id": B_ONLY_ID, "kind": "tool", "name": "x",
             "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:01Z"}
    r = as_key(world["keys"]["ingest"]).post("/api/v1/ingest?project=globex", {"events": [event]},
                                             content_type="application/json")
    assert r.status_code == 200, r.content
    assert Step.objects.filter(task__project=world["b"]).count() == before
    assert Task.objects.filter(project__name="acme", task_id=B_ONLY_ID).exists()


def test_an_ingest_only_key_cannot_read_anything(world):
    client = as_key(world["keys"]["ingest"])
    for route in routed_paths():
        if route in PUBLIC or route in INGEST:
            continue
        response = client.get(fill(route, world).replace(B_ONLY_ID, SHARED_ID))
        assert response.status_code in (302, 401, 403, 404), f"GET {route}: {response.status_code}"
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert b"acme-checkout" not in body


def test_a_revoked_key_is_refused_on_the_very_next_request(world, project):
    plaintext = world["keys"]["read"]
    client = as_key(plaintext)
    assert client.get("/api/v1/tasks").status_code == 200
    key_revoke(key=IngestKey.objects.get(prefix=plaintext.split("_")[1]))
    refused = client.get("/api/v1/tasks")
    assert refused.status_code == 401, refused.content
    assert b"acme-checkout" not in refused.content


def test_every_state_changing_form_refuses_a_post_without_a_csrf_token(world, project):
    rule = AlertRule.objects.create(project=project, name="mine", metric="task_duration_p95", threshold=1.0)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world["user"])
    for route in routed_paths():
        if route in INGEST:
            continue  # key-authenticated, no cookie: CSRF does not apply (and a session gets 403)
        path = "/" + PARAM.sub(lambda m: str(rule.pk) if m.group(1) in INT_PARAMS else SHARED_ID, route)
        response = strict.post(path, {"name": "forged", "project": "acme"})
        assert response.status_code in (403, 405), f"POST {path} without CSRF: {response.status_code}"
    rule.refresh_from_db()
    assert rule.name == "mine" and not rule.muted
    assert AlertRule.objects.filter(name="forged").count() == 0


def test_admin_pages_refuse_a_member_who_is_not_staff(world):
    from django.contrib import admin

    b_task = Task.objects.get(project=world["b"], task_id=B_ONLY_ID)
    for model in admin.site._registry:
        meta = model._meta
        for url in (f"/admin/{meta.app_label}/{meta.model_name}/",
                    f"/admin/{meta.app_label}/{meta.model_name}/{b_task.pk}/change/"):
            response = world["browser"].get(url)
            assert response.status_code == 302 and "/login" in response["Location"], url
            assert_no_leak(response, url)


def test_no_url_500s_on_a_nul_byte_in_its_path_or_query(world):
    """PostgreSQL text cannot hold NUL: a NUL in a project name, id or filter is a 400."""
    for client in (world["browser"], as_key(world["keys"]["read"])):
        for route in routed_paths():
            path = "/" + PARAM.sub("a%00b", route)
            for url in (path, f"{path}?project=ac%00me", f"{path}?q=x%00"):
                response = client.get(url)
                assert response.status_code < 500, f"GET {url}: {response.status_code}"
                if "%00" in url and route not in PUBLIC:
                    assert response.status_code == 400, f"GET {url}: {response.status_code}"
