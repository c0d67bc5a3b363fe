"""Dependencies learned from an agent's own runs (analysis/engine/learned.py): a short id that
flows is a dependency once the runs show it is rare; a value found in every run is no evidence;
a pair the agent runs concurrently elsewhere is independent; a pair whose history says neither is
only "possible"; and both analysis paths read what was learned."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from analysis.engine import batch, learned, pipeline
from analysis.engine.detectors import dependencies
from analysis.models import AgentProfile, CallPair, Finding
from ingest.models import Task
from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store

T0 = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)


def run(project, n: int, *, agent: str, a: tuple[str, dict, str], b: tuple[str, dict], overlap: bool = False,
        start: datetime | None = None, together: bool = False, release: str = "r1") -> str:
    """One run of an agent: a plan, tool call A then tool call B (B inside A when `overlap`), an
    answer. A and B are (tool, arguments[, result]); `together`: the plan's response requested
    both (call ids on all three)."""
    began = start or T0 + timedelta(minutes=n)
    task_id = f"{agent}-{release}-{n}" if release != "r1" else f"{agent}-{n}"

    def at(ms):
        return began + timedelta(milliseconds=ms)

    b_start = 150 if overlap else 320
    ids = [f"{task_id}-call-a", f"{task_id}-call-b"] if together else ["", ""]
    steps = [
        StepRecord(step_id=f"{task_id}-plan", task_id=task_id, kind="llm", name="plan", model="m",
                   started_at=at(0), ended_at=at(100), parent_step_id=f"{task_id}-root",
                   tool_call_ids=[i for i in ids if i]),
        StepRecord(step_id=f"{task_id}-a", task_id=task_id, kind="tool", name=a[0], tool_name=a[0],
                   tool_args=a[1], tool_result=a[2], started_at=at(110), ended_at=at(310),
                   parent_step_id=f"{task_id}-root", tool_call_id=ids[0]),
        StepRecord(step_id=f"{task_id}-b", task_id=task_id, kind="tool", name=b[0], tool_name=b[0],
                   tool_args=b[1], tool_result="ok", started_at=at(b_start), ended_at=at(b_start + 200),
                   parent_step_id=f"{task_id}-root", tool_call_id=ids[1]),
        StepRecord(step_id=f"{task_id}-answer", task_id=task_id, kind="llm", name="answer", model="m",
                   started_at=at(600), ended_at=at(700), parent_step_id=f"{task_id}-root"),
    ]
    root = StepRecord(step_id=f"{task_id}-root", task_id=task_id, kind="agent", name=agent,
                      started_at=at(0), ended_at=at(700))
    batch_store(project=project, batch=Batch(
        tasks=[TaskRecord(task_id=task_id, name=agent, release=release, started_at=at(0), ended_at=at(700),
                          status="ok")],
        steps=[root, *steps]))
    return task_id


def orders_then_customers(project, n, **kw):
    """The issue's pattern: the customer id in the order's result is the next query's argument.
    Ids are small numbers, which no shape rule can tell from coincidence."""
    return run(project, n, agent="billing", a=("run_query", {"sql": f"select * from orders where id = {n}"},
                                                json.dumps({"order": n, "customer": 500 + n, "region": "EU"})),
               b=("run_query", {"sql": f"select * from customers where id = {500 + n}"}), **kw)


def two_lookups(project, n, **kw):
    """Two independent lookups that share the task's own values (the tenant and the region),
    found in every run."""
    return run(project, n, agent="lookup", a=("get_weather", {"tenant": "acme-prod-eu", "city": f"c{n}x"},
                                               json.dumps({"temp": n % 30})),
               b=("get_news", {"tenant": "acme-prod-eu", "topic": f"t{n}y"}), **kw)


def findings(project, agent) -> list[Finding]:
    return list(Finding.objects.filter(project=project, kind="parallelizable_calls", task__name=agent))


def analyse_all(project):
    pks = list(Task.objects.filter(project=project).order_by("ended_at").values_list("pk", flat=True))
    batch.run_ids(pks, force=True, top_up=False)


def test_a_short_id_that_flows_is_a_dependency_once_the_runs_show_it_is_rare(db, project):
    for n in range(30):
        orders_then_customers(project, n)
    analyse_all(project)
    # Cold start: "531" is a small number, not evidence by its shape: a false "parallelize".
    assert findings(project, "billing")
    assert learned.refresh_due() >= 2  # the agent's profile and the project's
    profile = AgentProfile.objects.get(project=project, agent="billing", release="r1")
    assert profile.runs == 30 and "eu" in profile.common_tokens and "531" not in profile.common_tokens
    [pair] = CallPair.objects.filter(project=project, agent="billing")
    assert (pair.earlier, pair.later, pair.runs, pair.flow_runs) == ("run_query#0", "run_query#1", 30, 30)
    assert pair.verdict == "dependent"
    analyse_all(project)
    assert findings(project, "billing") == []


def test_values_in_every_run_are_no_evidence_and_no_flow_over_varied_runs_is_no_independence(db, project):
    for n in range(30):
        two_lookups(project, n)
    analyse_all(project)
    # Cold start: the shared tenant name (long, with separators) reads as a possible dependency.
    assert {f.confidence for f in findings(project, "lookup")} == {"low"}
    learned.refresh_due()
    [pair] = CallPair.objects.filter(project=project, agent="lookup")
    # No flow seen over 30 varied runs is still an absence: nothing shows they could run at once.
    assert (pair.runs, pair.flow_runs, pair.verdict, pair.basis) == (30, 0, "unknown", dependencies.LEARNED_NO_FLOW)
    analyse_all(project)
    found = findings(project, "lookup")
    assert len(found) == 30 and {f.confidence for f in found} == {"low"}
    assert found[0].evidence["basis"] == dependencies.LEARNED_NO_FLOW
    assert "which does not show that none flowed" in found[0].confidence_reason


def test_a_common_value_passed_on_in_every_run_is_the_agents_pattern_a_dependency(db, project):
    for n in range(30):
        run(project, n, agent="reader", a=("fetch_page", {"url": f"https://example.org/{n}"},
                                            json.dumps({"doc": "page-1", "chars": 3000 + n})),
            b=("summarize", {"doc": "page-1", "max_words": 120}))
    learned.refresh_due()
    [pair] = CallPair.objects.filter(project=project, agent="reader")
    assert (pair.flow_runs, pair.blind_runs, pair.verdict) == (0, 30, "dependent")
    analyse_all(project)
    assert findings(project, "reader") == []


def test_a_planners_placeholder_filled_from_the_first_result_is_a_dependency_in_every_run(db, project):
    """One response requests run_query and render_chart {"query_id": "$1.query_id"}; the executor
    fills the id from run_query's result. Requested together in every run, yet dependent in every
    run: the agent's history must not read the co-request as independence either."""
    for n in range(30):
        run(project, n, agent="planner", together=True,
            a=("run_query", {"sql": "select region, sum(total) from orders group by 1"},
               json.dumps({"query_id": f"qr_{n:02d}f{n % 7}", "rows": 4})),
            b=("render_chart", {"kind": "bar", "query_id": f"qr_{n:02d}f{n % 7}"}))
    analyse_all(project)
    assert findings(project, "planner") == []
    learned.refresh_due()
    [pair] = CallPair.objects.filter(project=project, agent="planner")
    assert (pair.runs, pair.together_runs, pair.flow_runs, pair.verdict) == (30, 30, 30, "dependent")
    analyse_all(project)
    assert findings(project, "planner") == []


def test_a_pair_run_concurrently_in_other_runs_is_independent(db, project):
    for n in range(10):
        run(project, n, agent="fetcher", a=("fetch", {"u": "a"}, ""), b=("fetch_other", {"u": "b"}),
            overlap=n % 2 == 0)
    analyse_all(project)
    # Nothing recorded (no results): only possible.
    assert {f.confidence for f in findings(project, "fetcher")} == {"low"}
    learned.refresh_due()
    [pair] = CallPair.objects.filter(project=project, agent="fetcher")
    assert pair.concurrent_runs == 5 and pair.verdict == "independent"
    analyse_all(project)
    serial = findings(project, "fetcher")
    assert len(serial) == 5 and {f.confidence for f in serial} == {"medium"}


def test_a_history_that_says_neither_leaves_the_pair_possible(db, project):
    # The earlier call returns the same text every run: no flow could show, so none proves nothing.
    for n in range(30):
        run(project, n, agent="steady", a=("status", {"q": f"s{n}z"}, "all systems nominal"),
            b=("report", {"q": f"r{n}w"}))
    learned.refresh_due()
    [pair] = CallPair.objects.filter(project=project, agent="steady")
    assert pair.result_variants == 1 and pair.verdict == "unknown"
    analyse_all(project)
    found = findings(project, "steady")
    assert found and {f.confidence for f in found} == {"low"}
    assert found[0].summary.startswith("Possibly: ")


def test_the_one_task_path_reads_what_was_learned_too(db, project):
    for n in range(30):
        orders_then_customers(project, n)
    learned.refresh_due()
    task_id = orders_then_customers(project, 99, start=T0 + timedelta(hours=2))
    task = Task.objects.get(project=project, task_id=task_id)
    pipeline.run(task.pk, force=True)
    assert findings(project, "billing") == []


def test_refresh_is_incremental(db, project):
    for n in range(5):
        two_lookups(project, n)
        orders_then_customers(project, n)
    assert learned.refresh_due() == 3  # two agents and the project
    assert learned.refresh_due() == 0  # nothing new
    two_lookups(project, 50, start=T0 + timedelta(hours=1))
    assert learned.refresh_due() == 2  # that agent, and the project's traffic
    assert AgentProfile.objects.get(project=project, agent="lookup").runs == 6
    assert AgentProfile.objects.get(project=project, agent="billing").runs == 5


def test_a_replay_learns_only_from_runs_that_had_ended(db, project):
    for n in range(30):
        orders_then_customers(project, n)
    learned.refresh_due(through=T0 + timedelta(minutes=9, seconds=1))
    assert AgentProfile.objects.get(project=project, agent="billing").runs == 10


def test_projects_learn_apart(db, project, other_project):
    for n in range(30):
        orders_then_customers(project, n)
        two_lookups(other_project, n)
    learned.refresh_due()
    assert set(CallPair.objects.filter(project=project).values_list("agent", flat=True)) == {"billing"}
    assert set(CallPair.objects.filter(project=other_project).values_list("agent", flat=True)) == {"lookup"}


@pytest.mark.parametrize("runs,flow,concurrent,together,variants,verdict", [
    (30, 30, 0, 0, 30, "dependent"),
    (30, 0, 0, 0, 30, "unknown"),     # no flow seen over varied runs: still an absence
    (30, 0, 0, 0, 1, "unknown"),      # a constant result cannot show flow
    (5, 0, 0, 0, 5, ""),              # too few runs: no history yet, the one trace decides
    (30, 10, 0, 0, 30, "unknown"),    # flow in a third of the runs: neither
    (30, 30, 2, 0, 30, "dependent"),  # flow in most runs: the two concurrent runs were another part
    (30, 12, 10, 0, 30, "unknown"),   # flow in some runs, concurrency in others: one name, two parts
    (30, 0, 2, 0, 30, "independent"),  # never any flow, and run concurrently elsewhere
    (3, 0, 1, 0, 1, "independent"),
    (3, 0, 0, 1, 1, ""),              # requested together elsewhere: the tools may act, in order
])
def test_pair_verdicts(runs, flow, concurrent, together, variants, verdict):
    from analysis.engine.detectors.dependencies import PairStats, pair_verdict

    stats = PairStats(runs=runs, flow_runs=flow, concurrent_runs=concurrent, together_runs=together,
                      variants=set(range(variants)))
    assert pair_verdict(stats)[0] == verdict


# --- the Agent page and its API ---------------------------------------------------------------


def test_the_agent_page_shows_which_calls_feed_which_and_which_could_run_together(db, project, django_user_model):
    from django.test import Client

    for n in range(30):
        orders_then_customers(project, n)
        two_lookups(project, n, overlap=n % 10 == 0)  # run concurrently now and then: independent
    learned.refresh_due()
    user = django_user_model.objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    page = client.get("/agents/billing", {"project": project.name}).content.decode()
    assert "Learned from its last 30 runs" in page
    assert "Which calls feed which" in page and "could run in parallel" not in page
    feeds = page.split('data-relation="feeds"')[1].split("</table>")[0]
    assert "run_query#0" in feeds and "run_query#1" in feeds
    page = client.get("/agents/lookup", {"project": project.name}).content.decode()
    serial = page.split('data-relation="independent, run one after another"')[1].split("</table>")[0]
    assert "get_weather#0" in serial and "get_news#0" in serial
    assert client.get("/agents/nobody", {"project": project.name}).status_code == 404  # no such agent here
    run(project, 0, agent="fresh", a=("x", {"q": "a1b"}, "r"), b=("y", {"q": "b"}))
    page = client.get("/agents/fresh", {"project": project.name})
    assert page.status_code == 200 and "Nothing learned for this agent yet" in page.content.decode()


def test_the_agent_api_gives_the_graph_with_its_evidence(live_server, project, other_project, make_key):
    import requests

    for n in range(30):
        orders_then_customers(project, n)
    learned.refresh_due()
    key = make_key(project, "read")
    r = requests.get(f"{live_server.url}/api/v1/agents/billing", headers={"Authorization": f"Bearer {key}"},
                     timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["runs"] == 30 and body["release"] == "r1"
    [edge] = body["edges"]
    assert (edge["earlier"], edge["later"], edge["relation"], edge["runs"], edge["flow_runs"]) == (
        "run_query#0", "run_query#1", "feeds", 30, 30)
    other = make_key(other_project, "read")
    r = requests.get(f"{live_server.url}/api/v1/agents/billing", headers={"Authorization": f"Bearer {other}"},
                     timeout=30)
    assert r.status_code == 404  # another project's agent is not there


def test_hostile_call_names_are_escaped_on_the_agent_page(db, project, django_user_model):
    from django.test import Client

    for n in range(3):
        run(project, n, agent="<b>x</b>", a=("<script>alert(1)</script>", {"q": f"a{n}1"}, "r"),
            b=("t2", {"q": "b"}))
    learned.refresh_due()
    user = django_user_model.objects.create_user("ana", password="pw")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    from django.urls import reverse

    r = client.get(reverse("agent-detail", args=["<b>x</b>"]), {"project": project.name})
    page = r.content.decode()
    assert r.status_code == 200 and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;#0" in page


def test_a_turn_of_ten_thousand_calls_learns_in_bounded_work():
    """Pairs grow with the square of a turn's calls (1,000 calls in one turn took 43.5 s): a turn
    is learned from its first LEARN_CALLS calls, each paired with the LINK_WINDOW before it."""
    from analysis.engine.detectors.base import StepData
    from analysis.engine.detectors.dependencies import LINK_WINDOW, Profile

    t0 = 1_780_000_000_000.0
    steps = [StepData("l1", "llm", "chat", t0, t0 + 500, model="m")]
    steps += [StepData(f"c{i}", "tool", "lookup", t0 + 500 + i * 10, t0 + 509 + i * 10, tool_name="lookup",
                       tool_args={"row": i}, tool_result=f'{{"value": "v{i}x"}}') for i in range(10_000)]
    stats = learned.pair_stats([steps], Profile(0, frozenset()))
    considered = sum(p.runs for p in stats.values())
    bound = learned.LEARN_CALLS * LINK_WINDOW
    assert 0 < considered <= bound
    assert len(stats) <= bound


def test_a_for_loop_release_is_independent_where_another_release_of_the_agent_ran_the_pair_concurrently(db, project):
    for n in range(10):
        two_lookups(project, n, release="loop")
    analyse_all(project)
    assert {f.confidence for f in findings(project, "lookup")} == {"low"}  # nothing seen of independence
    for n in range(10):
        two_lookups(project, 100 + n, release="gather", overlap=True)
    learned.refresh_due()
    analyse_all(project)
    serial = [f for f in findings(project, "lookup") if f.task.release == "loop"]
    assert len(serial) == 10
    assert {(f.confidence, f.evidence["basis"]) for f in serial} == {("medium", "observed_concurrency")}
