"""GET /api/v1/releases/compare and /api/v1/releases: shape, errors that name the parameter,
and isolation between projects."""

from __future__ import annotations

import pytest

from tests.releases.conftest import make_release

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client):
    def get(key, path="/api/v1/releases/compare", **params):
        return client.get(path, params, HTTP_AUTHORIZATION=f"Bearer {key}")
    return get


def test_compare_returns_per_task_verdicts_and_attribution(api, two_releases, read_key):
    r = api(read_key, a="v1", b="v2")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["a"] == "v1" and body["b"] == "v2" and body["regressed"] is True
    rows = {t["name"]: t for t in body["tasks"]}
    assert rows["checkout"]["regressed"] is True and rows["refund"]["regressed"] is False
    assert [p["q"] for p in rows["checkout"]["percentiles"]] == [50, 90, 95, 99]
    assert set(rows["checkout"]["percentiles"][0]) == {"q", "a_ms", "b_ms", "delta_ms", "delta_pct",
                                                       "ci_low_ms", "ci_high_ms"}
    assert body["attribution"]["steps"][0]["key"] == "tool:fetch_invoice"
    assert body["overall"]["name"] is None


def test_threshold_and_filters_change_the_answer(api, two_releases, read_key):
    lenient = api(read_key, a="v1", b="v2", threshold_pct="500").json()
    assert lenient["regressed"] is False and lenient["threshold_pct"] == 500
    only_refund = api(read_key, a="v1", b="v2", name="refund").json()
    assert [t["name"] for t in only_refund["tasks"]] == ["refund"]
    assert only_refund["filters"] == {"name": "refund"}


@pytest.mark.parametrize("params, message", [
    ({"b": "v2"}, "a: required"),
    ({"a": "v1"}, "b: required"),
    ({"a": "v1", "b": "nope"}, "b: no release 'nope'"),
    ({"a": "v1", "b": "v1"}, "b: must be a different release from a"),
    ({"a": "v1", "b": "v2", "alpha": "2"}, "alpha:"),
    ({"a": "v1", "b": "v2", "threshold_pct": "lots"}, "threshold_pct:"),
    ({"a": "v1", "b": "v2", "since": "yesterday"}, "since:"),
    ({"a": "v1", "b": "v2", "range": "1y"}, "range:"),
])
def test_bad_parameters_answer_400_naming_the_parameter(api, two_releases, read_key, params, message):
    r = api(read_key, **params)
    assert r.status_code == 400
    assert message in str(r.json()["error"])


def test_another_project_sees_nothing_of_these_releases(api, two_releases, other_keys, read_key):
    r = api(other_keys["read"], a="v1", b="v2")
    assert r.status_code == 400 and "a: no release 'v1'" in str(r.json()["error"])
    assert api(other_keys["read"], project="acme", a="v1", b="v2").status_code == 404
    assert api(other_keys["read"], "/api/v1/releases").json() == {"results": []}
    assert [r["name"] for r in api(read_key, "/api/v1/releases").json()["results"]] == ["v2", "v1"]


def test_keys_without_read_scope_and_anonymous_callers_are_refused(api, client, two_releases, ingest_key):
    assert api(ingest_key, a="v1", b="v2").status_code == 403
    assert client.get("/api/v1/releases/compare", {"a": "v1", "b": "v2"}).status_code in (401, 403)


def test_release_list_api(api, project, read_key):
    make_release(project, "v1", 25, seed=1)
    body = api(read_key, "/api/v1/releases").json()
    assert body["results"][0]["name"] == "v1" and body["results"][0]["tasks"] == 25
    assert body["results"][0]["sparkline"]


def test_compare_is_in_the_openapi_schema(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/releases/compare" in schema and "release_compare" in schema
    assert "threshold_pct" in schema and "ci_low_ms" in schema


def test_error_body_is_one_readable_message(api, two_releases, read_key):
    assert api(read_key, a="v1").json() == {"error": "b: required (the name of a release)"}
