"""Why was this one slow: alignment, the typical run, and explanations whose items add up to the
difference — on hand-built runs (pure), then through the API on stored tasks."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.test import Client

from analysis.comparison.alignment import align, align_steps, align_turns
from analysis.comparison.explanation import explain
from analysis.comparison.runs import DStep, Run
from analysis.comparison.typical_run import task_as_typical, typical_profile
from tests.analysis.factories import T0, insert_big_task, make_finding, make_step, make_task

# --- hand-built runs ---------------------------------------------------------------------------


def build(task_id: str, turns, *, gap_before: dict | None = None, jitter: random.Random | None = None,
          device: str = "gpu-h100-02") -> Run:
    """turns: [(llm_ms, ttft_ms, [(tool, ms), ...], serial)]. Calls of a turn start together
    (concurrent) unless serial; each turn starts 5 ms after the previous one ends."""
    gap_before = gap_before or {}
    steps = []
    t = 5.0
    n = 0

    def j(ms):
        return ms * jitter.uniform(0.97, 1.03) if jitter else ms

    for k, (llm_ms, ttft_ms, calls, serial) in enumerate(turns):
        t += gap_before.get(k, 0.0)
        n += 1
        llm_ms = j(llm_ms)
        steps.append(DStep(f"llm{k}", "root", "llm", "chat", t, t + llm_ms, model="m", device=device,
                           ttft_ms=j(ttft_ms)))
        t += llm_ms + 5
        end = t
        for c, (tool, ms) in enumerate(calls):
            ms = j(ms)
            steps.append(DStep(f"{tool}{k}.{c}", "root", "tool", tool, t, t + ms, tool_name=tool,
                               args=f'{{"n":"{k}.{c}"}}'))
            end = max(end, t + ms)
            if serial:
                t += ms
        t = end + 5
    steps.insert(0, DStep("root", "", "agent", "checkout-agent", 0.0, t))
    return Run(task_id, t, steps)


USUAL = [(800, 300, [("search_inventory", 400), ("get_cart", 300)], False),
         (600, 250, [("pay", 500)], False),
         (900, 350, [], False)]


@pytest.fixture
def typical():
    rnd = random.Random(7)
    runs = [build(f"r{i}", USUAL, jitter=rnd) for i in range(60)]
    return typical_profile(runs, name="checkout-agent", release="v3", scope="release")


def assert_adds_up(e):
    assert sum(i.ms for i in e.items) == pytest.approx(e.difference_ms, abs=1e-6)


def top(e):
    return e.items[0]


def test_the_typical_run_has_the_usual_positions_turns_and_calls(typical):
    assert typical.runs == 60
    assert typical.median_turns == 3 and typical.median_calls == 3
    labels = [sorted(s.label for s in t.slots) for t in typical.turns]
    assert labels == [["llm:chat", "tool:get_cart", "tool:search_inventory"], ["llm:chat", "tool:pay"], ["llm:chat"]]
    assert all(s.share == 1.0 for t in typical.turns for s in t.slots)
    assert typical.turns[0].overlap < 0.8  # its two calls overlap
    search = next(s for s in typical.turns[0].slots if s.name == "search_inventory")
    assert search.median_ms == pytest.approx(400, rel=0.03)


def test_an_extra_call(typical):
    calls = [("pay", 500), ("search_inventory", 400), ("search_inventory", 410), ("search_inventory", 390)]
    e = explain(build("t", [USUAL[0], (600, 250, calls, True), USUAL[2]]), typical)
    assert_adds_up(e)
    assert top(e).kind == "extra_calls"
    assert top(e).text == "3 extra search_inventory calls (round 2)"
    assert set(top(e).step_ids) == {"search_inventory1.1", "search_inventory1.2", "search_inventory1.3"}
    assert top(e).ms == pytest.approx(1200, rel=0.05)
    assert e.headline.startswith("4.43 s vs typical 3.23 s for checkout-agent (v3, 60 runs): "
                                 "+1.2 s from 3 extra search_inventory calls (round 2)")


def test_a_slow_call_the_typical_run_does_not_make_is_named_slower(typical):
    e = explain(build("t", [USUAL[0], (600, 250, [("pay", 500), ("search_inventory", 4000)], True), USUAL[2]]),
                typical)
    assert_adds_up(e)
    # The compare waterfall draws the call "only in this task": the item says so too, and against
    # what it is slower (the label's usual duration, no step of the typical run).
    assert top(e).kind == "slower"
    assert top(e).text == "slower search_inventory, a call the typical run does not make there (10.0× its usual)"
    assert top(e).ms == pytest.approx(3600, rel=0.05)  # above its usual 400 ms
    extra = next(i for i in e.items if i.kind == "extra_calls")
    assert extra.ms == pytest.approx(400, rel=0.05) and extra.step_ids == ("search_inventory1.1",)


def test_a_slow_step_inside_an_extra_turn_is_named(typical):
    extra = (700, 250, [("pay", 6000)], False)
    e = explain(build("t", [USUAL[0], extra, USUAL[1], USUAL[2]]), typical)
    assert_adds_up(e)
    assert top(e).kind == "slower" and top(e).step_ids == ("pay1.0",)
    assert [i.kind for i in e.items][:2] == ["slower", "extra_turn"]


def test_a_repeated_call_is_named_as_such(typical):
    first = USUAL[0]
    again = (600, 250, [("pay", 500), ("search_inventory", 400)], True)
    run = build("t", [first, again, USUAL[2]])
    # the repeat carries the same canonical arguments as the first search
    run.steps = [s._replace(args='{"n":"0.0"}') if s.step_id == "search_inventory1.1" else s for s in run.steps]
    e = explain(run, typical)
    assert_adds_up(e)
    assert top(e).kind == "repeated_calls" and top(e).step_ids == ("search_inventory1.1",)


def test_a_slow_llm_call_on_a_queueing_device(typical):
    e = explain(build("t", [USUAL[0], (2800, 2450, [("pay", 500)], False), USUAL[2]]), typical,
                verdicts={"llm1": "queueing"})
    assert_adds_up(e)
    assert top(e).kind == "slower"
    # Where the time went, in the user's words: the call waited in the device's queue.
    assert top(e).text == "chat waiting in the queue of gpu-h100-02 (1 call)"
    assert top(e).verdict == "queueing" and top(e).step_ids == ("llm1",)
    assert top(e).ms == pytest.approx(2200, rel=0.05)
    assert "+2.2 s from chat waiting in the queue of gpu-h100-02 (1 call)" in e.headline


def test_an_extra_turn(typical):
    extra = (700, 250, [("lookup_order", 900)], False)
    e = explain(build("t", [USUAL[0], extra, USUAL[1], USUAL[2]]), typical)
    assert_adds_up(e)
    assert top(e).kind == "extra_turn" and top(e).text == "1 extra round of LLM call and tools (round 2)"
    assert set(top(e).step_ids) == {"llm1", "lookup_order1.0"}
    assert top(e).ms == pytest.approx(700 + 5 + 900 + 5, rel=0.03)


def test_a_missing_turn_is_negative(typical):
    e = explain(build("t", [USUAL[0], USUAL[2]]), typical)
    assert_adds_up(e)
    assert e.difference_ms < 0
    assert top(e).kind == "missing_turn" and top(e).ms < -1000
    assert top(e).text == "1 round of LLM call and tools fewer than the typical run"


def test_an_idle_gap(typical):
    e = explain(build("t", USUAL, gap_before={2: 3000.0}), typical)
    assert_adds_up(e)
    assert top(e).kind == "idle" and top(e).text == "idle before the last round"
    assert top(e).ms == pytest.approx(3000, abs=40)
    assert top(e).step_ids == ("llm2",)


def test_a_serialised_pair(typical):
    e = explain(build("t", [(800, 300, USUAL[0][2], True), USUAL[1], USUAL[2]]), typical)
    assert_adds_up(e)
    assert top(e).kind == "serialised"
    assert top(e).text == "2 calls run one after another in round 1 where the typical run overlaps them"
    assert set(top(e).step_ids) == {"search_inventory0.0", "get_cart0.1"}
    assert top(e).ms == pytest.approx(300, rel=0.1)  # the shorter call, no longer hidden


def test_a_usual_run_has_nothing_large_to_say(typical):
    e = explain(build("t", USUAL), typical)
    assert_adds_up(e)
    assert abs(e.difference_ms) < 60
    assert all(i.kind in ("smaller", "remainder") or abs(i.ms) < 60 for i in e.items)


def test_every_item_says_its_ms_and_steps_and_the_remainder_is_labelled(typical):
    e = explain(build("t", [USUAL[0], (2800, 2450, [("pay", 900)], False), USUAL[2]], gap_before={1: 500}), typical)
    assert_adds_up(e)
    kinds = [i.kind for i in e.items]
    assert kinds.index("remainder") == len(kinds) - 1 if "remainder" in kinds else True
    for item in e.items:
        if item.kind not in ("remainder", "smaller"):
            assert item.step_ids, item
    sizes = [abs(i.ms) for i in e.items if i.kind not in ("remainder", "smaller")]
    assert sizes == sorted(sizes, reverse=True)


def test_against_another_task_nothing_is_left_over():
    a = build("a", [USUAL[0], (600, 250, [("pay", 500), ("search_inventory", 800)], False), USUAL[2]],
              gap_before={2: 1000})
    b = build("b", USUAL)
    e = explain(a, task_as_typical(b, name="checkout-agent", release="v3"))
    assert_adds_up(e)
    assert not [i for i in e.items if i.kind == "remainder"]
    assert e.headline.startswith("4.54 s vs 3.23 s for task b: +1 s from idle before the last round, +300 ms from 1 extra")
    extra = [r for r in e.rows if r.status == "extra"]
    assert [r.step_id for r in extra] == ["search_inventory1.1"]
    assert all(r.other_step_id for r in e.rows if r.status != "extra")


# --- alignment ---------------------------------------------------------------------------------


def test_alignment_with_inserted_and_deleted_steps():
    a = list("PQRSTUVW")
    b = list("PQXRSUVWY")  # X inserted, T deleted, Y appended
    pairs = align(a, b)
    matched = [(a[i], b[j]) for i, j in pairs if i is not None and j is not None]
    assert matched == [(c, c) for c in "PQRSUVW"]
    assert [b[j] for i, j in pairs if i is None] == ["X", "Y"]
    assert [a[i] for i, j in pairs if j is None] == ["T"]
    # order kept on both sides
    assert [i for i, _ in pairs if i is not None] == list(range(len(a)))
    assert [j for _, j in pairs if j is not None] == list(range(len(b)))


def test_an_inserted_call_does_not_shift_what_follows():
    a = ["llm:plan"] + ["tool:fetch"] * 50 + ["llm:answer"]
    b = ["llm:plan"] + ["tool:fetch"] * 20 + ["tool:search"] + ["tool:fetch"] * 30 + ["llm:answer"]
    pairs = align(a, b)
    assert sum(1 for i, j in pairs if i is not None and j is not None) == 52
    assert [b[j] for i, j in pairs if i is None] == ["tool:search"]


def test_too_many_edits_falls_back_to_an_order_preserving_alignment():
    rnd = random.Random(3)
    a = [rnd.choice("abcdefgh") for _ in range(3000)]
    b = [rnd.choice("abcdefgh") for _ in range(3000)]
    pairs = align(a, b, max_edits=50)
    assert [i for i, _ in pairs if i is not None] == list(range(3000))
    assert [j for _, j in pairs if j is not None] == list(range(3000))
    assert all(a[i] == b[j] for i, j in pairs if i is not None and j is not None)


def test_concurrent_calls_in_another_order_still_pair():
    pairs = align_steps(["llm:chat", "tool:b", "tool:a"], ["llm:chat", "tool:a", "tool:b"])
    assert sorted(p for p in pairs if None not in p) == [(0, 0), (1, 2), (2, 1)]


def test_a_turn_with_an_extra_call_pairs_in_place_and_an_inserted_turn_is_left_out():
    x = ("llm:plan", "tool:a", "tool:b")
    y = ("llm:plan", "tool:a", "tool:b", "tool:c")  # x plus a call
    z = ("llm:plan", "tool:z")
    a = [x] * 10
    b = [x] * 4 + [y] + [x] * 5
    assert align_turns(a, b) == [(i, i) for i in range(10)]
    b = [x] * 6 + [z] + [x] * 4
    assert [j for i, j in align_turns(a, b) if i is None] == [6]


def test_a_10000_step_pair_is_aligned_step_for_step():
    def big(task_id, insert=(), delete=()):
        steps, t = [], 0.0
        for k in range(1000):
            for c in range(10):
                if (k, c) in delete:
                    continue
                kind, name = ("llm", "plan") if c == 0 else ("tool", f"call {c}")
                steps.append(DStep(f"{task_id}{k}.{c}", "root", kind, name, t, t + 10.0, tool_name=name))
                t += 10.0
                if (k, c) in insert:
                    steps.append(DStep(f"{task_id}x{k}", "root", "tool", "extra", t, t + 50.0, tool_name="extra"))
                    t += 50.0
        return Run(task_id, t, [DStep("root", "", "agent", "a", 0.0, t)] + steps)

    a = big("a", insert={(5, 3), (500, 2)})
    b = big("b", delete={(700, 4)})
    e = explain(a, task_as_typical(b, name="x", release="v"))
    assert_adds_up(e)
    assert {r.step_id for r in e.rows if r.status == "extra"} == {"ax5", "ax500", "a700.4"}
    assert [r.other_step_id for r in e.rows if r.status == "missing"] == []
    assert sum(1 for r in e.rows if r.step_id and r.other_step_id) == 9999


# --- through the API, on stored tasks ----------------------------------------------------------


def store(project, task_id, turns, *, start, release="v3", gap_before=None, name="checkout-agent"):
    run = build(task_id, turns, gap_before=gap_before)
    task = make_task(project, task_id, duration_ms=run.duration_ms, release=release, start=start, name=name,
                     step_count=len(run.steps))
    for s in run.steps:
        extra = {"tool_name": s.tool_name, "tool_args": {"n": s.step_id}} if s.kind == "tool" else {
            "model": s.model, "device": s.device, "ttft_ms": s.ttft_ms} if s.kind == "llm" else {}
        make_step(task, s.step_id, offset_ms=s.start_ms, duration_ms=s.duration_ms, kind=s.kind, name=s.name,
                  parent=s.parent_step_id, **extra)
    return task


@pytest.fixture
def stored(db, project):
    rnd = random.Random(11)
    for i in range(25):
        turns = [(llm * rnd.uniform(0.97, 1.03), ttft, [(t, ms * rnd.uniform(0.97, 1.03)) for t, ms in calls], s)
                 for llm, ttft, calls, s in USUAL]
        store(project, f"run-{i:02d}", turns, start=T0 + timedelta(minutes=i))
    slow = store(project, "slow", [USUAL[0], (2800, 2450, [("pay", 500)], False), USUAL[2]],
                 start=T0 + timedelta(minutes=30))
    make_finding(slow, "hardware_queueing", wasted_ms=2000.0, step_ids=["llm1"], summary="queued")
    slow.findings.update(evidence={"verdict": "queueing", "excess_ms": 2000.0})
    return slow


@pytest.fixture
def api(read_key):
    client = Client()
    return lambda path, **params: client.get(path, params, HTTP_AUTHORIZATION=f"Bearer {read_key}")


def rows_of(body) -> list[dict]:
    return [dict(zip(body["row_fields"], row, strict=True)) for row in body["rows"]]


def test_api_typical_names_the_queueing_llm_call(stored, api):
    body = api("/api/v1/tasks/slow/diff", against="typical").json()
    assert body["available"] is True
    assert body["typical"]["runs"] == 26 and body["typical"]["scope"] == "release"
    assert body["items"][0]["text"] == "chat waiting in the queue of gpu-h100-02 (1 call)"
    assert body["items"][0]["step_ids"] == ["llm1"]
    assert sum(i["ms"] for i in body["items"]) == pytest.approx(body["difference_ms"], abs=0.01)
    assert body["headline"] == ("5.43 s vs typical 3.23 s for checkout-agent (v3, 26 runs):"
                                " +2.2 s from chat waiting in the queue of gpu-h100-02 (1 call)")
    assert {r["status"] for r in rows_of(body)} <= {"same", "slower", "faster", "extra", "missing"}
    llm1 = next(r for r in rows_of(body) if r["step_id"] == "llm1")
    assert llm1["status"] == "slower" and llm1["delta_ms"] == pytest.approx(2200, rel=0.05)


def test_api_against_another_task(stored, api):
    body = api("/api/v1/tasks/slow/diff", against="run-03").json()
    assert body["against"] == "run-03" and body["typical"]["scope"] == "task"
    assert sum(i["ms"] for i in body["items"]) == pytest.approx(body["difference_ms"], abs=0.01)
    assert len(api("/api/v1/tasks/slow/diff", against="run-03", rows="0").json().get("rows", [])) == 0


def test_api_too_few_runs_is_said_not_guessed(db, project, api):
    store(project, "lonely", USUAL, start=T0, name="rare-agent")
    body = api("/api/v1/tasks/lonely/diff").json()
    assert body["available"] is False
    assert body["reason"] == "only 1 finished runs of rare-agent to compare with (a typical run needs 20)"


def test_api_errors_name_the_parameter_and_never_reach_another_project(stored, api, other_project):
    store(other_project, "theirs", USUAL, start=T0)
    assert api("/api/v1/tasks/slow/diff", against="theirs").status_code == 404
    assert api("/api/v1/tasks/theirs/diff").status_code == 404
    response = api("/api/v1/tasks/slow/diff", against="")
    assert response.status_code == 400 and "against" in response.json()["error"]
    response = api("/api/v1/tasks/slow/diff", rows="maybe")
    assert response.status_code == 400 and "rows" in response.json()["error"]


def test_the_typical_profile_is_built_from_the_release_else_the_baseline_window(db, project):
    from analysis.comparison import diff

    for i in range(22):
        store(project, f"old-{i}", USUAL, start=T0 + timedelta(hours=i), release="v1")
    store(project, "new", USUAL, start=T0 + timedelta(hours=30), release="v2")
    runs, scope = diff.typical_runs(project=project, name="checkout-agent", release="v1")
    assert scope == "release" and len(runs) == 22
    runs, scope = diff.typical_runs(project=project, name="checkout-agent", release="v2")
    assert scope == "window" and len(runs) == 23


def test_a_10000_step_pair_through_the_api(db, project, api):
    a = insert_big_task(project, "big-a", turns=1000, per_turn=10)
    insert_big_task(project, "big-b", turns=1000, per_turn=10)
    from ingest.models import Step

    Step.objects.filter(task=a, step_id="s5.3").update(name="call 3b")  # one step that differs
    body = api("/api/v1/tasks/big-a/diff", against="big-b").json()
    rows = rows_of(body)
    assert len(rows) == 10_000 + 1  # 10,000 aligned + the extra "call 3b" vs the missing "call 3"
    assert [r["step_id"] for r in rows if r["status"] == "extra"] == ["s5.3"]
    assert [r["other_step_id"] for r in rows if r["status"] == "missing"] == ["s5.3"]


def test_explain_is_pure():
    from analysis.comparison import alignment, explanation, runs, typical_run

    for module in (runs, alignment, typical_run, explanation):
        assert not hasattr(module, "connection") and "django" not in module.__dict__
