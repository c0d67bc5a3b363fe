from datetime import UTC, datetime

from analysis.engine.detectors import repeated_tool_call
from analysis.engine.detectors.base import canonical_args

from .builders import T0, step, task


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
    # No call recorded its answer: nothing shows the answer was the same, so only possible.
    assert finding.summary == "Possibly: search_order called 3× with the same full and order_id; 1 s repeated."
    assert finding.evidence["calls"] == 3
    assert (finding.confidence, finding.evidence["basis"]) == ("low", "no_answers")


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


def test_polling_a_job_whose_answer_changes_is_not_a_repeat():
    ctx = task([
        step("a", "tool", 0, 0.3, tool_name="get_query_status", tool_args={"query_id": "qr_63fc"},
             tool_result='{"query_id": "qr_63fc", "status": "running", "progress": 0.33}'),
        step("b", "tool", 2, 2.3, tool_name="get_query_status", tool_args={"query_id": "qr_63fc"},
             tool_result='{"query_id": "qr_63fc", "status": "running", "progress": 0.67}'),
        step("c", "tool", 4, 4.3, tool_name="get_query_status", tool_args={"query_id": "qr_63fc"},
             tool_result='{"query_id": "qr_63fc", "status": "done", "rows": [["EU", 1200]]}'),
    ])
    assert detect(ctx) == []


def test_tests_run_again_after_a_patch_are_not_a_repeat():
    ctx = task([
        step("t1", "tool", 0, 4, tool_name="run_tests", tool_args={"target": "tests/test_tax.py"},
             tool_result='{"passed": 12, "failed": 2, "log": "..F.F"}'),
        step("p", "tool", 5, 5.2, tool_name="apply_patch", tool_args={"path": "src/tax.py", "diff": "-x\n+y"},
             tool_result='{"applied": true}'),
        step("t2", "tool", 6, 10, tool_name="run_tests", tool_args={"target": "tests/test_tax.py"},
             tool_result='{"passed": 14, "failed": 0, "log": "....."}'),
    ])
    assert detect(ctx) == []


def test_a_file_read_again_after_a_patch_to_it_is_not_a_repeat():
    ctx = task([
        step("r1", "tool", 0, 0.2, tool_name="read_file", tool_args={"path": "src/tax.py"},
             tool_result="def rate(region):\n    return 0.2\n"),
        step("r2", "tool", 3, 3.2, tool_name="read_file", tool_args={"path": "src/tax.py"},
             tool_result="def rate(region):\n    return RATES[region]\n"),
    ])
    assert detect(ctx) == []


def test_a_new_request_id_or_response_stamp_does_not_hide_a_repeat():
    # The answers differ only in what is the call's own: its request id, and a stamp taken while it ran.
    def at(s):
        return datetime.fromtimestamp((T0 + s * 1000) / 1000, UTC).isoformat().replace("+00:00", "Z")

    ctx = task([
        step("a", "tool", 0, 1, tool_name="get_order", tool_args={"id": "A-1"},
             tool_result=f'{{"order": {{"id": "A-1", "status": "shipped"}}, "request_id": "req_8f3a", '
                         f'"timestamp": "{at(0.5)}"}}'),
        step("b", "tool", 30, 31, tool_name="get_order", tool_args={"id": "A-1"},
             tool_result=f'{{"order": {{"status": "shipped", "id": "A-1"}}, "request_id": "req_11c0", '
                         f'"timestamp": "{at(30.4)}"}}'),
        step("c", "tool", 60, 61, tool_name="search", tool_args={"q": "refund policy"},
             tool_result=f"3 hits (request id: 7b1f-22)\nServed-At timestamp: {int(T0 / 1000) + 60}"),
        step("d", "tool", 90, 91, tool_name="search", tool_args={"q": "refund policy"},
             tool_result=f"3 hits (request id: 90ac-41)\nServed-At timestamp: {int(T0 / 1000) + 91}"),
    ])
    found = {f.evidence["tool"]: f for f in detect(ctx)}
    assert found["get_order"].step_ids == ("a", "b") and found["get_order"].confidence == "high"
    assert found["search"].step_ids == ("c", "d") and found["search"].confidence == "high"


def test_a_time_that_is_data_is_a_change():
    # A modification time from before the call, and a clock tool's answer, are what the call
    # asked for: when they differ, the world changed.
    def at(s):
        return datetime.fromtimestamp((T0 + s * 1000) / 1000, UTC).isoformat()

    ctx = task([
        step("a", "tool", 0, 1, tool_name="stat", tool_args={"path": "a.txt"},
             tool_result=f'{{"size": 10, "timestamp": "{at(-600)}"}}'),
        step("b", "tool", 30, 31, tool_name="stat", tool_args={"path": "a.txt"},
             tool_result=f'{{"size": 10, "timestamp": "{at(20)}"}}'),
        step("c", "tool", 40, 41, tool_name="get_current_time", tool_args={"timezone": "UTC"},
             tool_result=f'{{"timezone": "UTC", "datetime": "{at(40.5)}"}}'),
        step("d", "tool", 70, 71, tool_name="get_current_time", tool_args={"timezone": "UTC"},
             tool_result=f'{{"timezone": "UTC", "datetime": "{at(70.5)}"}}'),
    ])
    assert detect(ctx) == []


def test_a_poll_that_also_repeated_itself_is_only_a_possible_repeat():
    ctx = task([step(s, "tool", i * 2, i * 2 + 1, tool_name="job_status", tool_args={"job": "j-1"}, tool_result=r)
                for i, (s, r) in enumerate([("a", "running"), ("b", "running"), ("c", "done")])])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b")
    assert finding.confidence == "low"
    assert finding.evidence["changed_step_ids"] == ["c"]


def test_a_repeat_whose_answer_was_not_recorded_is_asserted_when_nothing_that_acts_ran_between():
    ctx = task([step("a", "tool", 0, 1, tool_name="job_status", tool_args={"job": "j-1"}, tool_result="running"),
                step("b", "tool", 2, 3, tool_name="job_status", tool_args={"job": "j-1"}),
                step("c", "tool", 4, 5, tool_name="job_status", tool_args={"job": "j-1"})])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b", "c")
    assert (finding.confidence, finding.evidence["basis"]) == ("medium", "nothing_between")


def test_a_failed_repeat_that_returned_an_error_is_neither_waste_nor_a_change():
    ctx = task([step("a", "tool", 0, 1, tool_name="get_order", tool_args={"id": 1}, tool_result='{"s": 1}'),
                step("b", "tool", 2, 2.1, tool_name="get_order", tool_args={"id": 1}, status="error",
                     tool_result='{"error": "429 Too Many Requests"}'),
                step("c", "tool", 3, 4, tool_name="get_order", tool_args={"id": 1}, tool_result='{"s": 1}')])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "c")
    assert finding.confidence == "high"


def test_answers_that_differ_under_the_same_version_are_only_a_possible_repeat():
    ctx = task([
        step("a", "tool", 0, 0.2, tool_name="fetch", tool_args={"url": "https://x.test/a"},
             tool_result='{"etag": "W/33a64df5", "cache": "MISS", "body": "hello"}'),
        step("b", "tool", 3, 3.2, tool_name="fetch", tool_args={"url": "https://x.test/a"},
             tool_result='{"etag": "W/33a64df5", "cache": "HIT", "body": "hello"}'),
        step("c", "tool", 4, 4.2, tool_name="read_file", tool_args={"path": "src/io.py"},
             tool_result='{"path": "src/io.py", "version": 3, "content": "y = 1"}'),
        step("d", "tool", 6, 6.2, tool_name="read_file", tool_args={"path": "src/io.py"},
             tool_result='{"path": "src/io.py", "version": 4, "content": "y = 1"}'),
    ])
    [finding] = detect(ctx)
    assert finding.step_ids == ("a", "b")
    assert finding.confidence == "low"
    assert "same version" in finding.confidence_reason


def test_answers_that_differ_only_in_fresh_identifiers_are_a_probable_repeat():
    # A search whose backend hands out new article keys for the same hits, and a file whose answer
    # carries a new opaque token: the same answer otherwise.
    ctx = task([
        step("a", "tool", 0, 0.2, tool_name="search_kb", tool_args={"query": "damaged item", "limit": 2},
             tool_result='[{"article": "kb-679", "title": "Damaged Item (1)"}, '
                         '{"article": "kb-919", "title": "Damaged Item (2)"}]'),
        step("b", "tool", 3, 3.2, tool_name="search_kb", tool_args={"limit": 2, "query": "damaged item"},
             tool_result='[{"article": "kb-475", "title": "Damaged Item (1)"}, '
                         '{"article": "kb-882", "title": "Damaged Item (2)"}]'),
        step("c", "tool", 4, 4.2, tool_name="read_file", tool_args={"path": "src/io.py"},
             tool_result='{"path": "src/io.py", "version": 0, "content": "' + "y" * 40 + '"}'),
        step("d", "tool", 6, 6.2, tool_name="read_file", tool_args={"path": "src/io.py"},
             tool_result='{"path": "src/io.py", "version": 0, "content": "' + "y" * 90 + '"}'),
    ])
    found = {f.evidence["tool"]: f for f in detect(ctx)}
    assert found["search_kb"].step_ids == ("a", "b") and found["search_kb"].confidence == "medium"
    assert found["read_file"].step_ids == ("c", "d") and found["read_file"].confidence == "medium"


def test_a_change_beside_unchanged_fields_is_a_change():
    # The order re-checked after a refund (its total unchanged); a build id that is all the answer
    # says; a new version; a meeting moved from 10am to 11am.
    ctx = task([
        step("a", "tool", 0, 1, tool_name="get_order", tool_args={"id": "A-1"},
             tool_result='{"id": "A-1", "status": "shipped", "total": 104.71}'),
        step("b", "tool", 5, 6, tool_name="get_order", tool_args={"id": "A-1"},
             tool_result='{"id": "A-1", "status": "refunded", "total": 104.71}'),
        step("c", "tool", 7, 8, tool_name="latest_build", tool_args={"branch": "main"}, tool_result='"b-1234"'),
        step("d", "tool", 9, 10, tool_name="latest_build", tool_args={"branch": "main"}, tool_result='"b-1235"'),
        step("e", "tool", 11, 12, tool_name="get_file", tool_args={"path": "a.py"},
             tool_result='{"sha": "a1b2c3d4", "text": "x"}'),
        step("f", "tool", 13, 14, tool_name="get_file", tool_args={"path": "a.py"},
             tool_result='{"sha": "e5f6a7b8", "text": "x"}'),
        step("g", "tool", 15, 16, tool_name="meeting", tool_args={"id": "m-1"}, tool_result="Standup at 10am, room 4"),
        step("h", "tool", 17, 18, tool_name="meeting", tool_args={"id": "m-1"}, tool_result="Standup at 11am, room 4"),
    ])
    assert detect(ctx) == []


def test_a_result_cut_by_ingest_is_judged_by_what_was_kept():
    # Ingest keeps a result's first few KiB. A head that starts the other answer (an opaque token
    # cut short) is the same answer; heads that differ in a word are not, though the version
    # before the cut, unchanged, makes them a possible repeat.
    cut = "…[truncated]"
    ctx = task([
        step("a", "tool", 0, 0.2, tool_name="read_file", tool_args={"path": "big.py"},
             tool_result='{"path":"big.py","version":7,"content":"' + "y" * 900 + cut),
        step("b", "tool", 3, 3.2, tool_name="read_file", tool_args={"path": "big.py"},
             tool_result='{"path":"big.py","version":7,"content":"' + "y" * 300 + '"}'),
        step("c", "tool", 4, 4.2, tool_name="read_file", tool_args={"path": "small.py"},
             tool_result='{"path":"small.py","version":2,"content":"def f(): return 1\\n' + "x = 2\\n" * 99 + cut),
        step("d", "tool", 6, 6.2, tool_name="read_file", tool_args={"path": "small.py"},
             tool_result='{"path":"small.py","version":2,"content":"def f(): return 3\\n' + "x = 2\\n" * 99 + cut),
    ])
    found = {f.evidence["arguments"]: f for f in detect(ctx)}
    assert found['{"path":"big.py"}'].confidence == "medium"
    assert found['{"path":"small.py"}'].confidence == "low"


def test_a_new_hash_before_the_cut_is_a_change():
    cut = "…[truncated]"
    ctx = task([
        step("a", "tool", 0, 0.2, tool_name="read_file", tool_args={"path": "big.py"},
             tool_result='{"path":"big.py","sha":"9f2c41ab","content":"' + "y" * 900 + cut),
        step("b", "tool", 3, 3.2, tool_name="read_file", tool_args={"path": "big.py"},
             tool_result='{"path":"big.py","sha":"d07e55c1","content":"' + "y" * 900 + cut),
    ])
    assert detect(ctx) == []


# --- a repeat is asserted only when nothing that could change its answer ran in between -------


def test_a_click_on_submit_after_a_new_fill_form_is_not_an_asserted_repeat():
    ctx = task([step("f1", "tool", 0, 0.4, tool_name="fill_form", tool_args={"fields": {"name": "Ada", "qty": 1}},
                     tool_result='{"ok": true}'),
                step("c1", "tool", 0.5, 0.9, tool_name="click", tool_args={"selector": "#submit"},
                     tool_result='{"ok": true, "navigated": false}'),
                step("f2", "tool", 1.0, 1.4, tool_name="fill_form", tool_args={"fields": {"name": "Bo", "qty": 2}},
                     tool_result='{"ok": true}'),
                step("c2", "tool", 1.5, 1.9, tool_name="click", tool_args={"selector": "#submit"},
                     tool_result='{"ok": true, "navigated": false}')])
    found = detect(ctx)
    assert [f.confidence for f in found] == ["low"]
    assert found[0].evidence["basis"] == "acts"


def test_tests_run_again_after_a_patch_are_not_an_asserted_repeat_even_with_no_results_recorded():
    ctx = task([step("t1", "tool", 0, 3, tool_name="run_tests", tool_args={"path": "tests/test_cart.py"}),
                step("p", "tool", 3.1, 3.3, tool_name="apply_patch", tool_args={"file": "src/cart.py", "hunks": 2}),
                step("t2", "tool", 3.4, 6.4, tool_name="run_tests", tool_args={"path": "tests/test_cart.py"})])
    [finding] = detect(ctx)
    assert (finding.confidence, finding.evidence["basis"]) == ("low", "action_between")
    assert finding.evidence["action_step_ids"] == ["p"]


def test_the_same_answer_after_an_action_in_between_is_only_possible():
    ctx = task([step("t1", "tool", 0, 3, tool_name="run_tests", tool_args={"path": "tests/"},
                     tool_result='{"passed": 40, "failed": 2}'),
                step("w", "tool", 3.1, 3.2, tool_name="write_file", tool_args={"path": "src/a.py", "text": "x = 1"},
                     tool_result='{"ok": true}'),
                step("t2", "tool", 3.4, 6.4, tool_name="run_tests", tool_args={"path": "tests/"},
                     tool_result='{"passed": 40, "failed": 2}')])
    [finding] = detect(ctx)
    assert (finding.confidence, finding.evidence["basis"]) == ("low", "action_between")


def test_confirmations_that_differ_only_in_an_id_are_actions_not_repeats():
    ctx = task([step("a", "tool", 0, 0.5, tool_name="confirm_booking", tool_args={"offer": 3},
                     tool_result='{"confirmation": "CNF-88213", "status": "confirmed"}'),
                step("b", "tool", 1, 1.5, tool_name="confirm_booking", tool_args={"offer": 3},
                     tool_result='{"confirmation": "CNF-88219", "status": "confirmed"}')])
    assert [f.confidence for f in detect(ctx)] == ["low"]


def test_a_repeat_with_no_results_recorded_is_possible():
    ctx = task([step("a", "tool", 0, 0.3, tool_name="get_order", tool_args={"order_id": "ord_8f3k2q"}),
                step("l", "llm", 0.3, 1.2, model="m"),
                step("b", "tool", 1.2, 1.5, tool_name="get_order", tool_args={"order_id": "ord_8f3k2q"})])
    [finding] = detect(ctx)
    assert (finding.confidence, finding.evidence["basis"]) == ("low", "no_answers")
    assert finding.summary.startswith("Possibly: ")


def test_the_same_answer_with_only_reads_in_between_is_asserted():
    ctx = task([step("a", "tool", 0, 0.3, tool_name="get_order", tool_args={"order_id": "ord_8f3k2q"},
                     tool_result='{"status": "shipped"}'),
                step("s", "tool", 0.4, 0.6, tool_name="search_kb", tool_args={"query": "late parcel"},
                     tool_result='{"hits": 3}'),
                step("b", "tool", 1.2, 1.5, tool_name="get_order", tool_args={"order_id": "ord_8f3k2q"},
                     tool_result='{"status": "shipped"}')])
    [finding] = detect(ctx)
    assert (finding.confidence, finding.evidence["basis"]) == ("high", "same_answer")
