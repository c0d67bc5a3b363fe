"""The alerts API over HTTP: CRUD, validation that names the field, scopes and tenancy."""

from __future__ import annotations

import pytest
import requests

from analysis.alerts.models import AlertEvent, AlertRule
from ingest.models import IngestKey

from .conftest import NOW

RULE = {"name": "checkout p95 over 5 s", "metric": "task_duration_p95", "comparator": "gt",
        "threshold": 5000, "window_minutes": 10, "for_minutes": 10, "min_samples": 20,
        "filters": {"task_name": "checkout-agent", "environment": "production"},
        "channels": [{"type": "webhook", "url": "https://hooks.example.com/x", "secret": "s3cret"}]}


@pytest.fixture
def api(live_server):
    def call(method, key, path, body=None, **params):
        return requests.request(method, f"{live_server.url}/api/v1/alerts{path}", json=body, params=params,
                                headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=30)
    return call


@pytest.fixture
def admin_key(project, make_key):
    return make_key(project, IngestKey.SCOPE_ADMIN, IngestKey.SCOPE_READ)


def test_rule_crud_round_trip(api, project, admin_key, read_key):
    created = api("POST", admin_key, "/rules", RULE)
    assert created.status_code == 201, created.text
    rule = created.json()
    assert rule["state"] == "ok" and rule["filters"] == RULE["filters"]
    assert rule["channels"] == [{"type": "webhook", "url": "https://hooks.example.com/x", "secret": "********"}]
    assert [r["id"] for r in api("GET", read_key, "/rules").json()] == [rule["id"]]
    patched = api("PATCH", admin_key, f"/rules/{rule['id']}", {"threshold": 6000, "muted": True,
                                                              "channels": rule["channels"]})
    assert patched.status_code == 200, patched.text
    assert patched.json()["threshold"] == 6000 and patched.json()["muted"] is True
    # Reading the masked secret back and sending it again keeps the real one.
    assert AlertRule.objects.get(pk=rule["id"]).channels[0]["secret"] == "s3cret"
    assert api("GET", read_key, f"/rules/{rule['id']}").json()["threshold"] == 6000
    assert api("DELETE", admin_key, f"/rules/{rule['id']}").status_code == 204
    assert api("GET", read_key, f"/rules/{rule['id']}").status_code == 404


@pytest.mark.parametrize("change,field,words", [
    ({"metric": "p95"}, "metric", "valid choice"),
    ({"comparator": "ge"}, "comparator", "valid choice"),
    ({"threshold": "fast"}, "threshold", "number"),
    ({"window_minutes": 0}, "window_minutes", "greater than or equal to 1"),
    ({"filters": {"team": "x"}}, "filters", "team"),
    ({"filters": {"step_kind": "gpu"}}, "filters", "step_kind"),
    ({"channels": [{"type": "webhook", "url": "ftp://x"}]}, "channels", "[0].url"),
    ({"channels": [{"type": "email", "to": "not-an-address"}]}, "channels", "[0].to"),
    ({"channels": [{"type": "sms"}]}, "channels", "[0].type"),
    ({"finding_kind": "slow_step"}, "finding_kind", "finding_rate"),
    ({"baseline": "release"}, "baseline_release", "required"),
    ({"name": ""}, "name", "blank"),
])
def test_invalid_rules_are_refused_naming_the_field(api, admin_key, change, field, words):
    r = api("POST", admin_key, "/rules", {**RULE, **change})
    assert r.status_code == 400
    assert field in r.json(), r.json()
    assert words in " ".join(map(str, r.json()[field]))
    assert not AlertRule.objects.exists()


def test_keys_need_the_right_scope(api, project, ingest_key, read_key):
    assert api("GET", ingest_key, "/rules").status_code == 403
    assert api("POST", read_key, "/rules", RULE).status_code == 403
    assert api("GET", None, "/rules").status_code in (401, 403)
    assert not AlertRule.objects.exists()


def test_another_projects_rules_and_events_are_invisible(api, project, other_project, other_keys,
                                                         make_key, admin_key):
    theirs = AlertRule.objects.create(project=other_project, name="theirs", metric="error_rate", threshold=5)
    AlertEvent.objects.create(rule=theirs, state="firing", threshold=5, window_start=NOW, window_end=NOW, at=NOW)
    mine = api("POST", admin_key, "/rules", RULE).json()
    assert [r["name"] for r in api("GET", admin_key, "/rules").json()] == [RULE["name"]]
    for method in ("GET", "PATCH", "DELETE"):
        assert api(method, admin_key, f"/rules/{theirs.pk}", {"threshold": 1}).status_code == 404
    assert api("GET", admin_key, "/events", rule=theirs.pk).status_code == 404
    assert api("GET", admin_key, "/events").json()["results"] == []
    assert api("GET", other_keys["read"], f"/rules/{mine['id']}").status_code == 404
    assert api("GET", admin_key, "/rules", project="globex").status_code == 404
    theirs.refresh_from_db()
    assert theirs.threshold == 5


def test_events_list_the_history_of_one_rule_with_deliveries(api, project, admin_key, store):
    from datetime import timedelta

    from analysis.alerts.evaluation import rules_evaluate

    rule = api("POST", admin_key, "/rules", {**RULE, "for_minutes": 0, "min_samples": 5,
                                            "channels": [{"type": "email", "to": ["o@example.com"]}]}).json()
    other = api("POST", admin_key, "/rules", {**RULE, "name": "quiet", "threshold": 60_000}).json()
    store(project, [9000.0] * 10, start=NOW - timedelta(minutes=5))
    rules_evaluate(now=NOW)
    body = api("GET", admin_key, "/events", rule=rule["id"]).json()
    [event] = body["results"]
    assert event["state"] == "firing" and event["rule"] == rule["id"] and event["sample_count"] == 10
    assert event["deliveries"][0]["channel"] == "email" and event["deliveries"][0]["ok"] is True
    assert api("GET", admin_key, "/events", rule=other["id"]).json()["results"] == []
    assert api("GET", admin_key, "/events", rule="x").status_code == 400


def test_the_endpoints_are_in_the_openapi_schema(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/v1/alerts/rules", "/api/v1/alerts/rules/{rule_id}", "/api/v1/alerts/events"):
        assert path in schema
