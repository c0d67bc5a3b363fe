"""hardware_queueing / hardware_throttling and the verdict every slow LLM step carries."""

from analysis.engine.detectors import hardware_queueing, hardware_throttling, slow_step
from analysis.engine.verdicts import step_verdicts

from .builders import device_normal, llm_stats, samples, step, task


def run(ctx):
    ctx.verdicts = step_verdicts(ctx)
    return (list(hardware_queueing.detect(ctx)), list(hardware_throttling.detect(ctx)),
            list(slow_step.detect(ctx)))


def ctx_with(llm_step, device_samples):
    return task([llm_step], baselines={("llm", "m", "gpu-1"): llm_stats()},
                device_normals={"gpu-1": device_normal()}, samples={"gpu-1": device_samples})


def test_a_slow_ttft_while_the_queue_was_deep_is_queueing_with_the_ttft_split():
    s = step("a", "llm", 10, 13.8, model="m", device="gpu-1", ttft_ms=2000, input_tokens=2000, output_tokens=91)
    base = samples(0, 30)
    spiky = [x if not 9 <= (x.ts_ms - base[0].ts_ms) / 1000 <= 14 else
             type(x)(x.ts_ms, {**x.metrics, "queue_depth": 24, "utilization": 0.99}) for x in base]
    queueing, throttling, slow = run(ctx_with(s, spiky))
    assert [f.kind for f in queueing] == ["hardware_queueing"] and not throttling and not slow
    evidence = queueing[0].evidence
    assert evidence["verdict"] == "queueing"
    assert evidence["ttft_split"]["queue_wait_ms"] == 1800 and evidence["ttft_split"]["compute_ms"] == 200
    assert "saturated" in queueing[0].summary


def test_slow_decode_while_throttled_is_throttling():
    s = step("a", "llm", 10, 15, model="m", device="gpu-1", ttft_ms=260, input_tokens=2000, output_tokens=101)
    hot = [x if not 9 <= (x.ts_ms - samples(0, 0)[0].ts_ms) / 1000 <= 16 else
           type(x)(x.ts_ms, {**x.metrics, "throttled": 1.0, "temperature_c": 91, "tokens_per_s": 400})
           for x in samples(0, 30)]
    queueing, throttling, slow = run(ctx_with(s, hot))
    assert [f.kind for f in throttling] == ["hardware_throttling"] and not queueing and not slow
    assert throttling[0].evidence["slow_part"] == "decode"


def test_a_busy_device_does_not_make_a_normal_step_a_finding():
    s = step("a", "llm", 10, 12.2, model="m", device="gpu-1", ttft_ms=210, input_tokens=2000, output_tokens=100)
    busy = [type(x)(x.ts_ms, {**x.metrics, "queue_depth": 30}) for x in samples(0, 30)]
    assert run(ctx_with(s, busy)) == ([], [], [])


def test_no_telemetry_is_nominal_and_says_telemetry_is_missing():
    s = step("a", "llm", 10, 13.8, model="m", device="gpu-1", ttft_ms=2000, input_tokens=2000, output_tokens=91)
    queueing, throttling, slow = run(ctx_with(s, []))
    assert not queueing and not throttling
    assert slow[0].evidence["verdict"] == "nominal" and slow[0].evidence["telemetry"] == "missing"


def test_on_a_throttled_device_a_modest_slowdown_of_a_fast_step_is_attributed():
    # 240 ms instead of ~150 ms: too small to flag on its own, but the device was throttled.
    s = step("a", "llm", 10, 10.24, model="m", device="gpu-1", ttft_ms=90, input_tokens=2000, output_tokens=51)
    stats = {("llm", "m", "gpu-1"): type(llm_stats())(count=200, median_ms=150, mad_ms=20, ttft_median=60,
                                                     ttft_mad=6, tpot_median=1.8, tpot_mad=0.15,
                                                     input_median=2000, input_mad=300)}
    hot = [type(x)(x.ts_ms, {**x.metrics, "throttled": 1.0}) for x in samples(0, 30)]
    ctx = task([s], baselines=stats, device_normals={"gpu-1": device_normal()}, samples={"gpu-1": hot})
    _, throttling, _ = run(ctx)
    assert [f.kind for f in throttling] == ["hardware_throttling"]
    calm = task([s], baselines=stats, device_normals={"gpu-1": device_normal()}, samples={"gpu-1": samples(0, 30)})
    assert run(calm) == ([], [], [])


def test_a_long_prompt_explains_a_slow_start_even_on_a_busy_device():
    s = step("a", "llm", 10, 13.8, model="m", device="gpu-1", ttft_ms=1900, input_tokens=20000, output_tokens=91)
    busy = [type(x)(x.ts_ms, {**x.metrics, "queue_depth": 30}) for x in samples(0, 30)]
    queueing, _, slow = run(ctx_with(s, busy))
    assert not queueing
    assert slow[0].evidence["verdict"] == "prefill_bound"


def test_a_hot_device_without_a_throttle_flag_and_slow_decode_is_throttling():
    s = step("a", "llm", 10, 15, model="m", device="gpu-1", ttft_ms=260, input_tokens=2000, output_tokens=101)
    hot = [type(x)(x.ts_ms, {k: v for k, v in {**x.metrics, "temperature_c": 92}.items()
                             if k not in ("throttled", "tokens_per_s")}) for x in samples(0, 30)]
    _, throttling, slow = run(ctx_with(s, hot))
    assert [f.kind for f in throttling] == ["hardware_throttling"] and not slow


def test_a_hot_busy_device_with_a_slow_start_is_queueing_not_throttling():
    s = step("a", "llm", 10, 13.8, model="m", device="gpu-1", ttft_ms=2000, input_tokens=2000, output_tokens=91)
    busy = [type(x)(x.ts_ms, {**x.metrics, "temperature_c": 80, "queue_depth": 24}) for x in samples(0, 30)]
    queueing, throttling, _ = run(ctx_with(s, busy))
    assert [f.kind for f in queueing] == ["hardware_queueing"] and not throttling


def test_a_hot_device_does_not_lower_the_bar_for_a_step_it_does_not_explain():
    # TTFT 320 ms vs usual 200 (z ≈ 3.2): slow only with device evidence, and a hot but
    # unqueued device does not explain a slow start.
    s = step("a", "llm", 10, 10.52, model="m", device="gpu-1", ttft_ms=320, input_tokens=2000, output_tokens=11)
    hot = [type(x)(x.ts_ms, {**x.metrics, "temperature_c": 85}) for x in samples(0, 30)]
    assert run(ctx_with(s, hot)) == ([], [], [])
