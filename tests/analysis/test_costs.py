"""Token cost: the price in force when a step started, "no price" (never 0) for a model without
one, sums per task, session and release, and the price table from a file or the admin."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from analysis import costs
from analysis.filters import TaskFilters
from analysis.models import ModelPrice
from ingest.models import Task
from tests.analysis.factories import T0, make_step, make_task


def price(model: str, inp: str, out: str, start) -> ModelPrice:
    return ModelPrice.objects.create(model=model, input_per_million=Decimal(inp), output_per_million=Decimal(out),
                                     effective_from=start)


@pytest.fixture
def prices(db):
    price("llama-70b", "1", "2", T0 - timedelta(days=10))
    price("llama-70b", "10", "20", T0 + timedelta(hours=1))  # a price rise an hour after T0
    return None


def llm(task, step_id, *, offset_ms=0.0, model="llama-70b", inp=1000, out=100, **extra):
    return make_step(task, step_id, kind="llm", offset_ms=offset_ms, model=model, input_tokens=inp,
                     output_tokens=out, **extra)


def test_a_step_is_priced_at_the_price_in_force_when_it_started(project, prices):
    before = make_task(project, "before", start=T0)
    llm(before, "s1", inp=1_000_000, out=500_000)  # 1 M in × $1 + 0.5 M out × $2
    after = make_task(project, "after", start=T0 + timedelta(hours=2))
    llm(after, "s1", inp=1_000_000, out=500_000)  # × $10 / $20
    found = costs.task_costs(tasks=[before, after])
    assert found[before.pk].usd == pytest.approx(1.0 + 1.0)
    assert found[after.pk].usd == pytest.approx(10.0 + 10.0)
    assert found[after.pk].text == "$20.00" and found[after.pk].complete


def test_the_price_changes_exactly_at_its_effective_instant(project, prices):
    task = make_task(project, "edge", start=T0 + timedelta(hours=1) - timedelta(milliseconds=1))
    llm(task, "old", inp=1_000_000, out=0)  # one millisecond before the rise
    llm(task, "new", offset_ms=1.0, inp=1_000_000, out=0)  # at the rise: the new price
    cost = costs.task_cost(task=task)
    assert cost.usd == pytest.approx(1.0 + 10.0) and cost.llm_steps == 2


def test_a_model_without_a_price_shows_no_price_never_zero(project, prices):
    task = make_task(project, "unpriced")
    llm(task, "s1", model="mixtral")
    cost = costs.task_cost(task=task)
    assert cost.usd is None and cost.unpriced == 1 and cost.unpriced_models == ("mixtral",)
    assert cost.text == "no price" and cost.missing_text == "no price for mixtral"


def test_a_step_before_the_first_price_has_none(project, prices):
    task = make_task(project, "old", start=T0 - timedelta(days=20))
    llm(task, "s1")
    assert costs.task_cost(task=task).text == "no price"


def test_a_partly_priced_task_says_what_it_could_not_price(project, prices):
    task = make_task(project, "mixed")
    llm(task, "a", inp=2_000_000, out=0)
    llm(task, "b", model="mixtral", offset_ms=10)
    llm(task, "c", model="", offset_ms=20)
    cost = costs.task_cost(task=task)
    assert cost.usd == pytest.approx(2.0)
    assert cost.unpriced == 2 and cost.unpriced_models == ("", "mixtral")
    assert cost.text == "$2.00 + no price for 2 LLM steps"
    assert cost.missing_text == "no price for (no model), mixtral"


def test_only_llm_steps_cost_and_missing_token_counts_count_as_zero(project, prices):
    task = make_task(project, "kinds")
    make_step(task, "tool", kind="tool", model="llama-70b", input_tokens=10**6)  # not an LLM step
    llm(task, "no-tokens", inp=None, out=None, offset_ms=5)
    llm(task, "out-only", inp=None, out=1_000_000, offset_ms=10)
    cost = costs.task_cost(task=task)
    assert cost.llm_steps == 2 and cost.usd == pytest.approx(2.0)
    empty = make_task(project, "no-llm")
    make_step(empty, "t", kind="tool")
    assert costs.task_cost(task=empty).text == "–"


def test_small_costs_keep_their_significant_digits():
    assert costs.format_usd(0.000123) == "$0.000123"
    assert costs.format_usd(0.0123) == "$0.0123"
    assert costs.format_usd(1234.5) == "$1,234"
    assert costs.format_usd(0.0) == "$0"
    assert costs.format_usd(None) == "no price"
    assert costs.format_usd(0.00000042) == "$4.20e-07"


def test_session_and_release_costs_add_up_their_tasks(project, other_project, prices):
    for i, release in enumerate(["v1", "v1", "v2"]):
        task = make_task(project, f"t{i}", release=release, session_id="sess-1" if i < 2 else "sess-2",
                         start=T0 + timedelta(minutes=i))
        llm(task, "plan", inp=1_000_000, out=0, name="chat")
        llm(task, "answer", inp=0, out=1_000_000 * (i + 1), offset_ms=10, name="answer")
    make_task(project, "t-nollm", release="v2", start=T0 + timedelta(minutes=5))
    stranger = make_task(other_project, "x", release="v1", session_id="sess-1")
    llm(stranger, "plan", inp=10**9, out=0)
    n, session = costs.session_cost(project=project, session_id="sess-1")
    assert n == 2 and session.usd == pytest.approx((1 + 2) + (1 + 4))
    by_release = costs.cost_by_release(project=project, filters=TaskFilters())
    assert by_release["v1"]["tasks"] == 2 and by_release["v1"]["cost"].usd == pytest.approx(8.0)
    assert by_release["v2"]["tasks"] == 2 and by_release["v2"]["cost"].usd == pytest.approx(1 + 6.0)
    assert by_release["v2"]["per_task"] == pytest.approx(3.5)  # the task without LLM steps counts
    assert by_release["v2"]["per_llm_step"] == pytest.approx(3.5)
    total = costs.filtered_cost(project=project, filters=TaskFilters(release="v1"))
    assert total.usd == pytest.approx(8.0) and total.llm_steps == 4


def test_release_costs_give_the_delta_per_task_per_llm_step_and_per_step_group(project, prices):
    for i, release in enumerate(["v1", "v1", "v2", "v2"]):
        task = make_task(project, f"t{i}", release=release, start=T0 + timedelta(minutes=i))
        llm(task, "plan", inp=1_000_000, out=0, name="chat")
        if release == "v2":
            llm(task, "check", inp=1_000_000, out=0, name="verify", offset_ms=10)
            llm(task, "other", inp=1_000_000, out=0, name="verify", model="mixtral", offset_ms=20)
    tasks = Task.objects.filter(project=project)
    report = costs.release_costs(tasks=tasks, a="v1", b="v2")
    assert report["a"]["per_task_usd"] == pytest.approx(1.0)
    assert report["b"]["per_task_usd"] == pytest.approx(2.0)
    assert report["per_task_delta_usd"] == pytest.approx(1.0) and report["per_task_delta_pct"] == pytest.approx(100)
    assert report["a"]["per_llm_step_usd"] == pytest.approx(1.0) and report["per_llm_step_delta_usd"] == 0
    assert report["b"]["unpriced_llm_steps"] == 2 and report["b"]["unpriced_models"] == ["mixtral"]
    steps = {r["key"]: r for r in report["steps"]}
    assert steps["llm:verify"]["per_task_a_usd"] == 0 and steps["llm:verify"]["per_call_a_usd"] is None and steps["llm:verify"]["per_task_b_usd"] == pytest.approx(1.0)
    assert steps["llm:verify"]["unpriced_b"] == 2
    assert steps["llm:chat"]["per_task_delta_usd"] == 0 and steps["llm:chat"]["per_call_a_usd"] == pytest.approx(1.0)
    assert report["steps"][0]["key"] == "llm:verify"  # the biggest change first


# --- the price table ------------------------------------------------------------------------------


def test_load_prices_from_csv_and_json_and_update_a_known_row(db, tmp_path, capsys):
    csv = tmp_path / "prices.csv"
    csv.write_text("model,input_per_million,output_per_million,effective_from,note\n"
                   "llama-70b,0.59,0.79,2026-01-01,our contract\n"
                   "mixtral,0.24,0.24,2026-06-01T12:00:00+02:00,\n")
    call_command("load_prices", str(csv))
    assert "2 prices added, 0 updated, for 2 models" in capsys.readouterr().out
    mixtral = ModelPrice.objects.get(model="mixtral")
    assert mixtral.effective_from.isoformat() == "2026-06-01T10:00:00+00:00"
    assert ModelPrice.objects.get(model="llama-70b").note == "our contract"
    data = [{"model": "llama-70b", "input_per_million": 0.5, "output_per_million": "0.7",
             "effective_from": "2026-01-01"},
            {"model": "llama-70b", "input_per_million": 0.9, "output_per_million": 1.1,
             "effective_from": "2026-09-01T00:00:00Z"}]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(data, indent=2))
    call_command("load_prices", str(path))
    assert "1 prices added, 1 updated" in capsys.readouterr().out
    assert [(str(p.input_per_million), p.effective_from.month) for p in ModelPrice.objects.filter(model="llama-70b")] \
        == [("0.900000", 9), ("0.500000", 1)]


@pytest.mark.parametrize("name,text,message", [
    ("p.csv", "model,input_per_million,output_per_million,effective_from\nm,1,1,2026-01-01\nm2,abc,1,2026-01-01\n",
     "p.csv line 3: input_per_million: 'abc' is not a number"),
    ("p.csv", "model,input_per_million,output_per_million,effective_from\nm,1,-2,2026-01-01\n",
     "p.csv line 2: output_per_million: must be a number ≥ 0"),
    ("p.csv", "model,input_per_million,output_per_million,effective_from\nm,1,1,last tuesday\n",
     "p.csv line 2: effective_from: 'last tuesday' is not a date"),
    ("p.csv", "model,input_per_million,output_per_million,effective_from\nm,1,1,\n",
     "p.csv line 2: missing effective_from"),
    ("p.csv", "model,input_per_million,output_per_million,effective_from\nm,1,1,2026-01-01\nm,2,2,2026-01-01\n",
     "p.csv line 3: 'm' from 2026-01-01T00:00:00+00:00 is already on line 2"),
    ("p.csv", "model,input_per_million,effective_from\nm,1,2026-01-01\n",
     "p.csv line 1: the header lacks output_per_million"),
    ("p.csv", "model,input_per_million,output_per_million,effective_from\nm,1,1,2026-01-01,extra\n",
     "p.csv line 2: more cells than the header has"),
    ("p.json", '[\n  {"model": "m", "input_per_million": 1, "output_per_million": 1, "effective_from": "2026-01-01"},\n'
               '  {"model": "m2", "input_per_million": 1, "output_per_million": 1, "effective_from": "2026-01-01",\n'
               '   "currency": "EUR"}\n]',
     "p.json line 3: unknown field 'currency'"),
    ("p.json", '[\n  {"model": "m", "input_per_million": 1,,}\n]', "p.json line 2: malformed JSON"),
    ("p.json", '{"model": "m"}', "p.json: expected a JSON list of price objects"),
    ("p.txt", "m,1,1,2026-01-01", "expected a .csv or .json file"),
])
def test_a_bad_price_file_names_its_line_and_stores_nothing(db, tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CommandError) as exc:
        call_command("load_prices", str(path))
    assert message in str(exc.value)
    assert not ModelPrice.objects.exists()


def test_prices_are_edited_in_the_admin(admin_client):
    response = admin_client.post("/admin/analysis/modelprice/add/", {
        "model": "llama-70b", "input_per_million": "0.59", "output_per_million": "0.79",
        "effective_from_0": "2026-01-01", "effective_from_1": "00:00:00", "note": "list price"})
    assert response.status_code == 302, response.content[:2000]
    assert ModelPrice.objects.get().output_per_million == Decimal("0.79")
    listing = admin_client.get("/admin/analysis/modelprice/")
    assert listing.status_code == 200 and b"llama-70b" in listing.content
    refused = admin_client.post("/admin/analysis/modelprice/add/", {
        "model": "x", "input_per_million": "-1", "output_per_million": "1",
        "effective_from_0": "2026-01-01", "effective_from_1": "00:00:00"})
    assert refused.status_code == 200 and ModelPrice.objects.count() == 1


def test_cached_release_costs_follow_a_price_edit_and_new_tasks(project, prices, django_assert_max_num_queries):
    for i, release in enumerate(["v1", "v2"]):
        llm(make_task(project, f"t{i}", release=release, start=T0 + timedelta(minutes=i)), "plan", inp=1_000_000, out=0)
    tasks = Task.objects.filter(project=project)
    first = costs.release_costs_cached(project=project, tasks=tasks, a="v1", b="v2")
    assert first["b"]["per_task_usd"] == pytest.approx(1.0)
    with django_assert_max_num_queries(2):  # the version only: tasks and prices
        assert costs.release_costs_cached(project=project, tasks=tasks, a="v1", b="v2") == first
    ModelPrice.objects.filter(model="llama-70b", input_per_million=Decimal("1")).update(input_per_million=Decimal("3"))
    assert costs.release_costs_cached(project=project, tasks=tasks, a="v1", b="v2")["b"]["per_task_usd"] == pytest.approx(3.0)
    llm(make_task(project, "t9", release="v2", start=T0 + timedelta(minutes=9)), "plan", inp=0, out=0)
    assert costs.release_costs_cached(project=project, tasks=tasks, a="v1", b="v2")["b"]["per_task_usd"] == pytest.approx(1.5)


def test_the_demo_user_may_enter_prices_in_the_admin(db, settings, tmp_path):
    from django.contrib.auth import get_user_model
    from django.test import Client

    settings.DATA_DIR = tmp_path
    (tmp_path / "demo-seeded").write_text("ok\n")  # no simulated traffic: only the user and project
    call_command("demo_setup", stdout=open(tmp_path / "out.txt", "w"))
    client = Client()
    client.force_login(get_user_model().objects.get(username="demo"))
    assert client.get("/admin/analysis/modelprice/add/").status_code == 200
    assert client.get("/admin/analysis/finding/").status_code == 403  # nothing more than prices


def test_a_fresh_demo_prices_the_models_the_simulator_calls(db, settings, tmp_path):
    """make demo loads docs/prices.example.csv when no price is entered: the cost tiles show dollars
    (qwen2.5-coder-32b is left without one on purpose: docs/client.md shows a partly priced sum)."""
    from analysis.models import ModelPrice
    from analysis.simulator import catalog

    settings.DATA_DIR = tmp_path
    (tmp_path / "demo-seeded").write_text("ok\n")
    call_command("demo_setup", stdout=open(tmp_path / "out.txt", "w"))
    priced = set(ModelPrice.objects.values_list("model", flat=True))
    simulated = {agent.model for agent in catalog.AGENTS}
    assert simulated - priced == {"qwen2.5-coder-32b"}, (simulated, priced)
    ModelPrice.objects.filter(model="llama-3.1-8b").update(note="ours")
    call_command("demo_setup", stdout=open(tmp_path / "out.txt", "w"))  # entered prices are left alone
    assert ModelPrice.objects.get(model="llama-3.1-8b").note == "ours"
