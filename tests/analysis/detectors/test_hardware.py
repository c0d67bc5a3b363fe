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


def test_a_hot_device_without_clocks_explains_a_call_slow_in_its_start_and_its_tokens_alike():
    # Heat slows every token, the prompt's included: TTFT 5x its usual and each further token 2x
    # are both outliers. That the start is the worse of the two does not make it a slow start
    # alone (an LPU or accelerator that reports its temperature and power, but no clocks).
    s = step("a", "llm", 10, 15, model="m", device="gpu-1", ttft_ms=1000, input_tokens=2000, output_tokens=101)
    hot = [type(x)(x.ts_ms, {k: v for k, v in {**x.metrics, "temperature_c": 92}.items()
                             if k not in ("throttled", "tokens_per_s")}) for x in samples(0, 30)]
    _, throttling, slow = run(ctx_with(s, hot))
    assert [f.kind for f in throttling] == ["hardware_throttling"] and not slow
    assert throttling[0].evidence["slow_part"] == "prefill" and throttling[0].evidence["tpot_z"] > 4


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


# --- telemetry in the shapes real exporters send: no `throttled` flag, no TTFT ----------------

from analysis.engine.detectors import hardware_kv_cache_pressure  # noqa: E402
from analysis.engine.detectors.base import DeviceNormal, MetricNormal, Sample  # noqa: E402

from .builders import T0  # noqa: E402

SERVER, GPU = "vllm-1:8000", "GPU-5f1c"
NO_TTFT = {("llm", "m", SERVER): type(llm_stats())(count=200, median_ms=1000, mad_ms=60, line_a=300, line_b=7,
                                                    line_log_mad=0.06, input_median=1500, input_mad=100)}


def readings(metrics: dict, incident: dict, *, at=(9, 14)) -> list[Sample]:
    return [Sample(T0 + t * 1000, {**metrics, **(incident if at[0] <= t <= at[1] else {})}) for t in range(0, 30)]


def served(call, *, server=None, gpu=None, children=(), baselines=NO_TTFT, waiting=1):
    normals = {SERVER: DeviceNormal({"queue_depth": MetricNormal(waiting, 1), "batch_size": MetricNormal(8, 1),
                                     "kv_cache_usage": MetricNormal(0.35, 0.05)}, 1000, 5000),
               GPU: DeviceNormal({"utilization": MetricNormal(0.65, 0.05), "sm_clock_mhz": MetricNormal(1410, 10),
                                  "sm_clock_max_mhz": MetricNormal(1410, 0), "clock_reasons": MetricNormal(0, 0),
                                  "temperature_c": MetricNormal(55, 2), "power_w": MetricNormal(410, 15)}, 1000, 5000)}
    ctx = task([call, *children], baselines=baselines, device_normals=normals, related={SERVER: (GPU,)},
               samples={SERVER: server or readings({"queue_depth": 1, "batch_size": 8, "kv_cache_usage": 0.35}, {}),
                        GPU: gpu or readings({"utilization": 0.65, "sm_clock_mhz": 1410, "sm_clock_max_mhz": 1410,
                                              "clock_reasons": 0, "temperature_c": 55, "power_w": 410}, {})})
    ctx.verdicts = step_verdicts(ctx)
    return ctx, {k: list(m.detect(ctx)) for k, m in (("queueing", hardware_queueing), ("throttling", hardware_throttling),
                                                     ("kv", hardware_kv_cache_pressure), ("slow", slow_step))}


def chat(**kw):
    return step("c", "llm", 10, 13.0, model="m", device=SERVER, input_tokens=1500, output_tokens=100, **kw)


def test_a_dcgm_power_brake_is_throttling_from_the_clock_event_reasons_without_ttft():
    gpu = readings({"utilization": 0.65, "sm_clock_mhz": 1410, "sm_clock_max_mhz": 1410, "clock_reasons": 0,
                    "temperature_c": 55, "power_w": 410}, {"sm_clock_mhz": 570, "clock_reasons": 0x88, "power_w": 200})
    _, found = served(chat(), gpu=gpu)
    [finding] = found["throttling"]
    assert not found["queueing"] and not found["kv"] and not found["slow"]
    assert "clock-event reasons 0x88 (HW slowdown, HW power brake)" in finding.summary
    assert "SM clock 570 MHz of a 1,410 MHz max vs a usual 1,410" in finding.summary


def test_a_routine_power_cap_at_full_clock_is_no_throttling():
    gpu = readings({"utilization": 0.65, "sm_clock_mhz": 1410, "sm_clock_max_mhz": 1410, "clock_reasons": 0,
                    "temperature_c": 55, "power_w": 410}, {"clock_reasons": 0x4, "utilization": 0.9})
    _, found = served(chat(), gpu=gpu)
    assert not found["throttling"] and found["slow"][0].evidence["verdict"] == "nominal"


def test_a_vllm_queue_burst_is_queueing_from_the_server_span_and_the_waiting_gauge():
    server_span = step("s", "other", 10.01, 12.99, name="llm_request", parent_step_id="c", device="vllm-1",
                       serving={"queue_ms": 1800.0, "prefill_ms": 90.0, "decode_ms": 700.0, "e2e_ms": 2300.0})
    waiting = readings({"queue_depth": 1, "batch_size": 8, "kv_cache_usage": 0.35}, {"queue_depth": 41})
    _, found = served(chat(), server=waiting, children=[server_span])
    [finding] = found["queueing"]
    assert "the server reports 1.8 s of 2.3 s in queue; 41 requests waiting vs a usual 1" in finding.summary
    assert not found["slow"] and not found["throttling"]  # the server span is no step of its own


def test_the_server_span_under_an_instrumented_http_client_span_still_tells_the_queue():
    # An instrumented HTTP library adds its CLIENT span between the chat span and vLLM's: chat →
    # POST → llm_request. The server's timings are the call's all the same; the call is judged
    # once, and a server span under another model call is never taken for this one's.
    http = step("h", "other", 10.005, 12.995, name="POST", parent_step_id="c")
    server_span = step("s", "other", 10.01, 12.99, name="llm_request", parent_step_id="h",
                       serving={"queue_ms": 1800.0, "prefill_ms": 90.0, "decode_ms": 700.0, "e2e_ms": 2300.0})
    _, found = served(chat(), children=[http, server_span])
    [finding] = found["queueing"]
    assert "the server reports 1.8 s of 2.3 s in queue" in finding.summary
    assert not found["slow"] and not found["throttling"]

    other_call = step("d", "llm", 10.001, 12.999, model="m", parent_step_id="c")
    under_other = step("s", "other", 10.01, 12.99, name="llm_request", parent_step_id="d",
                       serving={"queue_ms": 1800.0, "prefill_ms": 90.0, "decode_ms": 700.0, "e2e_ms": 2300.0})
    ctx, _ = served(chat(), children=[other_call, under_other])
    assert ctx.transport(ctx.steps[0]) is None


def test_preemptions_during_the_call_are_kv_cache_pressure():
    server = [Sample(T0 + t * 1000, {"queue_depth": 3 if 9 <= t <= 14 else 1, "batch_size": 8,
                                     "kv_cache_usage": 0.99 if 9 <= t <= 14 else 0.35,
                                     "preemptions": float(max(0, min(t, 14) - 9) * 2)}) for t in range(30)]
    _, found = served(chat(), server=server)
    [finding] = found["kv"]
    assert "6 requests preempted during the call" in finding.summary and "KV cache 99% full vs a usual 35%" in finding.summary
    assert not found["queueing"]


def test_a_slow_call_with_every_series_at_its_normal_is_nominal():
    _, found = served(chat())
    assert [f.evidence["verdict"] for f in found["slow"]] == ["nominal"]
    assert not found["queueing"] and not found["throttling"] and not found["kv"]


def test_server_decode_time_makes_a_slow_call_decode_bound_when_the_hardware_was_fine():
    server_span = step("s", "other", 10.01, 12.99, name="llm_request", parent_step_id="c", device="vllm-1",
                       serving={"queue_ms": 10.0, "prefill_ms": 90.0, "decode_ms": 2800.0, "e2e_ms": 2900.0})
    _, found = served(chat(), children=[server_span])
    [slow] = found["slow"]
    assert slow.evidence["verdict"] == "decode_bound" and "2.8 s decoding 100 tokens" in slow.summary


def test_with_no_baseline_yet_a_call_its_server_reports_mostly_queued_is_queueing():
    # The first calls of a model: nothing to be slow against, but vLLM's own span says where the
    # time went. The waste is the queue time itself, said so, at medium confidence.
    queued = step("s", "other", 10.01, 12.99, name="llm_request", parent_step_id="c", device="vllm-1",
                  serving={"queue_ms": 1800.0, "prefill_ms": 90.0, "decode_ms": 700.0, "e2e_ms": 2300.0})
    _, found = served(chat(), children=[queued], baselines={})
    [finding] = found["queueing"]
    assert finding.wasted_ms == 1800.0 and finding.confidence == "medium"
    assert "1.8 s of it waiting" in finding.summary and "the server reports 1.8 s of 2.3 s in queue" in finding.summary
    assert "No baseline" in finding.confidence_reason
    assert not found["slow"] and not found["throttling"]


def test_with_no_baseline_yet_a_short_wait_in_the_queue_is_no_finding():
    # A tenth of the call in queue is a server at work, not saturated: cold start stays silent.
    waited = step("s", "other", 10.01, 12.99, name="llm_request", parent_step_id="c", device="vllm-1",
                  serving={"queue_ms": 300.0, "prefill_ms": 90.0, "decode_ms": 2500.0, "e2e_ms": 2900.0})
    _, found = served(chat(), children=[waited], baselines={})
    assert not any(found.values()), found


def test_a_call_judged_only_by_other_devices_is_queueing_when_its_server_reports_it_queued():
    # The model has a baseline, but on other, slower hardware, where 3 s is usual: against it this
    # call is not slow, yet its own server says most of it was spent in queue.
    queued = step("s", "other", 10.01, 12.99, name="llm_request", parent_step_id="c", device="vllm-1",
                  serving={"queue_ms": 1800.0, "prefill_ms": 90.0, "decode_ms": 700.0, "e2e_ms": 2300.0})
    slower = type(llm_stats())(count=200, median_ms=3000, mad_ms=200, line_a=2300, line_b=7, line_log_mad=0.06,
                               input_median=1500, input_mad=100)
    elsewhere = {("llm", "m", ""): slower}
    _, found = served(chat(), children=[queued], baselines=elsewhere)
    [finding] = found["queueing"]
    assert finding.wasted_ms == 1800.0 and f"on {SERVER} yet" in finding.confidence_reason


# A key whose durations spread widely (log MAD 0.15): a call 30 % over its usual 1 s is no
# outlier by its duration alone.
WIDE = {("llm", "m", SERVER): type(llm_stats())(count=200, median_ms=1000, mad_ms=150, line_a=300, line_b=7,
                                                  line_log_mad=0.15, input_median=1500, input_mad=100)}


def _waited(queue_ms: float, end_s: float):
    call = step("c", "llm", 10, end_s, model="m", device=SERVER, input_tokens=1500, output_tokens=100)
    span = step("s", "other", 10.001, end_s - 0.001, name="llm_request", parent_step_id="c",
                serving={"queue_ms": queue_ms, "prefill_ms": 90.0, "decode_ms": 700.0,
                         "e2e_ms": (end_s - 10) * 1000 - 2})
    return call, span


def test_a_wait_the_server_measured_is_queueing_though_the_duration_alone_is_no_outlier():
    # vLLM says 300 ms of this 1.3 s call went in its queue; the call usually takes 1 s. By its
    # duration it is within the key's spread, but the wait is a measurement, not an inference.
    call, span = _waited(300.0, 11.3)
    _, found = served(call, children=[span], baselines=WIDE)
    [finding] = found["queueing"]
    assert finding.wasted_ms == 300.0 and "300 ms of it waiting" in finding.summary
    assert "the server reports 300 ms" in finding.summary and "measured the wait" in finding.confidence_reason
    assert not found["slow"] and not found["throttling"]


def test_a_wait_that_is_part_of_the_keys_usual_time_is_no_finding():
    # The same 300 ms wait on a key that usually takes 1.3 s: its server is always this busy, and
    # the call took no longer than usual, so there is nothing new to act on in this task.
    call, span = _waited(300.0, 11.3)
    usual = {("llm", "m", SERVER): type(llm_stats())(count=200, median_ms=1300, mad_ms=150, line_a=600, line_b=7,
                                                       line_log_mad=0.15, input_median=1500, input_mad=100)}
    _, found = served(call, children=[span], baselines=usual)
    assert not any(found.values()), found


def test_a_wait_a_few_runs_learned_in_an_incident_is_queueing_when_the_server_seldom_queues():
    # The same key and wait, but its server's own series (every scrape of the week) say nothing
    # usually waits there, and 40 requests waited during this call: the key's 1.3 s was learned
    # from runs that fell in an incident, not from a server that is always this busy.
    call, span = _waited(300.0, 11.3)
    usual = {("llm", "m", SERVER): type(llm_stats())(count=23, median_ms=1300, mad_ms=150, line_a=600, line_b=7,
                                                       line_log_mad=0.15, input_median=1500, input_mad=100)}
    server = readings({"queue_depth": 0, "batch_size": 8, "kv_cache_usage": 0.35}, {"queue_depth": 40})
    _, found = served(call, children=[span], baselines=usual, server=server, waiting=0)
    [finding] = found["queueing"]
    assert finding.wasted_ms == 300.0 and "40 requests waiting vs a usual 0" in finding.summary
    # A server where a request usually waits (one ahead, as the key's runs say) is always busy.
    _, found = served(call, children=[span], baselines=usual, server=server, waiting=1)
    assert not any(found.values()), found


def test_a_measured_wait_under_a_fifth_of_the_usual_call_or_under_100_ms_is_no_finding():
    call, span = _waited(150.0, 11.15)
    _, found = served(call, children=[span], baselines=WIDE)
    assert not any(found.values()), found
    # A quarter of a short call (85 ms of a usual 350 ms): a server at work, not a saturated one.
    short = {("llm", "m", SERVER): type(llm_stats())(count=200, median_ms=350, mad_ms=50, line_a=0, line_b=3.5,
                                                       line_log_mad=0.15, input_median=1500, input_mad=100)}
    call, span = _waited(85.0, 10.44)
    _, found = served(call, children=[span], baselines=short)
    assert not any(found.values()), found


def test_a_wait_of_tens_of_ms_is_no_saturation_however_tight_the_calls_usual_start():
    # A start usually 135 ms for this prompt (a tight prefill line), 180 ms here, 45 of them in
    # the server's queue: the server at work, not saturated, though the start is an outlier.
    tight = {("llm", "m", SERVER): type(llm_stats())(count=300, median_ms=230, mad_ms=30, ttft_median=140,
                                                       ttft_mad=30, tpot_median=20, tpot_mad=2, input_median=1500,
                                                       input_mad=300, prefill_a=60, prefill_b=0.05,
                                                       prefill_log_mad=0.04)}
    call = step("c", "llm", 10, 10.26, model="m", device=SERVER, input_tokens=1500, output_tokens=5, ttft_ms=180)
    span = step("s", "other", 10.001, 10.259, name="llm_request", parent_step_id="c",
                serving={"queue_ms": 45.0, "prefill_ms": 135.0, "decode_ms": 78.0, "e2e_ms": 258.0})
    _, found = served(call, children=[span], baselines=tight)
    assert not any(found.values()), found
