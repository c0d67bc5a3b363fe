
import pytest

from analysis.engine.budget import latency_budget
from analysis.engine.critical_path import critical_path, path_step_ids

from .detectors.builders import T0, step


def ids(steps, start=0.0, end=None):
    end = end if end is not None else max(s.end_ms for s in steps) - T0
    return path_step_ids(critical_path(steps, T0 + start * 1000, T0 + end))


def test_the_longer_of_two_parallel_children_is_on_the_path():
    steps = [step("root", "agent", 0, 6), step("a", "tool", 0, 5, parent_step_id="root"),
             step("b", "tool", 0, 3, parent_step_id="root"), step("c", "llm", 5, 6, parent_step_id="root")]
    assert ids(steps, end=6000) == ["a", "c"]


def test_overlapping_steps_are_clipped_so_segments_tile_the_task():
    steps = [step("a", "llm", 0, 4), step("b", "tool", 3, 6), step("c", "tool", 7, 8)]
    segments = critical_path(steps, T0, T0 + 9000)
    assert [(s.step.step_id if s.step else None, round(s.start_ms - T0), round(s.end_ms - T0)) for s in segments] == [
        ("a", 0, 3000), ("b", 3000, 6000), (None, 6000, 7000), ("c", 7000, 8000), (None, 8000, 9000)]


def test_budget_sums_to_the_task_duration_and_splits_ttft():
    steps = [step("root", "agent", 0, 10), step("l", "llm", 0.5, 3, parent_step_id="root", ttft_ms=500),
             step("t", "tool", 3, 5, parent_step_id="root"), step("r", "retrieval", 4, 6, parent_step_id="root"),
             step("q", "queue", 6, 7, parent_step_id="root"), step("f", "framework", 7, 7.5, parent_step_id="root")]
    segments = critical_path(steps, T0, T0 + 10000)
    budget = latency_budget(segments, queue_wait_ms={"l": 200})
    assert budget == {"prefill": 300, "decode": 2000, "tool": 1000, "retrieval": 2000, "queue": 1200,
                      "framework": 3500}
    assert sum(budget.values()) == 10000


def test_a_step_that_runs_past_the_task_end_is_clipped():
    steps = [step("a", "tool", 0, 12)]
    budget = latency_budget(critical_path(steps, T0, T0 + 10000))
    assert sum(budget.values()) == 10000


def _deep_chain(n: int) -> list:
    return [step(f"s{i}", "llm" if i % 3 == 0 else ("framework" if i % 7 == 0 else "tool"), i * 0.1,
                 i * 0.1 + 0.09, parent_step_id=f"s{i - 1}" if i % 2 and i else "", ttft_ms=20)
            for i in range(n)]


def test_fifty_thousand_steps_with_a_deep_chain_tile_the_task():
    # A 25,000-deep parent chain: no recursion, and the path's segments tile the task exactly.
    # (Its speed is the benchmark's: the 50,000-step task detail in docs/scaling.md.)
    n = 50_000
    segments = critical_path(_deep_chain(n), T0, T0 + n * 100)
    assert segments[0].start_ms == T0 and segments[-1].end_ms == T0 + n * 100
    assert all(a.end_ms == b.start_ms for a, b in zip(segments, segments[1:], strict=False))
    assert abs(sum(latency_budget(segments).values()) - n * 100) < 1


def test_a_wrapper_leaf_beside_the_model_call_does_not_hide_it():
    # LangGraph with OpenInference: the model call is a sibling of a chain leaf that wraps the
    # same time and ends a moment later; a routing node runs after it.
    steps = [step("node", "framework", 0, 1.2), step("call_model", "framework", 0.05, 1.01, parent_step_id="node"),
             step("llm", "llm", 0.06, 1.0, parent_step_id="node"),
             step("route", "framework", 1.01, 1.2, parent_step_id="node")]
    segments = critical_path(steps, T0, T0 + 1200)
    ids = [seg.step.step_id if seg.step else None for seg in segments]
    assert "llm" in ids and ids.index("llm") < ids.index("route")
    llm = next(seg for seg in segments if seg.step and seg.step.step_id == "llm")
    assert llm.length == pytest.approx(940)
    assert sum(seg.length for seg in segments) == pytest.approx(1200)


def test_a_model_call_with_its_request_spans_below_it_is_on_the_path_as_model_time():
    # chat → POST (an instrumented HTTP client) → llm_request (vLLM's span): the request spans are the
    # call's own, so the path names the call and the budget counts its time as the model's, not as
    # two unclassified leaves.
    from analysis.engine.analyse import analyse

    from .detectors.builders import task

    steps = [step("root", "agent", 0, 3), step("chat", "llm", 0.1, 2.1, parent_step_id="root", output_tokens=10),
             step("post", "other", 0.11, 2.09, parent_step_id="chat", name="POST"),
             step("srv", "other", 0.12, 2.08, parent_step_id="post", name="llm_request",
                  serving={"queue_ms": 10.0, "e2e_ms": 1960.0}),
             step("tool", "tool", 2.2, 2.9, parent_step_id="root", tool_name="lookup")]
    result = analyse(task(steps))
    assert result["critical_path"] == ["chat", "tool"]
    assert result["budget"]["decode"] + result["budget"].get("prefill", 0) == pytest.approx(2000)
