"""The alerts pages as a logged-in user sees them: create through the form, validation, the
preview, history, mute, delete, CSRF, escaping and tenancy."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from analysis.alerts.models import AlertEvent, AlertRule

FORM = {"name": "checkout p95 over 5 s", "metric": "task_duration_p95", "comparator": "gt",
        "threshold": "5000", "window_minutes": "10", "for_minutes": "10", "min_samples": "20",
        "baseline": "none", "no_data": "keep", "enabled": "on", "filter_task_name": "checkout-agent",
        "filter_environment": "production", "webhook_url": "http://127.0.0.1:9999/hook",
        "webhook_secret": "s3cret", "email_to": "oncall@example.com"}


@pytest.fixture
def member(project, django_user_model):
    user = django_user_model.objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client


def test_a_rule_created_in_the_form_is_the_rule_of_the_issue(member, project):
    r = member.post(f"/alerts/new?project={project.name}", FORM)
    assert r.status_code == 302
    rule = AlertRule.objects.get(project=project)
    assert (rule.metric, rule.comparator, rule.threshold, rule.window_minutes, rule.for_minutes) == \
        ("task_duration_p95", "gt", 5000, 10, 10)
    assert rule.filters == {"task_name": "checkout-agent", "environment": "production"}
    assert rule.channels == [{"type": "webhook", "url": "http://127.0.0.1:9999/hook", "secret": "s3cret"},
                             {"type": "email", "to": ["oncall@example.com"]}]
    assert r["Location"] == f"/alerts/{rule.pk}/"
    page = member.get(r["Location"]).content.decode()
    assert "checkout p95 over 5 s" in page and "s3cret" not in page
    listing = member.get("/alerts/").content.decode()
    assert f'href="/alerts/{rule.pk}/"' in listing and "state-ok" in listing


def test_editing_keeps_the_secret_when_the_mask_is_sent_back(member, project):
    member.post(f"/alerts/new?project={project.name}", FORM)
    rule = AlertRule.objects.get()
    form = member.get(f"/alerts/{rule.pk}/edit").content.decode()
    assert "s3cret" not in form and 'value="********"' in form
    r = member.post(f"/alerts/{rule.pk}/edit", {**FORM, "threshold": "7000", "webhook_secret": "********"})
    assert r.status_code == 302
    rule.refresh_from_db()
    assert rule.threshold == 7000 and rule.channels[0]["secret"] == "s3cret"


def test_form_errors_name_the_field_and_keep_the_input(member, project):
    r = member.post(f"/alerts/new?project={project.name}",
                    {**FORM, "threshold": "five seconds", "window_minutes": "0", "email_to": "nobody"})
    assert r.status_code == 400
    page = r.content.decode()
    assert re.search(r'data-field="threshold">[^<]*number', page)
    assert 'data-field="window_minutes"' in page and 'data-field="channels"' in page
    assert 'value="five seconds"' in page
    assert not AlertRule.objects.exists()


def test_hostile_names_are_escaped(member, project):
    member.post(f"/alerts/new?project={project.name}",
                {**FORM, "name": "<script>alert(1)</script>", "filter_task_name": '"><img src=x onerror=alert(1)>'})
    rule = AlertRule.objects.get()
    for url in ("/alerts/", f"/alerts/{rule.pk}/", f"/alerts/{rule.pk}/edit"):
        page = member.get(url).content.decode()
        assert "<script>alert(1)" not in page and "<img src=x" not in page
        assert "&lt;script&gt;" in page


def test_the_preview_measures_the_form_as_it_stands(member, project, store):
    now = datetime.now(tz=UTC)
    store(project, [9000.0] * 30, start=now - timedelta(minutes=5), spacing=timedelta(seconds=5))
    params = {**FORM, "project": project.name, "min_samples": "5"}
    body = member.get("/alerts/preview", params).json()
    assert body["now"]["breaching"] is True and body["now"]["sample_count"] == 30
    assert body["now"]["value"] == pytest.approx(9000.0)
    values = body["figure"]["data"][0]["y"]
    assert values[-1] == pytest.approx(9000.0) and values[0] is None
    threshold = [t for t in body["figure"]["data"] if t["name"].startswith("threshold")][0]
    assert threshold["y"] == [5000.0, 5000.0]
    bad = member.get("/alerts/preview", {**params, "metric": "nope"})
    assert bad.status_code == 400 and "metric" in bad.json()["errors"]


def test_detail_shows_history_and_the_chart_serves_json(member, project):
    member.post(f"/alerts/new?project={project.name}", FORM)
    rule = AlertRule.objects.get()
    now = datetime.now(tz=UTC)
    AlertEvent.objects.create(rule=rule, state="firing", previous_state="pending", value=9000, threshold=5000,
                              sample_count=30, window_start=now, window_end=now, at=now,
                              link="/tasks?name=checkout-agent")
    page = member.get(f"/alerts/{rule.pk}/").content.decode()
    assert "pending → <span class=\"state state-firing\">firing</span>" in page
    assert 'href="/tasks?name=checkout-agent"' in page
    chart = member.get(f"/alerts/{rule.pk}/chart").json()
    threshold = [t for t in chart["figure"]["data"] if t["name"].startswith("threshold")][0]
    assert threshold["y"] == [5000.0, 5000.0]


def test_mute_and_delete(member, project):
    member.post(f"/alerts/new?project={project.name}", FORM)
    rule = AlertRule.objects.get()
    member.post(f"/alerts/{rule.pk}/mute")
    rule.refresh_from_db()
    assert rule.muted
    assert member.get(f"/alerts/{rule.pk}/delete").status_code == 405
    assert member.post(f"/alerts/{rule.pk}/delete").status_code == 302
    assert not AlertRule.objects.exists()


def test_posts_without_a_csrf_token_are_refused(project, django_user_model):
    user = django_user_model.objects.create_user("eve", password="pw")
    project.members.add(user)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(f"/alerts/new?project={project.name}", FORM).status_code == 403
    api = client.post("/api/v1/alerts/rules", {"name": "x"}, content_type="application/json")
    assert api.status_code == 403
    assert not AlertRule.objects.exists()


def test_a_non_member_cannot_see_or_touch_a_projects_rules(member, other_project):
    theirs = AlertRule.objects.create(project=other_project, name="theirs", metric="error_rate", threshold=5)
    for url in (f"/alerts/{theirs.pk}/", f"/alerts/{theirs.pk}/edit", f"/alerts/{theirs.pk}/chart"):
        assert member.get(url).status_code == 404
    assert member.post(f"/alerts/{theirs.pk}/delete").status_code == 404
    assert member.post(f"/alerts/new?project={other_project.name}", FORM).status_code == 404
    assert not AlertRule.objects.filter(project=other_project).exclude(pk=theirs.pk).exists()
    assert "theirs" not in member.get(f"/alerts/?project={other_project.name}").content.decode()


def test_pages_need_a_login(client, project):
    r = client.get("/alerts/")
    assert r.status_code == 302 and "/login/" in r["Location"]


def test_sparkline_scales_values_and_threshold_into_the_box():
    from analysis.alerts.charts import sparkline_points

    spark = sparkline_points([100.0, None, 300.0], width=100, height=24, threshold=200.0)
    assert spark["points"] == "0.0,22.0 100.0,2.0"  # the gap is skipped, low is at the bottom
    assert spark["threshold_y"] == 12.0 and spark["last"] == (100.0, 2.0)
    assert sparkline_points([None, None])["points"] == ""
