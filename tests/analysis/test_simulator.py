"""The workload simulator: every injected problem is really in the data, normal traffic does not
look like one, a seed reproduces the data, labels never reach the product, HTTP mode stores
what in-process mode stores, and (evidence mode, the default) dependencies show only the way
real agents show them: through results and call ids, never `depends_on`."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, HTTPServer
from statistics import median

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Q

from analysis.hardware import profile_for
from analysis.simulator.catalog import AGENTS
from analysis.simulator.generate import KINDS, SimulationConfig, simulate
from analysis.simulator.sinks import SinkError, _metrics_protobuf, post_http
from ingest.models import Device, IngestKey, Project, ResourceSample, Step, Task
from ingest.otlp import JSON, PROTOBUF, decode_metrics, decode_traces

END_MS = 1_795_000_000_000.0  # 2026-11-18T09:46:40Z
UNTIL = "2026-11-18T09:46:40Z"
TOOLS = {t.name: t for a in AGENTS for t in a.tools}


def config(**kw) -> SimulationConfig:
    base = {"tasks": 500, "start_ms": END_MS - 2 * 86_400_000, "end_ms": END_MS, "seed": 5, "anomaly_rate": 0.4}
    return SimulationConfig(**(base | kw))


@pytest.fixture(scope="module")
def sim():
    return simulate(config())


@pytest.fixture(scope="module")
def data(sim):
    return index(sim)


@pytest.fixture(scope="module")
def declared_sim():
    return simulate(config(dependencies="declared"))


@pytest.fixture(scope="module")
def declared(declared_sim):
    return index(declared_sim)


def index(sim) -> dict:
    """Steps by task, labels by kind, labelled task ids, samples by device."""
    steps = {}
    tasks = {}
    for events in sim.tasks:
        tasks[events[0]["task_id"]] = events[0]
        steps[events[0]["task_id"]] = {e["step_id"]: e for e in events[1:]}
    labels = defaultdict(list)
    for label in sim.labels:
        labels[label["kind"]].append(label)
    labelled = {label["task_id"] for label in sim.labels}
    # The telemetry as /v1/metrics reads it: through ingest's own mapping of the OTLP names.
    samples = defaultdict(list)
    for body in sim.metrics:
        decoded = decode_metrics(_metrics_protobuf(body), media=PROTOBUF)
        assert decoded.rejected == 0, decoded.problems
        for r in decoded.batch.samples:
            samples[r.host].append({"device": r.device, "role": r.role, "vendor": r.vendor,
                                    "ts": int(r.ts.timestamp() * 1e6) * 1000, "metrics": r.metrics})
    decoded = decode_traces(json.dumps({"resourceSpans": sim.server_spans}).encode(), media=JSON)
    assert decoded.rejected == 0, decoded.problems
    server_steps = {(r.task_id, r.parent_step_id): r for r in decoded.batch.steps}
    return {"steps": steps, "tasks": tasks, "labels": labels, "labelled": labelled, "samples": samples,
            "server_steps": server_steps}


def ms(ns: int) -> float:
    return ns / 1e6


def asked(step) -> tuple[str, str]:
    """What a call asked for: its tool and the values of its arguments (a JSON string read as
    the object it holds), however they were written."""
    args = json.loads(step["tool_args"]) if isinstance(step["tool_args"], str) else step["tool_args"]
    return step["tool_name"], json.dumps(args, sort_keys=True)


def retried(a: dict, b: dict) -> bool:
    """b sends failed call a again, arguments unchanged."""
    return a["status"] == "error" and asked(a) == asked(b) and a["ended_at"] <= b["started_at"]


def work_steps(steps: dict) -> list[dict]:
    return sorted((s for s in steps.values() if s["kind"] != "agent"), key=lambda s: s["started_at"])


def idle_gaps(steps: dict) -> list[tuple[float, str, str]]:
    """(gap ms, step before, step after) wherever no step runs inside the task."""
    gaps, end, last = [], None, None
    for s in work_steps(steps):
        if end is not None and ms(s["started_at"]) > end:
            gaps.append((ms(s["started_at"]) - end, last, s["step_id"]))
        if end is None or ms(s["ended_at"]) > end:
            end, last = ms(s["ended_at"]), s["step_id"]
    return gaps


def tpot(step: dict) -> float:
    return (ms(step["ended_at"]) - ms(step["started_at"]) - step["ttft_ms"]) / step["output_tokens"]


# --- the generated data --------------------------------------------------------------------


def test_the_same_seed_gives_identical_data_and_another_seed_does_not(sim):
    again = simulate(config())
    assert again.tasks == sim.tasks and again.metrics == sim.metrics and again.labels == sim.labels
    assert again.server_spans == sim.server_spans
    other = simulate(config(seed=6))
    assert other.tasks[0][0]["task_id"] != sim.tasks[0][0]["task_id"]


def test_every_kind_is_injected_and_every_label_names_real_steps(sim, data):
    assert set(data["labels"]) == set(KINDS)
    for label in sim.labels:
        assert set(label) >= {"task_id", "step_ids", "kind", "magnitude_ms"}
        assert label["magnitude_ms"] > 0, label
        assert set(label["step_ids"]) <= set(data["steps"][label["task_id"]]), label
    injected_share = len(data["labelled"]) / len(sim.tasks)
    assert 0.3 < injected_share < 0.6  # anomaly rate 0.4, plus tasks caught in fault windows


def test_tasks_are_react_loops_with_growing_context_and_releases_in_order(sim, data):
    turns, names = [], set()
    for task_id, steps in data["steps"].items():
        llm = [s for s in work_steps(steps) if s["kind"] == "llm"]
        turns.append(len(llm))
        names.add(data["tasks"][task_id]["name"])
        inputs = [s["input_tokens"] for s in llm]
        assert inputs == sorted(inputs)  # each turn carries the previous turns' context
    assert min(turns) >= 1 and max(turns) <= 12
    assert names == {a.name for a in AGENTS}
    releases = [t["release"] for t in sorted(data["tasks"].values(), key=lambda t: t["started_at"])]
    assert releases[0] == "v1" and releases[-1] == "v3" and set(releases) == {"v1", "v2", "v3"}
    statuses = {t["status"] for t in data["tasks"].values()}
    assert "ok" in statuses and statuses <= {"ok", "error", "timeout"}


def test_slow_steps_stand_far_above_normal_tool_variance(data):
    normal = defaultdict(list)  # (tool, release) → durations of calls with no label
    slow_ids = {(lab["task_id"], lab["step_ids"][0]) for lab in data["labels"]["slow_step"]}
    for task_id, steps in data["steps"].items():
        for s in steps.values():
            if s.get("tool_name") and s["status"] == "ok" and (task_id, s["step_id"]) not in slow_ids:
                normal[(s["tool_name"], data["tasks"][task_id]["release"])].append(
                    ms(s["ended_at"]) - ms(s["started_at"]))
    worst_normal = max(max(d) / median(d) for d in normal.values() if len(d) >= 10)
    ratios = []
    for label in data["labels"]["slow_step"]:
        s = data["steps"][label["task_id"]][label["step_ids"][0]]
        durations = normal[(s["tool_name"], data["tasks"][label["task_id"]]["release"])]
        ratios.append((ms(s["ended_at"]) - ms(s["started_at"])) / median(durations))
    assert min(ratios) > 4.5 > worst_normal  # heavy tails, but well short of an injected slow step


def test_a_repeat_asks_the_same_thing_again_and_nothing_else_does_but_a_retry(data):
    """A repeat is the same request (sometimes written differently: keys in another order, a
    JSON string); otherwise a task asks the same thing twice only to retry a failed call, which
    is no waste and no label. Near-repeats (one argument changed) are new requests."""
    labelled, rewritten = set(), 0
    for label in data["labels"]["repeated_tool_call"]:
        first, repeat = (data["steps"][label["task_id"]][i] for i in label["step_ids"])
        assert asked(first) == asked(repeat)
        rewritten += json.dumps(first["tool_args"]) != json.dumps(repeat["tool_args"])
        assert first["ended_at"] <= repeat["started_at"] and first["status"] == "ok"
        assert label["magnitude_ms"] == pytest.approx(ms(repeat["ended_at"]) - ms(repeat["started_at"]), abs=0.1)
        labelled.add((label["task_id"], repeat["step_id"]))
    assert 0 < rewritten < len(data["labels"]["repeated_tool_call"])
    retries = near = 0
    for task_id, steps in data["steps"].items():
        seen: dict = {}
        calls = [s for s in work_steps(steps) if s.get("tool_name")]
        for s in calls:
            if asked(s) in seen:
                assert (task_id, s["step_id"]) in labelled or retried(seen[asked(s)], s), s
                retries += (task_id, s["step_id"]) not in labelled
            seen[asked(s)] = s
        for i, b in enumerate(calls):
            for a in calls[:i]:
                if a["tool_name"] == b["tool_name"] and isinstance(a["tool_args"], dict) \
                        and isinstance(b["tool_args"], dict) and a["tool_args"].keys() == b["tool_args"].keys():
                    near += sum(a["tool_args"][k] != b["tool_args"][k] for k in a["tool_args"]) == 1
    assert retries > 5 and near > 20


def test_a_serial_gap_is_real_idle_time_and_normal_gaps_stay_small(data):
    gap_tasks = set()
    for label in data["labels"]["serial_gap"]:
        gaps = idle_gaps(data["steps"][label["task_id"]])
        biggest = max(gaps)
        assert biggest[0] == pytest.approx(label["magnitude_ms"], abs=1.0)
        assert [biggest[1], biggest[2]] == label["step_ids"]
        assert biggest[0] >= 1500
        gap_tasks.add(label["task_id"])
    normal = [g for task_id, steps in data["steps"].items() if task_id not in gap_tasks
              for g, _, _ in idle_gaps(steps)]
    assert max(normal) < 250


def test_declared_mode_parallelizable_calls_run_one_after_another_and_chains_say_what_they_consume(declared):
    data = declared
    for label in data["labels"]["parallelizable_calls"]:
        calls = [data["steps"][label["task_id"]][i] for i in label["step_ids"]]
        assert len(calls) >= 2 and all(c["depends_on"] == [] for c in calls)
        assert_serialised(calls, label)
    # Elsewhere, calls that do not depend on each other overlap, and calls that run in
    # sequence say which output they consumed.
    serial_ids = {i for lab in data["labels"]["parallelizable_calls"] for i in lab["step_ids"]}
    checked_parallel = checked_chain = 0
    for steps in data["steps"].values():
        tools = [s for s in work_steps(steps) if s.get("tool_name") and s["step_id"] not in serial_ids]
        for a, b in zip(tools, tools[1:], strict=False):
            between = [s for s in steps.values() if s["kind"] == "llm"
                       and a["started_at"] < s["started_at"] < b["started_at"]]
            if between:
                continue  # different turns
            if any(retried(x, b) for x in tools[:tools.index(b)]):
                continue  # agent code sent a failed call again
            if b["depends_on"]:
                assert b["depends_on"] == [a["step_id"]] and b["started_at"] >= a["ended_at"]
                checked_chain += 1
            else:
                assert b["started_at"] < a["ended_at"], (a, b)
                checked_parallel += 1
    assert checked_parallel > 50 and checked_chain > 50


def assert_serialised(calls: list[dict], label: dict) -> None:
    """One after another, or partly overlapping, each ending after the one before; the waste is
    what running them together would have saved: the time they spanned less the longest."""
    for before, after in zip(calls, calls[1:], strict=False):
        assert after["started_at"] > before["started_at"] and after["ended_at"] > before["ended_at"]
        if label["stagger"] == 1.0:
            assert after["started_at"] >= before["ended_at"]
    spanned = ms(max(c["ended_at"] for c in calls)) - ms(min(c["started_at"] for c in calls))
    longest = max(ms(c["ended_at"]) - ms(c["started_at"]) for c in calls)
    assert label["magnitude_ms"] == pytest.approx(spanned - longest, abs=0.5) and label["magnitude_ms"] > 0


# --- evidence mode: dependencies shown the way real agents show them ------------------------


def turns(steps: dict) -> list[tuple[dict, list[dict]]]:
    """(LLM step, the tool calls that ran after it and before the next LLM step), in order."""
    out: list[tuple[dict, list[dict]]] = []
    for s in work_steps(steps):
        if s["kind"] == "llm":
            out.append((s, []))
        elif out:
            out[-1][1].append(s)
    return out


def strings(value) -> list[str]:
    """Every string in arguments or a result (arguments may come as a JSON string), as a
    detector compares them: surrounding whitespace does not count."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value.strip()]
        return strings(parsed) if not isinstance(parsed, str) else [value.strip()]
    if isinstance(value, dict):
        return [x for v in value.values() for x in strings(v)]
    if isinstance(value, list):
        return [x for v in value for x in strings(v)]
    return []


def linking(value) -> set[str]:
    """Values a detector could read as a link between two calls: 8 characters, or 6 with a
    digit (broad on purpose, so that accidents would show)."""
    return {s for s in strings(value) if len(s) >= 8 or (len(s) >= 6 and any(c.isdigit() for c in s))}


def ids(value) -> set[str]:
    """The narrow kind: ids, paths, URLs — at least 7 characters with letters and digits."""
    return {s for s in strings(value) if len(s) >= 7 and any(c.isdigit() for c in s) and any(c.isalpha() for c in s)}


def trivial(step: dict) -> set:
    """The values that prove nothing when two calls share them: booleans, small numbers,
    short codes ("en", "EUR")."""
    def scalars(value):
        if isinstance(value, dict):
            return [x for v in value.values() for x in scalars(v)]
        if isinstance(value, list):
            return [x for v in value for x in scalars(v)]
        return [value]
    args = json.loads(step["tool_args"]) if isinstance(step["tool_args"], str) else step["tool_args"]
    result = json.loads(step["tool_result"]) if step.get("status") == "ok" and "tool_result" in step else {}
    return {json.dumps(v) for v in scalars(args) + scalars(result)
            if isinstance(v, bool) or (isinstance(v, int) and 0 <= v < 10) or (isinstance(v, str) and len(v) <= 3)}


def scalars(value) -> list[str]:
    """Every string and number in a JSON value, as text."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in scalars(v)]
    if isinstance(value, list):
        return [x for v in value for x in scalars(v)]
    return [str(value)] if isinstance(value, str | int | float) and not isinstance(value, bool) else []


def lineage(dependencies: dict, step_id: str) -> set[str]:
    """Every step whose result reached this one, directly or through others."""
    out, stack = set(), list(dependencies.get(step_id, ()))
    while stack:
        d = stack.pop()
        if d not in out:
            out.add(d)
            stack.extend(dependencies.get(d, ()))
    return out


def reported(steps: dict) -> bool:
    return any("tool_call_ids" in s for s in steps.values())


def test_the_same_seed_gives_identical_data_in_both_dependency_modes(sim, declared_sim):
    again = simulate(config())
    assert again.tasks == sim.tasks and again.labels == sim.labels and again.dependencies == sim.dependencies
    assert simulate(config(dependencies="declared")).tasks == declared_sim.tasks
    # The same workload either way: the same tasks, agents, releases and injected problems.
    assert [e[0]["task_id"] for e in sim.tasks] == [e[0]["task_id"] for e in declared_sim.tasks]
    assert sorted((lab["task_id"], lab["kind"]) for lab in sim.labels if lab["kind"] not in KINDS[-3:]) == \
        sorted((lab["task_id"], lab["kind"]) for lab in declared_sim.labels if lab["kind"] not in KINDS[-3:])
    with pytest.raises(ValueError, match="dependencies: one of evidence, declared"):
        simulate(config(dependencies="guessed"))


def test_declared_mode_every_step_names_what_it_consumed_and_starts_after_it(declared_sim, declared):
    """Each model call depends on exactly the calls of the turn before it (their results are in
    its context) and starts once the last of them is back; a chain agent's call names the one
    call of its turn it consumed, and starts after it; other calls consume nothing. Nothing of
    evidence mode (call ids, results) is sent."""
    data = declared
    chain = {agent.name for agent in AGENTS if agent.pattern == "chain"}
    assert declared_sim.dependencies == {}
    llm_checked = chained = 0
    for task_id, steps in data["steps"].items():
        for s in work_steps(steps):
            assert "depends_on" in s and not {"tool_call_ids", "tool_call_id", "tool_result"} & set(s)
        previous: list[dict] = []
        for llm, calls in turns(steps):
            assert sorted(llm["depends_on"]) == sorted(c["step_id"] for c in previous), (task_id, llm["step_id"])
            if previous:
                assert llm["started_at"] >= max(c["ended_at"] for c in previous)
                llm_checked += 1
            by_id = {c["step_id"]: c for c in calls}
            for call in calls:
                assert call["started_at"] >= llm["ended_at"]  # issued once the response is in
                if not call["depends_on"]:
                    continue
                assert data["tasks"][task_id]["name"] in chain, (task_id, call)
                [source] = call["depends_on"]
                assert source in by_id and by_id[source]["ended_at"] <= call["started_at"], (task_id, call)
                chained += 1
            previous = calls
    assert llm_checked > 300 and chained > 50


@pytest.mark.parametrize("mode", ["evidence", "declared"])
def test_every_label_measures_what_the_generator_did(request, mode):
    """A label's magnitude is the time the trace shows was lost: a slow call's excess over its
    tool's median, a repeat's own duration, the stall before a turn (from the end of the step
    before it to the model call after it), context growth's extra time to first token."""
    data = request.getfixturevalue("data" if mode == "evidence" else "declared")
    checked = defaultdict(int)
    for kind in ("slow_step", "repeated_tool_call", "serial_gap", "context_growth"):
        for label in data["labels"][kind]:
            steps = [data["steps"][label["task_id"]][i] for i in label["step_ids"]]
            duration = [ms(s["ended_at"]) - ms(s["started_at"]) for s in steps]
            if kind == "slow_step":
                expected = duration[0] - label["baseline_median_ms"]
            elif kind == "repeated_tool_call":
                assert steps[0]["tool_name"] == steps[1]["tool_name"] == label["tool"]
                expected = duration[1]
            elif kind == "serial_gap":
                before, after = steps
                assert ms(label["gap_start_ns"]) == pytest.approx(ms(before["ended_at"]), abs=0.01)
                expected = ms(after["started_at"]) - ms(label["gap_start_ns"])
            else:
                assert label["input_tokens"] == [s["input_tokens"] for s in steps]
                expected = sum(max(s["ttft_ms"] - steps[0]["ttft_ms"], 0.0) for s in steps[1:])
            assert label["magnitude_ms"] == pytest.approx(expected, abs=0.15), (kind, label)
            checked[kind] += 1
    assert min(checked.values()) >= 10 and len(checked) == 4, checked


def test_evidence_mode_never_sends_depends_on(sim, data):
    assert all("depends_on" not in e for events in sim.tasks for e in events)
    assert sum(len(d) for d in sim.dependencies.values()) > 300  # the dependencies are there all the same


def test_every_tool_step_carries_its_call_id_and_a_result(data):
    call_ids = []
    for steps in data["steps"].values():
        for s in work_steps(steps):
            if s["kind"] == "llm":
                assert "tool_call_id" not in s and "tool_result" not in s
                continue
            call_ids.append(s["tool_call_id"])
            assert s["tool_call_id"].startswith("call_")
            if s["status"] == "ok":
                assert isinstance(json.loads(s["tool_result"]), dict) and len(s["tool_result"]) < 1000
            elif s["status"] == "error":
                assert s["tool_result"] == s["error"]  # what the framework hands back to the model
            else:
                assert "tool_result" not in s  # timed out: nothing came back
    assert len(call_ids) == len(set(call_ids))


def test_every_dependency_shows_as_an_id_quoted_from_the_earlier_result(sim, data):
    checked = 0
    for task_id, dependencies in sim.dependencies.items():
        steps = data["steps"][task_id]
        for step_id, sources in dependencies.items():
            step = steps[step_id]
            for source_id in sources:
                source = steps[source_id]
                assert source["status"] == "ok" and source["ended_at"] <= step["started_at"]
                text = json.dumps(step["tool_args"]).lower()
                assert any(v.lower() in text for v in scalars(json.loads(source["tool_result"])) if len(v) >= 2), \
                    (step["tool_args"], source["tool_result"])
                checked += 1
    assert checked > 300


def test_the_values_are_those_of_real_traffic_not_of_a_detectors_rule(sim, data):
    """Short ids, shared values, values passed on written differently: calls of one turn that
    do not depend on each other share the user's id, and a value taken from a result reaches
    the next call upper-cased, inside a URL, inside a SQL statement."""
    shared_user = 0
    passed_on = defaultdict(int)
    customer_ids = []
    for task_id, steps in data["steps"].items():
        dependencies = sim.dependencies.get(task_id, {})
        for _, turn_calls in turns(steps):
            with_user = [c for c in turn_calls if isinstance(c["tool_args"], dict) and "customer_id" in c["tool_args"]]
            customer_ids += [c["tool_args"]["customer_id"] for c in with_user]
            for i, b in enumerate(with_user):
                for a in with_user[:i]:
                    if a["tool_args"]["customer_id"] == b["tool_args"]["customer_id"] and a["step_id"] not in lineage(dependencies, b["step_id"]) and not retried(a, b):
                        shared_user += 1
        for step_id, sources in dependencies.items():
            step = steps[step_id]
            args = step["tool_args"] if isinstance(step["tool_args"], dict) else json.loads(step["tool_args"])
            if step["tool_name"] == "book_option" and args["offer_id"].lower() in steps[sources[0]]["tool_result"]:
                passed_on["upper-cased"] += args["offer_id"] not in steps[sources[0]]["tool_result"]
            passed_on["in a URL"] += step["tool_name"] == "fetch_page"
            passed_on["in SQL"] += step["tool_name"] == "query_orders" and args["sql"].startswith("SELECT")
    assert shared_user > 5
    assert min(passed_on.values()) > 5 and len(passed_on) == 3, passed_on
    assert sum(len(c) <= 4 for c in customer_ids) > len(customer_ids) / 2


def test_the_calls_a_response_requested_carry_its_ids_and_follow_ups_of_agent_code_do_not(sim, data):
    with_ids = follow_ups = calling = 0
    for task_id, steps in data["steps"].items():
        dependencies = sim.dependencies.get(task_id, {})
        calling += any(s.get("tool_name") for s in steps.values())
        if not reported(steps):
            for llm, turn_calls in turns(steps):
                assert "tool_call_ids" not in llm and all(c["tool_call_id"] for c in turn_calls)
            continue
        with_ids += 1
        for llm, turn_calls in turns(steps):
            requested = llm.get("tool_call_ids", [])
            assert len(requested) == len(set(requested))
            assert bool(requested) == bool(turn_calls)  # the final answer requests nothing
            by_id = {c["tool_call_id"]: c for c in turn_calls}
            assert set(requested) <= set(by_id)
            for n, call in enumerate(turn_calls):
                if call["tool_call_id"] in requested or any(retried(a, call) for a in turn_calls[:n]):
                    continue
                # Not requested by the model: agent code ran it on a result of this very turn.
                follow_ups += 1
                sources = [by_id[c] for c in requested if by_id[c]["step_id"] in dependencies.get(call["step_id"], ())]
                assert len(sources) == 1 and sources[0]["ended_at"] <= call["started_at"]
    assert 0.7 < with_ids / calling < 0.8  # a quarter of instrumentations do not capture them
    assert follow_ups > 100


def test_calls_requested_together_run_concurrently_unless_the_turn_was_serialised(data):
    serialised = {i for lab in data["labels"]["parallelizable_calls"] for i in lab["step_ids"]}
    concurrent = 0
    for steps in data["steps"].values():
        if not reported(steps):
            continue
        for llm, turn_calls in turns(steps):
            requested = [c for c in turn_calls if c["tool_call_id"] in llm.get("tool_call_ids", [])]
            if len(requested) < 2:
                continue
            starts = [ms(c["started_at"]) for c in requested]
            if requested[0]["step_id"] in serialised:
                assert all(b["started_at"] > a["started_at"] and b["ended_at"] > a["ended_at"]
                           for a, b in zip(requested, requested[1:], strict=False))
            else:
                # Dispatched together, as frameworks do: a little skew, then they overlap.
                assert max(starts) - min(starts) < 10 and max(starts) < min(ms(c["ended_at"]) for c in requested)
                concurrent += 1
    assert concurrent > 200


def test_dependent_calls_come_in_a_later_turn_or_chained_in_the_same_one(sim, data):
    """Both shapes real agents produce: the model read the result and asked again, or agent code
    ran a follow-up at once. The same-turn chain runs one after another like a serialised turn,
    and is never labelled parallelizable: it depends on what it follows."""
    serialised = {i for lab in data["labels"]["parallelizable_calls"] for i in lab["step_ids"]}
    shapes = defaultdict(int)
    for task_id, dependencies in sim.dependencies.items():
        steps = data["steps"][task_id]
        turn_of = {c["step_id"]: n for n, (_, turn_calls) in enumerate(turns(steps)) for c in turn_calls}
        for step_id, sources in dependencies.items():
            for source_id in sources:
                if turn_of[step_id] == turn_of[source_id]:
                    shapes["same turn", data["tasks"][task_id]["name"]] += 1
                    assert step_id not in serialised and source_id not in serialised
                    step, source = steps[step_id], steps[source_id]
                    assert 0 <= ms(step["started_at"]) - ms(source["ended_at"]) < 100
                else:
                    assert turn_of[step_id] > turn_of[source_id]
                    shapes["later turn", data["tasks"][task_id]["name"]] += 1
    for agent in AGENTS:
        assert shapes["later turn", agent.name] > 10, agent.name
        if agent.code_chains:
            assert shapes["same turn", agent.name] > 10, agent.name


def test_parallelizable_labels_name_independent_calls_of_one_response_run_one_after_another(sim, data):
    seen = set()
    for label in data["labels"]["parallelizable_calls"]:
        steps = data["steps"][label["task_id"]]
        calls = [steps[i] for i in label["step_ids"]]
        dependencies = sim.dependencies.get(label["task_id"], {})
        assert len(calls) >= 2 and not any(set(dependencies.get(c["step_id"], ())) & set(label["step_ids"]) for c in calls)
        assert_serialised(calls, label)
        llm = [llm for llm, turn_calls in turns(steps) if calls[0] in turn_calls][0]
        # A label says what was injected, whether or not the trace shows which calls the
        # response requested: without call ids a detector can only call it possible.
        assert label["tool_call_ids_reported"] == reported(steps)
        if label["tool_call_ids_reported"]:
            assert [c["tool_call_id"] for c in calls] == llm["tool_call_ids"]
        else:
            assert "tool_call_ids" not in llm
        seen.add(label["tool_call_ids_reported"])
    assert seen == {True, False}


def test_context_growth_makes_input_tokens_and_ttft_climb(data):
    for label in data["labels"]["context_growth"]:
        llm = [data["steps"][label["task_id"]][i] for i in label["step_ids"]]
        assert len(llm) >= 5
        assert llm[-1]["input_tokens"] >= 4 * llm[0]["input_tokens"]
        assert llm[-1]["ttft_ms"] > llm[0]["ttft_ms"]
    growth_tasks = {lab["task_id"] for lab in data["labels"]["context_growth"]}
    for task_id, steps in data["steps"].items():
        llm = [s for s in work_steps(steps) if s["kind"] == "llm"]
        if task_id not in growth_tasks and len(llm) >= 2:
            assert llm[-1]["input_tokens"] < 2.5 * llm[0]["input_tokens"]


def _window_samples(data, label):
    """The device's samples from the first to the last labelled step of a hardware label."""
    steps = [data["steps"][label["task_id"]][i] for i in label["step_ids"]]
    start, end = min(s["started_at"] for s in steps), max(s["ended_at"] for s in steps)
    host = label["device"].split(":")[0]
    return steps, [s for s in data["samples"][host] if start - 10**10 <= s["ts"] <= end + 10**10]


def _normal_llm(data, device):
    hw_steps = {i for k in ("hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure")
                for lab in data["labels"][k] for i in lab["step_ids"]}
    return [s for steps in data["steps"].values() for s in steps.values()
            if s.get("device") == device and s["kind"] == "llm" and s["step_id"] not in hw_steps]


def _hardware_steps(data, kind):
    """(labelled step, the same device and model's normal steps) for each step of a kind."""
    pairs = []
    for label in data["labels"][kind]:
        steps, _ = _window_samples(data, label)
        normal = _normal_llm(data, label["device"])
        pairs += [(s, [n for n in normal if n["model"] == s["model"]]) for s in steps]
    return pairs


SLOWDOWN_BITS = 0x8 | 0x20 | 0x40 | 0x80  # DCGM clock-event reasons: HW slowdown, thermal, power brake


def _slowing(sample) -> bool:
    """A GPU reporting a slowdown reason with its SM clock well under max, or (d-Matrix, Groq:
    no clock readings) an accelerator at its throttle temperature."""
    m = sample["metrics"]
    if sample["role"] != "gpu":
        return False
    if "clock_reasons" in m:
        return bool(int(m["clock_reasons"]) & SLOWDOWN_BITS) and m["sm_clock_mhz"] < 0.7 * m["sm_clock_max_mhz"]
    return m["temperature_c"] >= profile_for(sample["vendor"]).throttle_temp_c - 2


def _runs(data, hit):
    """Per host, the [first, last] ts of consecutive samples of one device for which `hit` holds."""
    runs = defaultdict(list)
    for host, host_samples in data["samples"].items():
        by_device = defaultdict(list)
        for s in host_samples:
            by_device[s["device"]].append(s)
        for ordered in by_device.values():
            ordered.sort(key=lambda s: s["ts"])
            for prev, s in zip([None, *ordered], ordered, strict=False):
                if hit(s):
                    if prev is not None and hit(prev):
                        runs[host][-1][1] = s["ts"]
                    else:
                        runs[host].append([s["ts"], s["ts"]])
    return runs


def test_throttling_window_shows_in_telemetry_and_slows_decode_on_that_device(data):
    assert data["labels"]["hardware_throttling"]
    for label in data["labels"]["hardware_throttling"]:
        steps, samples = _window_samples(data, label)
        assert any(_slowing(s) for s in samples), label
        assert set(label["verdicts"].values()) == {"throttling"}
    ratios = [tpot(step) / median(tpot(n) for n in normal) for step, normal in _hardware_steps(data, "hardware_throttling")]
    assert median(ratios) > 1.4 and sum(r > 1.15 for r in ratios) >= 0.9 * len(ratios)
    # No slowdown outside the windows: they last at most 5.5 minutes, the labelled steps sit inside.
    runs = _runs(data, _slowing)
    assert all(hi - lo <= 330e9 for host_runs in runs.values() for lo, hi in host_runs)
    for label in data["labels"]["hardware_throttling"]:
        for step_id in label["step_ids"]:
            start = data["steps"][label["task_id"]][step_id]["started_at"]
            assert any(lo - 10e9 <= start <= hi + 10e9 for lo, hi in runs[label["device"].split(":")[0]])


def test_gpus_report_dcgm_names_and_servers_vllm_names(data):
    gpu = [s for h, ss in data["samples"].items() if h.startswith("gpu-") for s in ss if s["role"] == "gpu"]
    assert gpu and all({"utilization", "sm_clock_mhz", "sm_clock_max_mhz", "clock_reasons", "power_w",
                        "temperature_c", "fb_used_mib"} <= set(s["metrics"]) for s in gpu)
    assert all(s["vendor"] == "nvidia" and s["device"].startswith("GPU-") for s in gpu)
    servers = [s for ss in data["samples"].values() for s in ss if s["role"] == "server"]
    assert servers and all(set(s["metrics"]) == {"queue_depth", "batch_size", "kv_cache_usage", "preemptions"}
                           for s in servers)
    others = [s for h, ss in data["samples"].items() if not h.startswith("gpu-") for s in ss if s["role"] == "gpu"]
    assert others and all(set(s["metrics"]) == {"power_w", "temperature_c"} for s in others)
    # No private agentops.device.* field and no native throttle flag: only what exporters send.
    assert not any("throttled" in s["metrics"] for ss in data["samples"].values() for s in ss)
    # Every LLM step names the server that answered, as a client's server.address:server.port.
    llm = [s for steps in data["steps"].values() for s in steps.values() if s["kind"] == "llm"]
    assert {s["device"] for s in llm} <= {f"{h}:8000" for h in data["samples"]}


def test_queueing_spike_shows_in_telemetry_and_delays_first_tokens(data):
    assert data["labels"]["hardware_queueing"]
    runs = _runs(data, lambda s: s["role"] == "server" and s["metrics"]["queue_depth"] > 8)
    assert all(hi - lo <= 330e9 for host_runs in runs.values() for lo, hi in host_runs)
    with_span = 0
    for label in data["labels"]["hardware_queueing"]:
        _, samples = _window_samples(data, label)
        assert max(s["metrics"]["queue_depth"] for s in samples if s["role"] == "server") >= 15
        assert set(label["verdicts"].values()) == {"queueing"}
        for step_id, extra in label["step_magnitude_ms"].items():
            server = data["server_steps"].get((label["task_id"], step_id))
            if server is not None:
                with_span += 1
                # The server's own account: the call waited in its queue (the rest of the added
                # time is decoding in a batch that is nearly full).
                assert server.attributes["agentops.serving"]["queue_ms"] >= min(300.0, 0.5 * extra)
    assert with_span
    excess = [step["ttft_ms"] - median(n["ttft_ms"] for n in normal)
              for step, normal in _hardware_steps(data, "hardware_queueing")]
    assert median(excess) > 800 and sum(e > 400 for e in excess) >= 0.9 * len(excess)


def test_kv_cache_incident_fills_the_cache_preempts_and_slows_only_the_preempted_calls(data):
    assert data["labels"]["hardware_kv_cache_pressure"]
    full = _runs(data, lambda s: s["role"] == "server" and s["metrics"]["kv_cache_usage"] > 0.9)
    assert all(hi - lo <= 330e9 for host_runs in full.values() for lo, hi in host_runs)
    for label in data["labels"]["hardware_kv_cache_pressure"]:
        _, samples = _window_samples(data, label)
        server = sorted((s for s in samples if s["role"] == "server"), key=lambda s: s["ts"])
        assert max(s["metrics"]["kv_cache_usage"] for s in server) >= 0.95
        assert server[-1]["metrics"]["preemptions"] > server[0]["metrics"]["preemptions"]
        assert set(label["verdicts"].values()) == {"kv_cache_pressure"}
        assert min(label["step_magnitude_ms"].values()) >= 600  # re-admission wait + recomputed prefill


def test_server_spans_are_vllm_llm_request_children_of_the_client_call(data):
    assert data["server_steps"]
    for (task_id, parent), server in data["server_steps"].items():
        client = data["steps"][task_id][parent]
        timings = server.attributes["agentops.serving"]
        assert client["kind"] == "llm" and server.name == "llm_request" and server.device == client["device"]
        assert 0 <= timings["queue_ms"] <= timings["ttft_ms"] <= timings["e2e_ms"] <= ms(client["ended_at"]) - ms(client["started_at"])


def test_releases_differ_the_way_the_docs_say(data):
    by_release = defaultdict(list)
    for task_id, steps in data["steps"].items():
        for s in steps.values():
            if s.get("tool_name") == "search_inventory" and s["status"] == "ok":
                by_release[data["tasks"][task_id]["release"]].append(ms(s["ended_at"]) - ms(s["started_at"]))
    assert median(by_release["v3"]) > 1.6 * median(by_release["v2"])
    cached = {data["tasks"][t]["release"]: any(s.get("cached_tokens") for s in steps.values())
              for t, steps in data["steps"].items()}
    assert cached["v1"] is False and cached["v2"] is True


# --- through the product -------------------------------------------------------------------


def _step_rows(project):
    return sorted(Step.objects.filter(project=project).values_list(
        "task__task_id", "step_id", "parent_step_id", "kind", "name", "started_at", "ended_at", "status",
        "error", "depends_on", "model", "device", "input_tokens", "output_tokens", "cached_tokens", "ttft_ms",
        "tool_name", "tool_args", "tool_result", "tool_call_id", "tool_call_ids", "attributes"))


def _sample_rows(project):
    return sorted(ResourceSample.objects.filter(project=project).values_list(
        "device", "ts", *ResourceSample.METRICS))


def test_simulate_stores_through_ingest_and_labels_never_reach_the_database(db, tmp_path, capsys):
    labels = tmp_path / "labels.jsonl"
    call_command("simulate", project="sim", tasks=80, since="1d", until=UNTIL, seed=3, anomaly_rate=0.5,
                 labels=str(labels), devices="gpu:1,dmatrix:1,groq:1")
    out = capsys.readouterr()
    project = Project.objects.get(name="sim")
    assert IngestKey.objects.filter(project=project).exists()  # created with a key, printed once
    assert "ingest key" in out.err and "Simulated 80 tasks" in out.out and "Injected problems:" in out.out
    assert Task.objects.filter(project=project).count() == 80
    assert set(Device.objects.filter(project=project).values_list("host", "role", "vendor", "hardware")) == {
        ("gpu-h100-01", "server", "", ""), ("gpu-h100-01", "gpu", "nvidia", "NVIDIA H100 80GB HBM3"),
        ("dmatrix-corsair-01", "server", "", ""), ("dmatrix-corsair-01", "gpu", "dmatrix", "Corsair"),
        ("groq-lpu-01", "server", "", ""), ("groq-lpu-01", "gpu", "groq", "LPU")}
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    assert rows and {r["task_id"] for r in rows} <= set(Task.objects.filter(project=project).values_list("task_id", flat=True))
    # Nothing label-only is stored anywhere: no kind names, magnitudes or verdicts.
    markers = [*KINDS, "magnitude", "verdict", "injected", "anomal"]
    text_fields = Q()
    for marker in markers:
        text_fields |= (Q(attributes__icontains=marker) | Q(name__icontains=marker) | Q(error__icontains=marker)
                        | Q(tool_result__icontains=marker))
    assert not Step.objects.filter(project=project).filter(text_fields).exists()
    for marker in markers:
        assert not Task.objects.filter(project=project, attributes__icontains=marker).exists()
        assert not Step.objects.filter(project=project, tool_args__icontains=marker).exists()
        assert not ResourceSample.objects.filter(project=project, extra__icontains=marker).exists()
    # Evidence mode by default: call ids and results stored, no dependency stated.
    steps = Step.objects.filter(project=project)
    assert not steps.exclude(depends_on=[]).exists()
    assert steps.filter(kind="llm").exclude(tool_call_ids=[]).exists()
    assert not steps.filter(kind__in=["tool", "retrieval"], tool_call_id="").exists()
    assert steps.filter(kind__in=["tool", "retrieval"], status="ok", tool_result="").count() == 0
    assert "Dependencies: evidence." in out.out
    # Running it again updates in place: same ids, no duplicates.
    before = Step.objects.filter(project=project).count()
    call_command("simulate", project="sim", tasks=80, since="1d", until=UNTIL, seed=3, anomaly_rate=0.5,
                 devices="gpu:1,dmatrix:1,groq:1", verbosity=0)
    assert Step.objects.filter(project=project).count() == before


def test_simulate_declared_sends_depends_on_and_no_call_evidence(db):
    call_command("simulate", project="declared", tasks=30, since="6h", until=UNTIL, seed=4,
                 devices="gpu:1", dependencies="declared", verbosity=0)
    steps = Step.objects.filter(project=Project.objects.get(name="declared"))
    assert steps.exclude(depends_on=[]).exists()
    assert not steps.exclude(tool_call_ids=[]).exists() and not steps.exclude(tool_call_id="").exists()
    assert not steps.exclude(tool_result="").exists()


@pytest.mark.django_db(transaction=True)
def test_http_mode_stores_exactly_what_in_process_mode_stores(live_server, make_key):
    options = {"tasks": 40, "since": "6h", "until": UNTIL, "seed": 9, "devices": "gpu:1,groq:1",
               "batch_size": 300, "verbosity": 0}
    call_command("simulate", project="local", **options)
    remote = Project.objects.create(name="remote")
    call_command("simulate", url=live_server.url, key=make_key(remote, "ingest"), **options)
    local = Project.objects.get(name="local")
    assert _step_rows(remote) == _step_rows(local) and len(_step_rows(local)) > 200
    assert _sample_rows(remote) == _sample_rows(local) and _sample_rows(local)
    assert sorted(Task.objects.filter(project=remote).values_list("task_id", "status", "duration_ms", "release")) == \
        sorted(Task.objects.filter(project=local).values_list("task_id", "status", "duration_ms", "release"))


@pytest.mark.parametrize("options,message", [
    ({"devices": "tpu:2"}, "--devices: unknown hardware vendor or family 'tpu'"),
    ({"devices": "gpu:x"}, "the count after ':' must be a number"),
    ({"devices": "gpu:1,nvidia:2"}, "--devices: gpu is named twice"),
    ({"since": "a week"}, "--since: 'a week' is not a duration"),
    ({"anomaly_rate": 1.5}, "--anomaly-rate: must be between 0 and 1"),
    ({"until": "yesterday"}, "--until: 'yesterday' is not an RFC 3339 timestamp"),
    ({"url": "http://localhost:1"}, "--url needs --key"),
    ({"labels": "/nonexistent/dir/labels.jsonl"}, "--labels: cannot write"),
    ({"dependencies": "guessed"}, "--dependencies: one of evidence, declared"),
])
def test_bad_options_are_refused_by_name(db, options, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_command("simulate", project="x", tasks=5, **options)
    assert not Task.objects.exists()


class _FlakyIngest(BaseHTTPRequestHandler):
    """A server that is overloaded at first: 429, then 503, then accepts."""

    answers: list[int] = []
    bodies: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status = self.answers.pop(0) if self.answers else 200
        self.send_response(status)
        if status != 200:
            self.send_header("Retry-After", "7")
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if status == 200:
            self.bodies.append({"auth": self.headers["Authorization"], "events": body["events"]})
            self.wfile.write(json.dumps({"accepted": len(body["events"]), "rejected": [{"index": 0, "error": "x"}]}).encode())
        else:
            self.wfile.write(b'{"error": "busy"}')

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_server():
    _FlakyIngest.answers, _FlakyIngest.bodies = [429, 503], []
    server = HTTPServer(("127.0.0.1", 0), _FlakyIngest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_http_mode_waits_as_told_on_429_and_503_and_then_delivers(flaky_server):
    waits, sent = [], []
    rejected = post_http(url=flaky_server, key="ao_k_s", batches=[[{"type": "task", "task_id": "t1"}]],
                         progress=sent.append, sleep=waits.append)
    assert waits == [7.0, 7.0]  # Retry-After honoured, twice
    assert sent == [1] and rejected == 1
    assert _FlakyIngest.bodies == [{"auth": "Bearer ao_k_s", "events": [{"type": "task", "task_id": "t1"}]}]


def test_http_mode_gives_up_with_the_servers_answer_on_other_errors(flaky_server):
    _FlakyIngest.answers = [401]
    with pytest.raises(SinkError, match="answered 401"):
        post_http(url=flaky_server, key="bad", batches=[[{"type": "task", "task_id": "t1"}]],
                  progress=lambda n: None, sleep=lambda s: None)


def test_a_task_cut_to_one_turn_with_failing_calls_still_generates(monkeypatch):
    """A timeout can leave a single tool turn; a failed call in it once crashed the generator
    (seen at seed 9 over 90,909 tasks)."""
    from analysis.simulator import generate

    monkeypatch.setattr(generate, "TIMEOUT_RATE", 1.0)
    monkeypatch.setattr(generate, "ERROR_RATE", 1.0)
    result = simulate(config(tasks=60, anomaly_rate=0.0, seed=9))
    assert result.events
