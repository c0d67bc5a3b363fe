import pytest

from analysis.engine.detectors import context_growth

from .builders import step, task


def turns(tokens, ttfts):
    steps, t = [], 0.0
    for i, (tok, ttft) in enumerate(zip(tokens, ttfts, strict=True)):
        steps.append(step(f"l{i}", "llm", t, t + ttft / 1000 + 1, model="m", input_tokens=tok, ttft_ms=ttft,
                          output_tokens=50))
        t += ttft / 1000 + 1.5
    return task(steps)


def test_prompt_and_ttft_climbing_every_turn_is_context_growth():
    ctx = turns([1000, 3000, 6000, 11000, 18000], [150, 300, 600, 1100, 1800])
    [finding] = context_growth.detect(ctx)
    assert finding.step_ids == ("l0", "l1", "l2", "l3", "l4")
    assert round(finding.wasted_ms) == (300 - 150) + (600 - 150) + (1100 - 150) + (1800 - 150)
    assert "1,000 to 18,000 tokens over 5 LLM turns" in finding.summary


def test_a_stalled_later_turn_is_not_counted_as_growth():
    # TTFT = 50 ms + 0.02 ms a prompt token, and the fifth turn also waited 2 s for the machine:
    # the growth cost 0.02 × (2,000 + 4,000 + … + 10,000) = 600 ms, not 2.6 s.
    tokens = [1000, 3000, 5000, 7000, 9000, 11000]
    ttfts = [50 + 0.02 * n + (2000 if i == 4 else 0) for i, n in enumerate(tokens)]
    [finding] = context_growth.detect(turns(tokens, ttfts))
    assert round(finding.wasted_ms) == 600
    assert finding.evidence["ms_per_1k_tokens"] == 20.0


def test_a_long_task_takes_its_rate_from_turns_spread_across_it():
    # 400 turns (the rate is taken over RATE_TURNS of them): the same rate, the same waste.
    tokens = [1000 + 100 * i for i in range(400)]
    [finding] = context_growth.detect(turns(tokens, [50 + 0.02 * n for n in tokens]))
    assert finding.evidence["ms_per_1k_tokens"] == 20.0
    assert finding.wasted_ms == pytest.approx(sum(0.02 * (n - 1000) for n in tokens))


def test_ordinary_mild_growth_does_not_fire():
    ctx = turns([2000, 2300, 2600, 2900, 3200], [200, 210, 220, 235, 240])
    assert list(context_growth.detect(ctx)) == []


def test_a_big_prompt_without_a_trend_does_not_fire():
    ctx = turns([8000, 1000, 9000, 1200, 8500], [900, 150, 1000, 160, 950])
    assert list(context_growth.detect(ctx)) == []


def test_too_few_turns_do_not_fire():
    ctx = turns([1000, 10000, 30000], [150, 900, 2500])
    assert list(context_growth.detect(ctx)) == []


def test_one_queued_first_turn_neither_hides_nor_fakes_the_climb():
    ctx = turns([2000, 11000, 16000, 26000, 34000], [3000, 190, 255, 300, 370])
    [finding] = context_growth.detect(ctx)
    assert finding.evidence["reference_ttft_ms"] == 190
    flat = turns([1100, 10000, 22000, 24000, 30000], [160, 84, 95, 101, 95])
    assert list(context_growth.detect(flat)) == []


def test_without_ttft_the_time_the_output_does_not_explain_stands_in():
    from .builders import stats

    base = {("llm", "m", ""): stats(1200, 300, line_a=150.0, line_b=20.0, line_log_mad=0.08)}
    steps, t = [], 0.0
    for i, (tok, prefill) in enumerate(zip([1000, 3000, 6000, 11000, 18000], [150, 300, 600, 1100, 1800],
                                           strict=True)):
        dur = prefill + 20 * 49
        steps.append(step(f"l{i}", "llm", t, t + dur / 1000, model="m", input_tokens=tok, output_tokens=50))
        t += dur / 1000 + 0.5
    [finding] = context_growth.detect(task(steps, baselines=base))
    assert finding.evidence["ttft_ms"] == [150, 300, 600, 1100, 1800]


def calls(spec):
    """Turns of (model, prompt tokens, TTFT ms) one after another."""
    steps, t = [], 0.0
    for i, (model, tok, ttft) in enumerate(spec):
        steps.append(step(f"l{i}", "llm", t, t + ttft / 1000 + 1, model=model, input_tokens=tok, ttft_ms=ttft,
                          output_tokens=50))
        t += ttft / 1000 + 1.5
    return task(steps)


def test_a_routing_call_on_another_model_is_not_the_first_turn_of_the_growth():
    # A small model routes (640 tokens, fast); the answer model's prompts stay between 2.6k and 4.1k.
    ctx = calls([("router-mini", 638, 90), ("answer-70b", 2600, 300), ("answer-70b", 3100, 320),
                 ("answer-70b", 3500, 350), ("answer-70b", 3800, 380), ("answer-70b", 4126, 410)])
    assert list(context_growth.detect(ctx)) == []


def test_the_model_whose_prompt_grew_is_the_series_whatever_other_models_do():
    # The planner's prompt grows turn after turn; a summariser runs beside it on short prompts.
    spec = []
    for i, (tok, ttft) in enumerate(zip([1000, 3000, 6000, 11000, 18000, 26000], [150, 300, 600, 1100, 1800, 2600],
                                        strict=True)):
        spec += [("planner", tok, ttft), ("summariser", 900 + 40 * (i % 2), 60 + 5 * (i % 3))]
    [finding] = context_growth.detect(calls(spec))
    assert finding.step_ids == ("l0", "l2", "l4", "l6", "l8", "l10")
    assert finding.evidence["model"] == "planner"
    assert finding.summary.startswith("planner's prompt grew from 1,000 to 26,000 tokens over 6 LLM turns")


def test_each_model_whose_prompt_grew_is_a_finding_of_its_own():
    spec = []
    for tok, ttft in zip([1000, 3000, 6000, 11000, 18000], [150, 300, 600, 1100, 1800], strict=True):
        spec += [("a", tok, ttft), ("b", tok * 2, ttft * 2)]
    found = {f.evidence["model"]: f for f in context_growth.detect(calls(spec))}
    assert found["a"].step_ids == ("l0", "l2", "l4", "l6", "l8")
    assert found["b"].step_ids == ("l1", "l3", "l5", "l7", "l9")
    assert round(found["a"].wasted_ms) == (300 - 150) + (600 - 150) + (1100 - 150) + (1800 - 150)
