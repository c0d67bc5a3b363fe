import pytest

from analysis.engine.detectors import parallelizable_calls

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


# --- dependencies inferred from evidence (no depends_on, as real agents send them) ----------


def chat(step_id, start, end, *call_ids):
    return step(step_id, "llm", start, end, model="m", tool_call_ids=tuple(call_ids))


def call(step_id, start, end, tool, args, result="", call_id=""):
    return step(step_id, "tool", start, end, tool_name=tool, tool_args=args, tool_result=result,
                tool_call_id=call_id)


def test_calls_requested_in_one_response_are_independent_with_high_confidence():
    ctx = task([chat("l1", 0, 1, "call_a", "call_b"),
                call("a", 1, 1.5, "get_weather", {"city": "Paris"}, call_id="call_a"),
                call("b", 1.5, 2.5, "get_news", {"topic": "Paris"}, call_id="call_b"),
                chat("l2", 2.5, 3)])
    [finding] = detect(ctx)
    assert finding.confidence == "high"
    assert "one response" in finding.confidence_reason
    assert round(finding.wasted_ms) == 500


def test_an_id_flowing_from_a_result_into_the_next_call_is_a_dependency():
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.5, "search_orders", {"customer": "Ada"}, '{"order_id": "ord_8f3k2q", "total": 12}'),
                call("b", 1.5, 2.5, "get_order", {"order_id": "ord_8f3k2q"}),
                chat("l2", 2.5, 3)])
    assert detect(ctx) == []


def test_a_value_the_earlier_call_only_passed_on_is_not_its_output():
    # Both calls were handed ord_8f3k2q by an earlier turn; the first merely echoes it back.
    ctx = task([call("s", 0, 0.5, "search_orders", {"q": "Ada"}, '{"order_id": "ord_8f3k2q"}'),
                chat("l1", 0.5, 1),
                call("a", 1, 1.5, "get_order", {"order_id": "ord_8f3k2q"}, '{"order_id": "ord_8f3k2q", "ok": true}'),
                call("b", 1.5, 2.5, "get_shipping", {"order_id": "ord_8f3k2q"}, '{"eta": "2 days"}'),
                chat("l2", 2.5, 3)])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b")
    # Not a's output, but both act on one order: with no call ids to say whether the model asked
    # for both or code chained them, it is only possible.
    assert finding.confidence == "low"


def test_a_follow_up_started_by_agent_code_on_the_same_value_waited_on_purpose():
    # The model asked for the patch; the agent's code then lints the file it patched.
    ctx = task([chat("l1", 0, 1, "c1"),
                call("a", 1, 1.5, "apply_patch", {"file": "src/mod_140.py"}, '{"applied": 2}', call_id="c1"),
                call("b", 1.5, 2.5, "run_linter", {"paths": ["src/mod_140.py"]}, '{"ok": true}', call_id="c9"),
                chat("l2", 2.5, 3)])
    assert detect(ctx) == []


def test_a_value_from_the_first_result_in_a_call_requested_with_it_is_a_dependency():
    # A planner's response asks for run_query and render_chart {"query_id": "$1.query_id"}; the
    # executor fills the placeholder from run_query's result, so the recorded arguments carry the
    # id run_query returned: requested together, yet one had to wait for the other.
    ctx = task([chat("l1", 0, 1, "c1", "c2"),
                call("a", 1, 1.8, "run_query", {"sql": "SELECT region, SUM(total) FROM sales.orders GROUP BY 1"},
                     '{"query_id": "qr_c0d8", "status": "done", "row_count": 4}', call_id="c1"),
                call("b", 1.8, 2.5, "render_chart", {"x": "region", "kind": "bar", "query_id": "qr_c0d8"},
                     '{"chart_url": "https://charts.internal/qr_c0d8.png"}', call_id="c2"),
                chat("l2", 2.5, 3)])
    assert detect(ctx) == []


def test_calls_one_response_requested_on_the_same_value_are_still_independent():
    ctx = task([chat("l1", 0, 1, "c1", "c2"),
                call("a", 1, 1.5, "get_order", {"order_id": "ord_8f3k2q"}, '{"status": "paid"}', call_id="c1"),
                call("b", 1.5, 2.5, "get_shipment", {"order_id": "ord_8f3k2q"}, '{"eta": "2d"}', call_id="c2"),
                chat("l2", 2.5, 3)])
    [finding] = detect(ctx)
    assert finding.confidence == "high"


def test_a_trivial_shared_value_is_not_evidence_of_dependence_nor_is_no_flow_seen_of_independence():
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.5, "get_weather", {"city": "Oslo", "metric": True, "days": 1},
                     '{"ok": true, "days": 1, "lang": "en"}'),
                call("b", 1.5, 2.5, "get_news", {"lang": "en", "verbose": True, "limit": 1}, '{"items": []}'),
                chat("l2", 2.5, 3)])
    [finding] = detect(ctx)
    assert finding.evidence["dependent_step_ids"] == []
    assert (finding.confidence, finding.evidence["basis"]) == ("low", "no_flow_seen")


def test_concurrent_calls_give_no_finding_whatever_the_evidence():
    ctx = task([chat("l1", 0, 1, "c1", "c2"),
                call("a", 1, 2, "get_weather", {"city": "Oslo"}, call_id="c1"),
                call("b", 1.02, 2.1, "get_news", {"topic": "Oslo"}, call_id="c2"),
                chat("l2", 2.1, 3)])
    assert detect(ctx) == []


def test_with_no_evidence_either_way_the_finding_is_only_possible():
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.5, "get_weather", {"city": "Oslo"}),
                call("b", 1.5, 2.5, "get_news", {"topic": "Oslo"}),
                chat("l2", 2.5, 3)])
    [finding] = detect(ctx)
    assert finding.confidence == "low"
    assert finding.summary.startswith("Possibly")
    assert "nothing shows" in finding.confidence_reason


def test_framework_wrapper_spans_do_not_split_a_turn():
    # LangGraph-style: the model runs under an "agent" node, the tools under a "tools" node.
    ctx = task([step("agent", "framework", 0, 1), chat("l1", 0.1, 0.9, "c1", "c2"),
                step("tools", "framework", 1, 2.5),
                step("a", "tool", 1, 1.5, tool_name="x", tool_args={"q": 1}, tool_call_id="c1", parent_step_id="tools"),
                step("b", "tool", 1.5, 2.5, tool_name="y", tool_args={"q": 2}, tool_call_id="c2", parent_step_id="tools")])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b") and finding.confidence == "high"


def test_call_ids_say_which_response_a_call_answers_even_when_timing_blurs_turns():
    # b was requested by l1 but started after l2 (a slow dispatcher): it is l1's, not l2's.
    ctx = task([chat("l1", 0, 1, "c1", "c2"),
                call("a", 1, 1.5, "x", {"q": 1}, call_id="c1"),
                chat("l2", 1.5, 1.6, "c3"),
                call("b", 1.6, 2.5, "y", {"q": 2}, call_id="c2"),
                call("c", 2.5, 3.0, "z", {"q": 3}, call_id="c3")])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b")


def test_the_hand_off_before_a_dependent_call_is_not_parallelism_to_win():
    # b reads what a found, 25 ms after a ended (the agent's dispatch); c, independent, overlapped.
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.5, "search_code", {"q": "null pointer"}, '{"path": "src/null/mod_137.py"}'),
                call("b", 1.525, 1.6, "read_file", {"path": "src/null/mod_137.py"}, '{"lines": 37}'),
                call("c", 1.51, 1.6, "read_file", {"path": "src/x/mod_505.py"}, '{"lines": 3}')])
    assert detect(ctx) == []


def test_numbers_and_versions_are_evidence_only_as_large_whole_numbers():
    from analysis.engine.detectors.dependencies import distinctive_values

    assert distinctive_values({"v": "release 10.2.3", "n": 4821.5, "id": "48213", "big": 123456.0}) == {
        "48213", "123456"}
    # A shared version string neither crashes the detector nor links two calls.
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.5, "get_changelog", {"version": "10.2.3"}, '{"version": "10.2.3", "ok": true}'),
                call("b", 1.5, 2.5, "get_docs", {"version": "10.2.3"}, '{"pages": 3}'),
                chat("l2", 2.5, 3)])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b")


@pytest.mark.parametrize("follow_up_args", [
    {"sql": "select * from customers where id = 'c4622'"},   # a short id from the result
    {"customer": "C4622"},                                      # upper-cased on the way
    {"url": "https://crm.example/customers/c4622/log"},         # inside a URL
])
def test_a_short_id_from_a_result_in_the_next_arguments_is_a_dependency(follow_up_args):
    """The orders -> customers lookup of an ordinary agent: not a parallelisation to advise."""
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.3, "run_query", {"sql": "select * from orders where id = 4622"},
                     '{"rows": [{"id": "4622", "customer": "c4622"}]}'),
                call("b", 1.31, 1.6, "run_query", follow_up_args, '{"rows": []}'),
                chat("l2", 1.6, 2)])
    assert detect(ctx) == []


def test_words_and_small_numbers_two_calls_share_are_no_dependency():
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.5, "get_weather", {"city": "Paris"}, '{"region": "EU", "temp": 17}'),
                call("b", 1.5, 2.0, "get_news", {"region": "EU", "limit": 17}, '{"items": 3}'),
                chat("l2", 2.0, 2.5)])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b")


def test_a_serial_chain_with_one_concurrent_sibling_is_still_a_chain():
    # a and b ran together; c waited for both although it needed neither.
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 2, "get_weather", {"city": "Oslo"}, '{"temp": 3}'),
                call("b", 1.01, 2, "get_rates", {"pair": "NOKEUR"}, '{"rate": 0.087}'),
                call("c", 2, 3, "get_news", {"topic": "markets"}, '{"items": 4}'),
                chat("l2", 3, 3.5)])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b", "c")
    assert finding.wasted_ms == pytest.approx(1000, abs=15)  # c could have run beside a and b
    concurrent = [link for link in finding.evidence["links"] if {link["earlier"], link["later"]} == {"a", "b"}]
    assert concurrent[0]["basis"] == "concurrent_in_run"


def test_calls_that_ran_mostly_together_are_one_stage():
    # A thread pool started b 10 ms after a (LangGraph's ToolNode does): nothing to win.
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.05, "get_order", {"order_id": "ord_u39qcc"}, '{"status": "shipped"}'),
                call("b", 1.01, 1.117, "search_kb", {"query": "return policy"}, '{"hits": 3}'),
                chat("l2", 1.12, 1.5)])
    assert detect(ctx) == []


def test_calls_started_one_by_one_while_the_previous_ran_could_start_with_it():
    # A stagger: each call starts when the one before is three quarters done, never with it.
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.4, "get_price", {"sku": "SKU-7"}, '{"price": 259.45}'),
                call("b", 1.3, 1.7, "search_inventory", {"query": "stand"}, '{"items": 3}'),
                call("c", 1.6, 2.0, "reserve_item", {"sku": "SKU-4"}, '{"reservation": "res_1"}'),
                chat("l2", 2.0, 3)])
    [finding] = detect(ctx)
    # b started while a ran and c while b ran: each could have started with the one before. c
    # started after a ended, and nothing shows it did not need a's result: the waste asserted
    # keeps c after a (span 1.0 s - 0.8 s); all three at once (0.6 s) is not shown.
    assert finding.confidence == "high" and finding.evidence["basis"] == "concurrent_in_run"
    assert finding.wasted_ms == pytest.approx(200, abs=15)
    assert finding.evidence["unknown_step_ids"] == ["a", "c"]


def test_two_calls_staggered_are_parallelizable_because_they_overlapped():
    # b started while a still ran, so it cannot have used a's result (no other pair to read):
    # a finding of high confidence whose reason says so. This raised KeyError in the worker,
    # which dropped the task's parallelizable_calls findings.
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.4, "get_price", {"sku": "SKU-7"}, '{"price": 259.45}'),
                call("b", 1.3, 1.7, "search_inventory", {"query": "stand"}, '{"items": 3}'),
                chat("l2", 1.7, 3)])
    [finding] = detect(ctx)
    assert finding.wasted_ms == pytest.approx(300, abs=15)  # span 0.7 s - the longer 0.4 s
    assert finding.confidence == "high"
    assert "started while the one before it still ran" in finding.confidence_reason


@pytest.mark.parametrize("lag_ms", [30, 40])
def test_calls_one_response_requested_and_dispatched_a_little_late_already_run_in_parallel(lag_ms):
    # The second call was dispatched 30-40 ms after the first (80 ms), while the first was at most
    # half done: they ran together, and "40 ms wasted, run them in parallel" would be false advice.
    ctx = task([chat("l1", 0, 1, "c1", "c2"),
                call("a", 53.611, 53.691, "check_refund_policy", {"sku": "SKU-D98", "region": "EU"},
                     '{"eligible": true}', call_id="c1"),
                call("b", 53.611 + lag_ms / 1000, 53.84, "get_shipping_status",
                     {"tracking_url": "https://t.example/p/ZX10PWW"}, '{"status": "delivered"}', call_id="c2"),
                chat("l2", 53.84, 55)])
    assert detect(ctx) == []


def test_a_call_after_a_pair_that_ran_together_wastes_only_what_it_waited():
    # a and b ran together (b dispatched 100 ms late: that lag is kept); c, independent, waited
    # for both: only its wait is waste.
    ctx = task([chat("l1", 0, 1, "c1", "c2", "c3"),
                call("a", 1.0, 1.4, "get_price", {"sku": "SKU-7"}, '{"price": 259.45}', call_id="c1"),
                call("b", 1.1, 1.5, "search_inventory", {"query": "stand"}, '{"items": 3}', call_id="c2"),
                call("c", 1.5, 1.8, "get_reviews", {"sku": "SKU-9"}, '{"stars": 4}', call_id="c3"),
                chat("l2", 1.8, 3)])
    [finding] = detect(ctx)
    assert finding.wasted_ms == pytest.approx(300, abs=15)  # 0.8 s; a + b with their lag: 0.5 s
    assert finding.confidence == "high" and "one response" in finding.confidence_reason


def test_a_value_common_to_the_agents_runs_passed_on_leaves_the_pair_unknown():
    """fetch_page returns {"doc": "page-1"} in every run and summarize takes doc="page-1": rarity
    cannot tell that flow from coincidence, so "no flow" is not read."""
    from analysis.engine.detectors.dependencies import Profile

    steps = [chat("l1", 0, 1),
             call("a", 1, 1.5, "fetch_page", {"url": "https://example.org/924"}, '{"doc": "page-1", "chars": 3355}'),
             call("b", 1.5, 2, "summarize", {"doc": "page-1", "max_words": 120}, "a summary"),
             chat("l2", 2, 3)]
    profile = Profile(runs=200, common=frozenset({"page-1", "doc", "120", "example.org", "https"}))
    ctx = task(steps)
    ctx.profile = profile
    [finding] = detect(ctx)
    assert finding.confidence == "low" and "one this agent's runs all carry" in finding.confidence_reason


def test_a_saving_smaller_than_the_rounding_is_said_in_ms_not_as_the_same_number_twice():
    # 12,440 ms and 12,360 ms both read "12.4 s": the summary must not say "12.4 s instead of 12.4 s".
    ctx = task([llm("l1", 0, 1),
                step("a", "tool", 1, 13.36, tool_name="weather"),
                step("b", "tool", 13.36, 13.44, tool_name="news"),
                llm("l2", 13.44, 14)])
    [finding] = detect(ctx)
    assert "would take 12,360 ms instead of 12,440 ms" in finding.summary, finding.summary


def test_every_basis_a_finding_can_rest_on_has_a_reason_to_show():
    """A finding rests on the weakest basis of independence among its pairs: each must have the
    sentence the task page shows (a missing one raised in the worker and lost the finding)."""
    from analysis.engine.detectors import dependencies as d

    dependent = {d.DEPENDENT_DATA, d.DEPENDENT_FOLLOW_UP, d.LEARNED_FLOW}
    assert set(d.STRENGTH) - dependent <= set(parallelizable_calls.REASONS)


# --- an asserted finding rests on positive evidence of independence (bases.py) ----------------


def asserted(findings):
    return [f for f in findings if f.confidence != "low"]


def test_a_booking_reference_returned_lower_case_and_sent_upper_cased_is_no_asserted_finding():
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.4, "find_booking", {"last_name": "Okafor", "date": "2026-12-19"},
                     '{"bookings": [{"reference": "qz7k2m", "status": "confirmed"}]}'),
                call("b", 1.4, 2.0, "get_itinerary", {"booking_reference": "QZ7K2M"},
                     '{"legs": [{"from": "LOS", "to": "LHR"}]}'),
                chat("l2", 2.0, 3)])
    assert asserted(detect(ctx)) == []


def test_a_small_ordinal_chosen_from_a_ranked_result_is_no_asserted_finding():
    # "3" is too common a token to follow: no flow shows, and no flow seen is not independence.
    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.6, "search_offers", {"route": "LOS-LHR", "month": "december"},
                     '{"offers": [{"offer": 1, "price": 812}, {"offer": 2, "price": 845}, {"offer": 3, "price": 790},'
                     ' {"offer": 4, "price": 901}, {"offer": 5, "price": 930}, {"offer": 6, "price": 977}]}'),
                call("b", 1.6, 2.1, "hold_offer", {"offer": 3}, '{"held": true, "expires_in": 900}'),
                chat("l2", 2.1, 3)])
    found = detect(ctx)
    assert asserted(found) == []
    assert [f.evidence["basis"] for f in found] in ([], ["no_flow_seen"])


def test_an_id_shared_by_many_runs_is_no_asserted_finding():
    # The account id is in most of the agent's runs (one tenant): rarity cannot tell its flow
    # from coincidence, so nothing is known.
    from analysis.engine.detectors.dependencies import Profile

    ctx = task([chat("l1", 0, 1),
                call("a", 1, 1.4, "get_account", {"email": "ops@acme.example"},
                     '{"account_id": "acct-4471", "plan": "enterprise"}'),
                call("b", 1.4, 2.0, "list_invoices", {"account_id": "acct-4471", "status": "open"},
                     '{"invoices": [{"id": "inv_93kd"}]}'),
                chat("l2", 2.0, 3)])
    ctx.profile = Profile(runs=200, common=frozenset({"acct-4471", "enterprise", "open", "ops", "acme.example"}))
    assert asserted(detect(ctx)) == []


def test_a_patch_then_tests_requested_together_are_not_asserted():
    # One response asked for both, in the order they must run: the tests read what the patch wrote.
    ctx = task([chat("l1", 0, 1, "call_p", "call_t"),
                call("a", 1, 1.3, "apply_patch", {"patch": "--- a/src/cart.py\n+++ b/src/cart.py\n@@ -1 +1 @@"},
                     '{"applied": true, "files": 1}', call_id="call_p"),
                call("b", 1.3, 4.8, "run_tests", {"path": "tests/"}, '{"passed": 212, "failed": 0}',
                     call_id="call_t"),
                chat("l2", 4.8, 6)])
    found = detect(ctx)
    assert asserted(found) == []
    assert [f.evidence["basis"] for f in found] == ["requested_together_acting"]


@pytest.mark.parametrize("tools", [("fill_form", "click", "screenshot"), ("navigate", "type_text", "screenshot")])
def test_ordered_browser_actions_requested_together_are_not_asserted(tools):
    ctx = task([chat("l1", 0, 1, "c1", "c2", "c3"),
                call("a", 1, 1.3, tools[0], {"selector": "#checkout", "url": "https://shop.example/checkout"},
                     '{"ok": true}', call_id="c1"),
                call("b", 1.3, 1.6, tools[1], {"selector": "#submit"}, '{"ok": true}', call_id="c2"),
                call("c", 1.6, 2.0, tools[2], {"full_page": False}, '{"image": "<png 48 KiB>"}', call_id="c3"),
                chat("l2", 2.0, 3)])
    assert asserted(detect(ctx)) == []


def test_a_three_city_fan_out_requested_together_is_asserted_as_a_fan_out():
    ctx = task([chat("l1", 0, 1, "call_1", "call_2", "call_3"),
                call("a", 1, 1.5, "get_forecast", {"city": "Lagos", "days": 3}, '{"high_c": 31, "rain": 0.2}',
                     call_id="call_1"),
                call("b", 1.5, 2.0, "get_forecast", {"city": "Nairobi", "days": 3}, '{"high_c": 24, "rain": 0.6}',
                     call_id="call_2"),
                call("c", 2.0, 2.5, "get_forecast", {"city": "Accra", "days": 3}, '{"high_c": 30, "rain": 0.1}',
                     call_id="call_3"),
                chat("l2", 2.5, 3)])
    [finding] = detect(ctx)
    assert (finding.confidence, finding.evidence["basis"]) == ("high", "fan_out")
    assert round(finding.wasted_ms) == 1000


def test_a_for_loop_release_whose_pair_another_release_ran_concurrently_is_asserted():
    """Release 2.0 forecasts the cities one by one in a for-loop (no call ids: the loop is the
    agent's code); release 2.1 of the same agent gathers them, and ran them concurrently, both
    succeeding, with nothing passed between them."""
    from analysis.engine.detectors.dependencies import PairStats, Profile

    gathered = {pair: [PairStats(runs=40, concurrent_runs=40)]
                for pair in (("get_forecast#0", "get_forecast#1"), ("get_forecast#0", "get_forecast#2"),
                             ("get_forecast#1", "get_forecast#2"))}
    steps = [chat("l1", 0, 1),
             call("a", 1, 1.5, "get_forecast", {"city": "Lagos"}, '{"high_c": 31}'),
             call("b", 1.5, 2.0, "get_forecast", {"city": "Nairobi"}, '{"high_c": 24}'),
             call("c", 2.0, 2.5, "get_forecast", {"city": "Accra"}, '{"high_c": 30}'),
             chat("l2", 2.5, 3)]
    ctx = task(steps)
    assert [f.confidence for f in detect(ctx)] == ["low"]  # alone, nothing shows they are independent
    ctx = task(steps)
    ctx.profile = Profile(runs=0, common=frozenset(), pairs={}, elsewhere=gathered)
    [finding] = detect(ctx)
    assert (finding.confidence, finding.evidence["basis"]) == ("medium", "observed_concurrency")


def test_a_pair_run_in_both_orders_elsewhere_is_independent():
    from analysis.engine.detectors.dependencies import PairStats, Profile

    steps = [chat("l1", 0, 1),
             call("a", 1, 1.5, "get_weather", {"city": "Lagos"}, '{"high_c": 31}'),
             call("b", 1.5, 2.0, "get_news", {"topic": "markets"}, '{"items": 4}'),
             chat("l2", 2.0, 3)]
    ctx = task(steps)
    ctx.profile = Profile(runs=0, common=frozenset(), pairs={("get_weather#0", "get_news#0"): PairStats(runs=5),
                                                             ("get_news#0", "get_weather#0"): PairStats(runs=4)})
    [finding] = detect(ctx)
    assert (finding.confidence, finding.evidence["basis"]) == ("medium", "both_orders")


def test_calls_whose_spans_carry_no_id_are_requested_together_when_their_count_matches_the_response():
    # Agno and smolagents record the call ids on the model call only: a response that requested
    # three calls, then exactly three calls in its turn.
    steps = [chat("l1", 0, 1, "call_q1", "call_q2", "call_q3"),
             call("a", 1, 1.05, "get_shipping_status", {"order_id": "ord_0035x"}, '{"status": "in_transit"}'),
             call("b", 1.05, 1.1, "get_shipping_status", {"order_id": "ord_0035y"}, '{"status": "in_transit"}'),
             call("c", 1.1, 1.14, "check_inventory", {"sku": "SKU-1142"}, '{"in_stock": 12}'),
             chat("l2", 1.14, 1.3)]
    [finding] = detect(task(steps))
    assert finding.confidence == "high"
    assert {link["basis"] for link in finding.evidence["links"]} == {"fan_out", "requested_together"}
    # One call fewer than requested (or one more): the count says nothing.
    [finding] = detect(task([s for s in steps if s.step_id != "c"]))
    assert finding.confidence == "low"


def test_a_fan_out_beside_a_frameworks_zero_length_span_is_asserted_for_what_the_evidence_shows():
    # Google ADK closes a turn of parallel calls with an "(merged tools)" span of its own: its
    # own call id, no arguments, no result. Nothing shows it independent, and it costs nothing.
    ctx = task([chat("l1", 0, 0.1, "call_e", "call_o", "call_p"),
                call("a", 0.11, 0.158, "get_shipping_status", {"order_id": "ord_0035x"}, '{"status": "in_transit"}',
                     call_id="call_e"),
                call("b", 0.158, 0.203, "get_shipping_status", {"order_id": "ord_0035y"}, '{"status": "in_transit"}',
                     call_id="call_o"),
                call("c", 0.204, 0.242, "check_inventory", {"sku": "SKU-1142"}, '{"in_stock": 12}', call_id="call_p"),
                step("m", "tool", 0.2426, 0.24275, tool_name="(merged tools)", tool_call_id="28c8ab70-29bb"),
                chat("l2", 0.25, 0.4)])
    [finding] = detect(ctx)
    assert finding.confidence == "high"
    assert finding.evidence["basis"] in ("fan_out", "requested_together")
    assert finding.wasted_ms == pytest.approx(84, abs=2)  # 132 ms of calls, the longest 48 ms
