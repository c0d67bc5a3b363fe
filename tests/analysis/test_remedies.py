"""What to change, per finding, from its evidence; near-identical findings of one task grouped."""

from types import SimpleNamespace

from analysis.dashboard.remedies import MIN_GROUP, FindingGroup, grouped, remedy


def test_parallel_calls_are_named_with_the_time_saved_and_a_possible_one_says_if():
    labels = {"a": "get_weather", "b": "get_time", "c": "search_news"}
    line = remedy("parallelizable_calls", {"calls": 3}, 1200.0, labels=labels, step_ids=["a", "b", "c"])
    assert line.startswith("run get_weather, get_time, search_news concurrently") and line.endswith("saves 1.2 s")
    possible = remedy("parallelizable_calls", {"calls": 3}, 1200.0, counted=False, labels=labels, step_ids="abc")
    assert possible.startswith("if they are independent, run") and possible.endswith("would save 1.2 s")
    # Without the steps' names (the findings API), the calls are counted, never shown as ids.
    assert remedy("parallelizable_calls", {"calls": 3}, 1200.0, step_ids=["a", "b", "c"]).startswith("run these 3 calls")


def test_a_repeat_is_cached_by_its_arguments_and_growth_says_how_much_the_prompt_grew():
    line = remedy("repeated_tool_call", {"tool": "lookup_order", "arguments": '{"order_id":"A7"}'}, 800.0)
    assert line == 'cache lookup_order(order_id="A7") for the task, or pass the first result on: saves 800 ms'
    growth = remedy("context_growth", {"input_tokens": [1000, 2000, 4100], "turns": 3}, 2500.0)
    assert growth.startswith("the prompt grew 4.1× over 3 turns: summarise or trim")


def test_hardware_names_the_server_and_an_unexplained_slow_call_gets_no_advice():
    assert remedy("hardware_queueing", {"device": "vllm-2"}, 3000.0).startswith("vllm-2 was saturated: scale out")
    assert remedy("slow_step", {"verdict": "nominal"}, 3000.0) is None
    assert remedy("slow_step", {"baseline_median_ms": 400}, 3000.0) is None  # a tool slower than usual: no guess


def _f(kind, device, wasted, counted=True):
    return SimpleNamespace(kind=kind, evidence={"device": device}, wasted_ms=wasted, is_counted=counted,
                           confidence="high", confidence_reason="", severity="medium", step_ids=[f"s{wasted}"],
                           summary=f"{kind} {wasted}")


def test_many_findings_of_one_kind_on_one_server_become_one_row_at_the_first_ones_place():
    queued = [_f("hardware_queueing", "groq-lpu-02", 1000.0 + i) for i in range(11)]
    other = _f("serial_gap", "", 500.0)
    rows = grouped([queued[0], other, *queued[1:], _f("hardware_queueing", "vllm-1", 40.0)])
    assert isinstance(rows[0], FindingGroup) and rows[1] is other and len(rows) == 3
    assert rows[0].summary == "11 calls on groq-lpu-02 waited in queue: 11.1 s"
    assert rows[0].remedy.startswith("groq-lpu-02 was saturated") and rows[0].remedy.endswith("saves 11.1 s")
    # Fewer than MIN_GROUP, or only possible ones, stay rows of their own.
    few = [_f("hardware_queueing", "x", 1.0) for _ in range(MIN_GROUP - 1)]
    possible = [_f("hardware_queueing", "y", 1.0, counted=False) for _ in range(MIN_GROUP + 1)]
    assert grouped(few + possible) == few + possible
