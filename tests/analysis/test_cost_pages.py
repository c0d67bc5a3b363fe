"""Token cost where latency is shown: task page, task list, overview, release comparison (page
and API); and the chart JSON read with a key (agentops.client's figures)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from analysis.models import ModelPrice
from tests.analysis.factories import T0, analyse, make_step, make_task

XSS = "<script>window.pwned=1</script>"


@pytest.fixture
def member(project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def priced(project):
    ModelPrice.objects.create(model="llama-70b", input_per_million=Decimal("0.6"), output_per_million=Decimal("0.8"),
                              effective_from=T0 - timedelta(days=1))
    for i, release in enumerate(["v1", "v1", "v2", "v2"]):
        task = make_task(project, f"t{i}", release=release, start=T0 + timedelta(minutes=i), session_id="sess-1",
                         duration_ms=1000.0 + 200 * i)
        make_step(task, "plan", kind="llm", name="chat", model="llama-70b", input_tokens=1000, output_tokens=100 * (i + 1))
        make_step(task, "tool", kind="tool", offset_ms=300, name="search")
        if release == "v2":
            make_step(task, "check", kind="llm", name="verify", offset_ms=500, model="llama-70b", input_tokens=500,
                      output_tokens=10)
        analyse(task)
    odd = make_task(project, "unpriced", release="v2", start=T0 + timedelta(minutes=9))
    make_step(odd, "plan", kind="llm", name="chat", model=XSS, input_tokens=10, output_tokens=10)
    return project


def test_the_task_page_shows_the_cost_and_its_session(member, priced):
    html = member.get("/tasks/t0").content.decode()
    assert 'id="task-cost"' in html and "$0.00068" in html  # (1000 × 0.6 + 100 × 0.8) / 1e6
    # four tasks of sess-1: 0.00068 + 0.00076 + (0.00084 + 0.000308) + (0.00092 + 0.000308)
    assert "sess-1" in html and "· 4 tasks · $0.00382" in html


def test_an_unpriced_model_shows_no_price_never_zero_and_its_name_escaped(member, priced):
    html = member.get("/tasks/unpriced").content.decode()
    assert ">no price" in html and "$0<" not in html
    assert XSS not in html and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html


def test_the_task_list_has_a_cost_column(member, priced):
    html = member.get("/tasks").content.decode()
    assert "<th class=\"num\">Cost</th>" in html
    assert "$0.00068" in html and "no price" in html


def test_the_overview_fetches_its_cost_apart(member, priced):
    html = member.get("/").content.decode()
    assert 'id="kpi-cost"' in html and "/charts/overview-cost.json" in html
    body = member.get("/charts/overview-cost.json").json()
    assert body["total"] == "$0.00382 + no price for 1 LLM step"
    assert body["title"] == f"no price for {XSS}"  # JSON: the page sets it as text
    assert body["per_task"] == "$0.000763"  # 0.003816 / 5 tasks
    rows = {r["release"]: r for r in body["releases"]}
    assert rows["v1"]["cost"] == "$0.00144" and rows["v1"]["tasks"] == 2  # 0.00068 + 0.00076
    assert rows["v2"]["cost"].startswith("$0.00238 + no price")
    only_v1 = member.get("/charts/overview-cost.json", {"release": "v1"}).json()
    assert only_v1["total"] == "$0.00144" and [r["release"] for r in only_v1["releases"]] == ["v1"]
    assert member.get("/charts/overview-cost.json", {"since": "nope"}).status_code == 400


def test_release_comparison_shows_the_cost_delta_per_task_and_per_step(member, priced):
    response = member.get("/releases/compare", {"a": "v1", "b": "v2"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="cost-per-task"' in html and 'id="cost-per-llm-step"' in html
    assert "llm:verify" in html and 'id="cost-steps"' in html
    # per task: (0.00084 + 0.000308 + 0.00092 + 0.000308) / 3 tasks of v2 − 0.00072; the unpriced call is named
    assert "+$0.0000720" in html and "leave out 0 / 1 LLM calls of models with no price" in html


def test_the_compare_api_carries_the_cost(priced, read_key):
    body = Client().get("/api/v1/releases/compare", {"a": "v1", "b": "v2"},
                        HTTP_AUTHORIZATION=f"Bearer {read_key}").json()
    cost = body["cost"]
    assert cost["a"]["per_task_usd"] == pytest.approx(0.00072)
    assert cost["b"]["unpriced_llm_steps"] == 1 and cost["b"]["unpriced_models"] == [XSS]
    assert cost["per_task_delta_usd"] == pytest.approx(0.000072)
    assert {r["key"] for r in cost["steps"]} == {"llm:chat", "llm:verify"}


def test_chart_json_answers_a_read_key_of_its_own_project_only(priced, read_key, ingest_key, other_keys):
    client = Client()
    ok = client.get("/charts/latency.json", HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert ok.status_code == 200 and "task_histogram" in ok.json()
    waterfall = client.get("/tasks/t0/waterfall.json", HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert waterfall.status_code == 200
    assert client.get("/charts/latency.json", HTTP_AUTHORIZATION=f"Bearer {ingest_key}").status_code == 403
    assert client.get("/charts/latency.json", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert client.get("/charts/latency.json", {"project": "acme"},
                      HTTP_AUTHORIZATION=f"Bearer {other_keys['read']}").status_code == 404
    assert client.get("/tasks/t0/waterfall.json", HTTP_AUTHORIZATION=f"Bearer {other_keys['read']}").status_code == 404
    assert client.get("/charts/latency.json").status_code == 302  # no key, no login: to the login page


def test_the_task_api_carries_the_cost(priced, read_key):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {read_key}")
    page = {t["task_id"]: t for t in client.get("/api/v1/tasks").json()["results"]}
    assert page["t0"]["cost_usd"] == pytest.approx(0.00068) and page["t0"]["llm_steps"] == 1
    assert page["unpriced"]["cost_usd"] is None and page["unpriced"]["unpriced_llm_steps"] == 1
    detail = client.get("/api/v1/tasks/t2").json()
    assert detail["cost_usd"] == pytest.approx(0.00084 + 0.000308) and detail["unpriced_llm_steps"] == 0
    assert len(detail["steps"]) == 3  # the spliced steps are still there
