from analysis.detectors import parallelizable_calls

from .builders import step, task


def detect(ctx):
    return list(parallelizable_calls.detect(ctx))


def llm(step_id, start, end):
    return step(step_id, "llm", start, end, model="m")


def test_independent_calls_of_one_turn_run_serially_waste_sum_minus_max():
    ctx = task([llm("l1", 0, 1),
                step("a", "tool", 1, 1.5, tool_name="weather"),
                step("b", "tool", 1.5, 2.5, tool_name="news"),
                step("c", "tool", 2.5, 2.8, tool_name="stocks"),
                llm("l2", 2.8, 3.5)])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b", "c")
    assert round(finding.wasted_ms) == 800  # 1800 - 1000
    assert finding.evidence["parallel_ms"] == 1000


def test_calls_that_depend_on_each_other_must_not_fire():
    ctx = task([llm("l1", 0, 1),
                step("a", "tool", 1, 1.5, tool_name="find_user"),
                step("b", "tool", 1.5, 2.5, tool_name="find_orders", depends_on=("a",)),
                step("c", "tool", 2.5, 3.0, tool_name="refund", depends_on=("b",)),
                llm("l2", 3, 3.5)])
    assert detect(ctx) == []


def test_a_partly_dependent_group_wastes_only_what_the_chain_allows():
    ctx = task([llm("l1", -1, 0),
                step("a", "tool", 0, 1, tool_name="find_user"),
                step("b", "tool", 1, 2, tool_name="find_orders", depends_on=("a",)),
                step("c", "tool", 2, 2.5, tool_name="weather")])
    [finding] = detect(ctx)
    assert round(finding.wasted_ms) == 500  # 2500 actual, chain a→b = 2000
    assert finding.evidence["dependent_step_ids"] == ["a", "b"]


def test_calls_of_different_turns_are_not_grouped():
    ctx = task([step("a", "tool", 0, 1, tool_name="x"), llm("l", 1, 2), step("b", "tool", 2, 3, tool_name="y")])
    assert detect(ctx) == []


def test_calls_already_in_parallel_are_fine():
    ctx = task([step("a", "tool", 0, 1, tool_name="x"), step("b", "tool", 0.01, 1.02, tool_name="y")])
    assert detect(ctx) == []


def test_a_small_but_certain_serialisation_is_reported():
    ctx = task([llm("l1", -1, 0), step("a", "tool", 0, 0.4, tool_name="refund"),
                step("b", "retrieval", 0.41, 0.48, name="kb")])
    [finding] = detect(ctx)
    assert round(finding.wasted_ms) == 70


def test_calls_dispatched_together_with_a_little_skew_are_not_serial():
    ctx = task([step("a", "tool", 0, 0.5, tool_name="x"), step("b", "tool", 0.03, 0.6, tool_name="y")])
    assert detect(ctx) == []


def test_calls_before_any_llm_answer_are_a_pipeline_not_a_turn():
    ctx = task([step("r", "retrieval", 0, 0.5, name="vector_search"),
                step("k", "tool", 0.5, 1.2, tool_name="rerank"),
                llm("l1", 1.2, 3)])
    assert detect(ctx) == []
