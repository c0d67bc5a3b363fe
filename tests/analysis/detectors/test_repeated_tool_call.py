from analysis.engine.detectors import repeated_tool_call
from analysis.engine.detectors.base import canonical_args

from .builders import step, task


def detect(ctx):
    return list(repeated_tool_call.detect(ctx))


def test_same_arguments_in_another_order_and_spacing_is_a_repeat():
    ctx = task([
        step("a", "tool", 0, 0.9, tool_name="search_order", tool_args={"order_id": "A-1", "full": True}),
        step("b", "tool", 2, 2.6, tool_name="search_order", tool_args='{ "full": true,  "order_id": "A-1" }'),
        step("c", "tool", 4, 4.4, tool_name="search_order", tool_args={"full": True, "order_id": " A-1"}),
    ])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b", "c")
    assert round(finding.wasted_ms) == 1000
    assert finding.summary == "search_order called 3× with the same full and order_id; 1 s repeated."
    assert finding.evidence["calls"] == 3


def test_a_tool_called_twice_with_different_arguments_is_not_a_repeat():
    ctx = task([step("a", "tool", 0, 1, tool_name="search_order", tool_args={"order_id": "A-1"}),
                step("b", "tool", 2, 3, tool_name="search_order", tool_args={"order_id": "A-2"})])
    assert detect(ctx) == []


def test_a_retry_after_a_failure_is_not_waste():
    ctx = task([step("a", "tool", 0, 1, tool_name="pay", tool_args={"id": 1}, status="error"),
                step("b", "tool", 2, 3, tool_name="pay", tool_args={"id": 1})])
    assert detect(ctx) == []


def test_the_same_arguments_to_different_tools_are_not_a_repeat():
    ctx = task([step("a", "tool", 0, 1, tool_name="get_user", tool_args={"id": 1}),
                step("b", "tool", 2, 3, tool_name="get_order", tool_args={"id": 1})])
    assert detect(ctx) == []


def test_canonical_arguments_ignore_key_order_and_whitespace_but_not_values():
    assert canonical_args({"b": 1, "a": "x  y"}) == canonical_args('{"a": "x y", "b": 1.0}')
    assert canonical_args({"a": "xy"}) != canonical_args({"a": "x y"})


def test_a_repeated_retrieval_counts_too():
    ctx = task([step("a", "retrieval", 0, 0.1, name="vector_search", tool_args={"query": "EU AI act", "k": 8}),
                step("b", "retrieval", 5, 5.2, name="vector_search", tool_args={"k": 8, "query": " EU  AI act "})])
    [finding] = detect(ctx)
    assert round(finding.wasted_ms) == 200


def test_hostile_or_odd_arguments_never_break_the_detector():
    odd = [["a", 1], "not json {", 12, None, {"nested": {"deep": [1, {"x": "\u0000"}]}}, "<script>x</script>"]
    steps = [step(f"s{i}-{j}", "tool", i * 2 + j, i * 2 + j + 0.5, tool_name="t", tool_args=a)
             for i, a in enumerate(odd) for j in (0, 1) if a is not None or j == 0]
    found = {f.evidence["arguments"] for f in detect(task(steps))}
    assert '["a",1]' in found and '"<script>x</script>"' in found and "12" in found


def test_the_same_call_with_the_same_arguments_and_result_is_a_sure_repeat():
    ctx = task([step("a", "tool", 0, 1, tool_name="get_order", tool_args={"id": "A-1"}, tool_result='{"s": 1}'),
                step("b", "tool", 2, 3, tool_name="get_order", tool_args={"id": "A-1"}, tool_result='{"s": 1}')])
    [finding] = detect(ctx)
    assert finding.confidence == "high"


def test_a_repeat_that_returned_something_new_may_be_polling():
    ctx = task([step("a", "tool", 0, 1, tool_name="job_status", tool_args={"job": "j-1"}, tool_result="running"),
                step("b", "tool", 2, 3, tool_name="job_status", tool_args={"job": "j-1"}, tool_result="done")])
    [finding] = detect(ctx)
    assert finding.confidence == "medium"
    assert "polling" in finding.confidence_reason
