import pytest

from analysis.engine.detectors import slow_step
from analysis.engine.verdicts import step_verdicts

from .builders import device_normal, llm_stats, samples, stats, step, task


def detect(ctx):
    ctx.verdicts = step_verdicts(ctx)
    return list(slow_step.detect(ctx))


def test_a_tool_far_above_its_baseline_is_slow_and_wastes_the_excess():
    ctx = task([step("a", "tool", 0, 2.4, tool_name="search_order")],
               baselines={("tool", "search_order", ""): stats(400, 50)})
    [finding] = detect(ctx)
    assert round(finding.wasted_ms) == 2000
    assert finding.evidence["baseline_median_ms"] == 400
    assert "search_order took 2.4 s, usually 400 ms" in finding.summary


def test_a_wrapper_span_is_not_slow_again_for_the_slow_call_inside_it():
    # A graph node with no convention attributes (kind other) around a slow tool call: the tool is
    # the finding, once; the node, made of it, is not a second one (its time counted twice).
    # An unclassified span with nothing below it is judged as any step.
    ctx = task([step("node", "other", 0, 2.5, name="node search"),
                step("a", "tool", 0.05, 2.45, tool_name="search_order", parent_step_id="node"),
                step("q", "other", 3.0, 5.4, name="db query")],
               baselines={("tool", "search_order", ""): stats(400, 50), ("other", "node search", ""): stats(450, 50),
                          ("other", "db query", ""): stats(400, 50)})
    assert sorted(f.step_ids for f in detect(ctx)) == [("a",), ("q",)]


def test_a_long_but_normal_step_does_not_fire():
    # This tool is always slow (median 8 s, wide spread): 9.5 s is within its normal.
    ctx = task([step("a", "tool", 0, 9.5, tool_name="report")],
               baselines={("tool", "report", ""): stats(8000, 1000)})
    assert detect(ctx) == []


def test_cold_start_with_few_samples_does_not_fire():
    ctx = task([step("a", "tool", 0, 5, tool_name="new_tool")],
               baselines={("tool", "new_tool", ""): stats(100, 10, count=5)})
    assert detect(ctx) == []


def test_an_llm_step_long_because_it_wrote_many_tokens_is_not_slow():
    # 2000 output tokens at the usual 20 ms/token and a usual TTFT: 40 s, and normal.
    ctx = task([step("a", "llm", 0, 40.2, model="m", device="gpu-1", ttft_ms=200, input_tokens=2000,
                     output_tokens=2001)],
               baselines={("llm", "m", "gpu-1"): llm_stats()})
    assert detect(ctx) == []


def test_a_slow_llm_step_on_a_nominal_device_says_so():
    ctx = task([step("a", "llm", 0, 3.2, model="m", device="gpu-1", ttft_ms=1400, input_tokens=2100,
                     output_tokens=91)],
               baselines={("llm", "m", "gpu-1"): llm_stats()}, device_normals={"gpu-1": device_normal()},
               samples={"gpu-1": samples(-5, 10)})
    [finding] = detect(ctx)
    assert finding.evidence["verdict"] == "nominal"
    assert finding.evidence["telemetry"] == "present"
    assert round(finding.wasted_ms) == 1200  # 3200 - (200 + 20 × 90)


def test_a_slow_llm_step_with_a_huge_prompt_is_prefill_bound():
    ctx = task([step("a", "llm", 0, 4, model="m", device="gpu-1", ttft_ms=2200, input_tokens=30000,
                     output_tokens=91)],
               baselines={("llm", "m", "gpu-1"): llm_stats()}, device_normals={"gpu-1": device_normal()},
               samples={"gpu-1": samples(-5, 10)})
    [finding] = detect(ctx)
    assert finding.evidence["verdict"] == "prefill_bound"


def test_the_device_baseline_falls_back_to_the_model_baseline_when_young():
    ctx = task([step("a", "tool", 0, 3, tool_name="x", device="d")],
               baselines={("tool", "x", "d"): stats(100, 10, count=3), ("tool", "x", ""): stats(500, 50)})
    [finding] = detect(ctx)
    assert finding.evidence["baseline_median_ms"] == 500


def test_without_ttft_a_step_is_judged_against_the_line_over_output_tokens():
    base = {("llm", "m", ""): stats(1200, 500, line_a=150.0, line_b=20.0, line_log_mad=0.08)}
    long_but_normal = step("a", "llm", 0, 4.2, model="m", output_tokens=200)   # 150 + 20 × 200 = 4150
    slow = step("b", "llm", 0, 3.0, model="m", output_tokens=50)               # expected 1150
    assert detect(task([long_but_normal], baselines=base)) == []
    [finding] = detect(task([slow], baselines=base))
    assert finding.evidence["expected_ms"] == 1150 and finding.evidence["slow_part"] == "whole"


def test_a_slow_step_judged_against_a_short_history_is_not_high_confidence():
    short = task([step("a", "tool", 0, 2.4, tool_name="search_order")],
                 baselines={("tool", "search_order", ""): stats(400, 50, count=30)})
    long = task([step("a", "tool", 0, 2.4, tool_name="search_order")],
                baselines={("tool", "search_order", ""): stats(400, 50, count=400)})
    [unsure], [sure] = detect(short), detect(long)
    assert (unsure.confidence, sure.confidence) == ("medium", "high")
    assert "only 30 runs" in unsure.confidence_reason


def test_an_llm_call_judged_by_the_models_calls_on_other_devices_is_only_possibly_slow():
    # The model's 400 calls are on other hardware; this device has served it 4 times. The call is
    # slow against those, but an H100 is not an LPU: possible, not counted.
    call = dict(model="m", device="gpu-new", ttft_ms=1400, input_tokens=2100, output_tokens=91)
    elsewhere = task([step("a", "llm", 0, 3.2, **call)],
                     baselines={("llm", "m", ""): llm_stats(), ("llm", "m", "gpu-new"): llm_stats(count=4)},
                     device_normals={"gpu-new": device_normal()}, samples={"gpu-new": samples(-5, 10)})
    here = task([step("a", "llm", 0, 3.2, **call)],
                baselines={("llm", "m", ""): llm_stats(), ("llm", "m", "gpu-new"): llm_stats(count=400)},
                device_normals={"gpu-new": device_normal()}, samples={"gpu-new": samples(-5, 10)})
    [possible], [sure] = detect(elsewhere), detect(here)
    assert (possible.confidence, sure.confidence) == ("low", "high")
    assert "gpu-new has served only 4 calls of m" in possible.confidence_reason


def _call(step_id, start_s, factor):
    # 101 tokens: usually 200 ms to the first and 20 ms for each further one, 2.2 s in all.
    return step(step_id, "llm", start_s, start_s + 2.2 * factor, model="m", device="gpu-1", ttft_ms=200 * factor,
                input_tokens=2000, output_tokens=101)


def test_a_call_as_slow_as_the_rest_of_its_run_is_only_possibly_the_slow_step():
    # Every call of this run ran 1.6-1.9x its usual: the run was slow (its client, network or host),
    # and no one call stands out beyond that. Each is shown as possible, none counted.
    ctx = task([_call("a", 0, 1.6), _call("b", 10, 1.65), _call("c", 20, 1.9)],
               baselines={("llm", "m", "gpu-1"): llm_stats()})
    found = detect(ctx)
    assert found and {f.confidence for f in found} == {"low"}
    c = next(f for f in found if f.step_ids == ("c",))
    assert c.confidence_reason.startswith("Possible: the run's other 2 calls of m were 1.6× their usual too")


def test_a_call_far_slower_than_the_rest_of_its_slow_run_is_still_slow():
    ctx = task([_call("a", 0, 1.3), _call("b", 10, 1.3), _call("c", 20, 3.0)],
               baselines={("llm", "m", "gpu-1"): llm_stats()})
    c = next(f for f in detect(ctx) if f.step_ids == ("c",))
    assert c.confidence == "high"


def test_the_same_slow_call_in_a_run_that_was_otherwise_usual_is_slow():
    ctx = task([_call("a", 0, 1.0), _call("b", 10, 1.02), _call("c", 20, 1.9)],
               baselines={("llm", "m", "gpu-1"): llm_stats()})
    [finding] = detect(ctx)
    assert finding.step_ids == ("c",) and finding.confidence == "high"


# run_tests usually takes 4 s against one file; against the whole suite ("tests/") 25 s.
WHOLE_SUITE = {"target": "tests/"}


def _run_tests(seconds: float, args: dict, *, suite_runs: int):
    from analysis.engine.detectors.base import GroupStats, canonical_args

    base = stats(4000, 400, count=300)
    usual = type(base)(**{**{f: getattr(base, f) for f in base.__slots__},
                          "args": {canonical_args(WHOLE_SUITE): GroupStats(suite_runs, 25_000, 0.12)}})
    return task([step("a", "tool", 0, seconds, tool_name="run_tests", tool_args=args)],
                baselines={("tool", "run_tests", ""): usual})


def test_a_call_as_long_as_its_recurring_arguments_usually_take_is_no_slow_step():
    # The whole suite is a bigger job, not a slow call: 28 s is 7x the tool's usual, but usual for
    # these arguments (learned from 60 earlier runs).
    assert detect(_run_tests(28, {"target": "tests/"}, suite_runs=60)) == []
    # With only a few earlier runs of these arguments it is shown as possible, counted nowhere.
    [possible] = detect(_run_tests(28, {"target": "tests/"}, suite_runs=6))
    assert possible.confidence == "low" and "bigger job" in possible.confidence_reason


def test_a_call_slow_even_for_its_arguments_is_slow_by_what_they_usually_take():
    [finding] = detect(_run_tests(80, {"target": "tests/"}, suite_runs=60))
    assert round(finding.wasted_ms) == 55_000 and finding.confidence == "high"
    assert "with these arguments it usually takes 25 s" in finding.summary
    # Other arguments are judged against the tool as before.
    [other] = detect(_run_tests(28, {"target": "tests/test_api.py"}, suite_runs=60))
    assert round(other.wasted_ms) == 24_000 and other.confidence == "high"


def test_a_call_of_a_release_that_made_its_tool_slower_is_judged_by_that_release():
    # Release v3 made search_inventory twice as slow on every call: against the tool's mixed
    # history (median 260 ms) a 900 ms call is slow, against v3's own calls it is its tail.
    from analysis.engine.detectors.base import GroupStats

    base = stats(260, 30, count=500)
    regressed = type(base)(**{**{f: getattr(base, f) for f in base.__slots__},
                              "releases": {"v3": GroupStats(80, 440, 0.2)}})
    call = step("a", "tool", 0, 0.9, tool_name="search_inventory", tool_args={"query": "red kettle"})
    ctx = task([call], baselines={("tool", "search_inventory", ""): regressed})
    assert len(detect(ctx)) == 1  # a task of another release: judged against the tool
    ctx.release = "v3"
    assert detect(ctx) == []
    ctx.steps = [step("a", "tool", 0, 4.0, tool_name="search_inventory")]  # slow even for v3
    [finding] = detect(ctx)
    assert round(finding.wasted_ms) == 3560 and "in this release it usually takes 440 ms" in finding.summary


def test_an_llm_call_is_expected_to_start_as_its_prompt_usually_makes_it():
    # TTFT ≈ 60 ms + 0.05 ms a prompt token (median 200 ms over the key's mix of prompts).
    line = type(llm_stats())(count=300, median_ms=2200, mad_ms=300, ttft_median=200, ttft_mad=60, tpot_median=20,
                             tpot_mad=1.5, input_median=2800, input_mad=1500, prefill_a=60, prefill_b=0.05,
                             prefill_log_mad=0.04, ttft_log_mad=0.2)
    baselines = {("llm", "m", "gpu-1"): line}
    # A 30k-token prompt starting in 1.6 s: its prefill, not a slow start.
    long = step("a", "llm", 0, 2.6, model="m", device="gpu-1", ttft_ms=1600, input_tokens=30_000, output_tokens=51)
    assert detect(task([long], baselines=baselines)) == []
    # A 1k-token prompt starting in 400 ms: 3.6x what its prompt usually takes (110 ms), though
    # only twice the key's median start (judged with the key's spread of starts, the wider).
    short = step("b", "llm", 0, 1.4, model="m", device="gpu-1", ttft_ms=400, input_tokens=1000, output_tokens=51)
    [finding] = detect(task([short], baselines=baselines))
    assert round(finding.wasted_ms) == 290


def test_a_start_slightly_late_against_a_tight_prefill_line_does_not_make_ordinary_decode_slow():
    # Usual start 135 ms for this prompt (a tight line: log MAD 0.04), 185 ms here: an outlier by
    # 50 ms. Its tokens came at 26 ms instead of 20 (within their spread), 114 ms more: the call is
    # 164 ms over its usual, but the part that is unusual cost 50 ms, under the floors.
    line = type(llm_stats())(count=300, median_ms=600, mad_ms=80, ttft_median=140, ttft_mad=40, tpot_median=20,
                             tpot_mad=3, input_median=1500, input_mad=500, prefill_a=60, prefill_b=0.05,
                             prefill_log_mad=0.04, ttft_log_mad=0.04)  # one prompt size: starts hardly vary
    late = step("a", "llm", 0, 0.679, model="m", device="gpu-1", ttft_ms=185, input_tokens=1500, output_tokens=20)
    assert detect(task([late], baselines={("llm", "m", "gpu-1"): line})) == []
    # The same start 3x late is slow: the unusual part is the larger one.
    later = step("b", "llm", 0, 0.899, model="m", device="gpu-1", ttft_ms=405, input_tokens=1500, output_tokens=20)
    [finding] = detect(task([later], baselines={("llm", "m", "gpu-1"): line}))
    assert finding.evidence["slow_part"] == "prefill"


def test_a_start_is_judged_with_the_keys_spread_of_starts_not_the_lines_residuals():
    # The line fits this key's starts within 4 %, but its starts vary by 30 % with load and cache:
    # a start 1.6x its line (and 500 ms over in all) is within what the key's starts do.
    line = type(llm_stats())(count=300, median_ms=2200, mad_ms=300, ttft_median=600, ttft_mad=180, tpot_median=20,
                             tpot_mad=1.5, input_median=10_000, input_mad=3000, prefill_a=60, prefill_b=0.08,
                             prefill_log_mad=0.04, ttft_log_mad=0.3)
    call = step("a", "llm", 0, 2.34, model="m", device="gpu-1", ttft_ms=1340, input_tokens=10_000, output_tokens=51)
    assert detect(task([call], baselines={("llm", "m", "gpu-1"): line})) == []


def test_a_prefill_line_that_fits_worse_than_the_median_start_is_not_used():
    # Six calls with 30-60k-token prompts (a context grown long, 2 s to start) made the line's
    # upper third: slope 0.077 ms a token, intercept -211 ms, a 2.8k-token prompt "usually"
    # starting in 5 ms. Its residuals are wider than the starts about their median: the median
    # start (159 ms) is what the key's calls say, and a 142 ms start is not slow.
    steep = type(llm_stats())(count=210, median_ms=780, mad_ms=90, ttft_median=159, ttft_mad=40, tpot_median=10.9,
                              tpot_mad=0.8, input_median=5300, input_mad=2000, prefill_a=-211, prefill_b=0.077,
                              prefill_log_mad=2.9, ttft_log_mad=0.3)
    usual = step("a", "llm", 0, 0.765, model="m", device="gpu-1", ttft_ms=142, input_tokens=5804,
                 cached_tokens=3000, output_tokens=58)
    assert detect(task([usual], baselines={("llm", "m", "gpu-1"): steep})) == []
    # A start of 1.2 s for the same prompt is slow against the median start.
    late = step("b", "llm", 0, 1.85, model="m", device="gpu-1", ttft_ms=1227, input_tokens=5804,
                cached_tokens=3000, output_tokens=58)
    [finding] = detect(task([late], baselines={("llm", "m", "gpu-1"): steep}))
    assert finding.evidence["slow_part"] == "prefill" and finding.evidence["expected_ms"] == pytest.approx(780, abs=5)


def test_a_call_slow_for_a_group_of_few_runs_is_only_possibly_slow():
    # Six earlier runs of the whole suite: too few to call anything an outlier against them.
    [possible] = detect(_run_tests(80, {"target": "tests/"}, suite_runs=6))
    assert possible.confidence == "low" and "too few" in possible.confidence_reason
