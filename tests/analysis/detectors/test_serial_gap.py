from analysis.engine.detectors import serial_gap

from .builders import step, task


def detect(ctx):
    return list(serial_gap.detect(ctx))


def test_idle_time_between_steps_is_a_gap():
    ctx = task([step("root", "agent", 0, 5),
                step("a", "llm", 0.0, 1.0, parent_step_id="root", model="m"),
                step("b", "tool", 1.02, 1.5, parent_step_id="root", tool_name="search"),
                step("c", "llm", 3.5, 5.0, parent_step_id="root", model="m")])
    [finding] = detect(ctx)
    assert round(finding.wasted_ms) == 2000
    assert finding.step_ids == ("b", "c")
    assert "2 s with no step running between search and m" in finding.summary


def test_normal_hand_offs_and_parallel_overlap_are_not_gaps():
    ctx = task([step("a", "llm", 0, 1, model="m"), step("b", "tool", 1.03, 2, tool_name="x"),
                step("c", "tool", 1.05, 2.5, tool_name="y"), step("d", "llm", 2.55, 4, model="m")])
    assert detect(ctx) == []


def test_a_long_framework_step_counts_as_overhead_and_is_named():
    ctx = task([step("a", "llm", 0, 1, model="m"), step("f", "framework", 1, 2.5, name="router"),
                step("b", "llm", 2.5, 3, model="m")])
    [finding] = detect(ctx)
    assert "f" in finding.step_ids
    assert round(finding.wasted_ms) == 1500


def test_the_wait_before_the_first_step_and_after_the_last_counts():
    ctx = task([step("a", "llm", 1, 2, model="m")], end_s=3)
    assert sorted(round(f.wasted_ms) for f in detect(ctx)) == [1000, 1000]
