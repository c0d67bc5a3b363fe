"""Is it the chip? A hardware verdict for every slow LLM step: `throttling`, `queueing`,
`kv_cache_pressure`, `prefill_bound`, `decode_bound` or `nominal`, from what the serving side
reported over the step's interval against each series' own normal: the inference server's
request span (vLLM `llm_request`: queue, prefill, decode), the server's series (waiting and
running requests, KV-cache use, preemptions) and its GPUs' (DCGM clocks and clock-event reasons,
power, temperature, utilisation). Each verdict names the evidence it rests on. The method (when
a step is slow, the cut-offs, each verdict's rule) is docs/analysis.md, "Hardware verdict"."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from analysis.engine.detectors.base import (
    Z_OUTLIER,
    Z_SLOW,
    BaselineStats,
    StepData,
    TaskContext,
    log_z,
    robust_z,
)
from analysis.measures import tpot_ms
from analysis.units import fmt_ms

MIN_EXCESS_MS = 100.0
# With device evidence the question is no longer "is this step worth a look on its own" but
# "which steps did this device incident slow down": every one counts towards the incident,
# so only timer and network jitter (~20 ms) is excluded; the 20 % relative floor still holds.
MIN_EXCESS_CORROBORATED_MS = 20.0
MIN_EXCESS_RATIO = 0.2
Z_CORROBORATED = 2.0
# Resolutions of device metrics, used as MAD floors: below these a difference is noise.
RESOLUTION = {"queue_depth": 1.0, "utilization": 0.02, "temperature_c": 1.0, "tokens_per_s": 1.0,
              "throttled": 0.5, "power_w": 5.0, "batch_size": 1.0, "mem_bw_util": 0.02,
              "kv_cache_usage": 0.02, "clock_ratio": 0.02, "queue_time_ms": 10.0, "clock_mhz": 15.0}
# (`clock_mhz`: the SM clock itself where no max clock is reported; GPUs set their graphics clock
# in steps of about 15 MHz, `nvidia-smi -q -d SUPPORTED_CLOCKS`, so less is no difference.)
# Metrics whose anomaly is a drop (the others: a rise).
LOWER_IS_WORSE = {"tokens_per_s", "power_w", "clock_ratio", "clock_mhz"}
SAMPLE_METRICS = ("queue_depth", "batch_size", "utilization", "temperature_c", "tokens_per_s", "power_w",
                  "throttled", "kv_cache_usage")
# The server's own account of a call decides when the part it names is the larger part of the
# call's excess: half is the least share of which "the time went there" is true.
SERVING_SHARE = 0.5
# A clock under its normal counts only when at least this far under (fraction of max): a boost
# clock wanders by a few percent with load and temperature, a slowdown halves it.
CLOCK_DROP = 0.1
# The KV cache delays admission only when nearly full: vLLM admits a request when its blocks fit,
# so a cache at 60 % instead of a usual 30 % is busier, not in the way.
KV_NEAR_FULL = 0.9

# DCGM clock-event reasons (dcgm_fields.h, DCGM_CLOCKS_EVENT_REASON_*; NVML's
# nvmlClocksEventReason* are the same bits). Categorical by nature: a bit says a protection
# engaged, so a constant is the only reading; a bit the series carries in its own normal (a
# device always capped) is not evidence.
CLOCK_REASONS = {0x1: "GPU idle", 0x2: "applications clocks setting", 0x4: "SW power cap",
                 0x8: "HW slowdown", 0x10: "sync boost", 0x20: "SW thermal slowdown",
                 0x40: "HW thermal slowdown", 0x80: "HW power brake", 0x100: "display clock setting"}
# Reasons that slow the clocks whatever the load: thermal and power protection.
SLOWDOWN_BITS = 0x8 | 0x20 | 0x40 | 0x80
# SW power cap is routine at full load (the GPU holds its power limit); evidence only with the
# clock down too.
POWER_CAP_BIT = 0x4


def llm_slowness(step: StepData, stats: BaselineStats | None, *, z_cut: float = Z_SLOW) -> dict | None:
    """Expected duration, excess and z-scores for an LLM step; None when it is not slow or
    there is no baseline to compare with."""
    if stats is None:
        return None
    ttft_z = tpot_z = None
    expected = llm_expected_ms(step, stats)
    excess = step.duration_ms - expected
    unusual = excess  # the excess of the parts that are outliers
    if step.ttft_ms is not None and stats.ttft_median and stats.tpot_median:
        usual_start = stats.expected_ttft(step.prefill_tokens)
        ttft_z = log_z(step.ttft_ms, usual_start, stats.spread("ttft"))
        tpot = tpot_ms(duration_ms=step.duration_ms, ttft_ms=step.ttft_ms, output_tokens=step.output_tokens)
        if tpot is not None:
            tpot_z = log_z(tpot, stats.tpot_median, stats.spread("tpot"))
        outlier = ttft_z > z_cut or (tpot_z is not None and tpot_z > z_cut)
        # A start that is an outlier by a few ms (against a tight prefill line) does not make the
        # decode's ordinary variation slow: the parts that are outliers must cost the floor by
        # themselves (not its share of the call: a throttle slows the tokens too, if less).
        unusual = ((step.ttft_ms - usual_start if ttft_z > z_cut else 0.0)
                   + (excess - (step.ttft_ms - usual_start) if tpot_z is not None and tpot_z > z_cut else 0.0))
    elif step.output_tokens is not None and stats.duration_line() is not None:
        outlier = log_z(step.duration_ms, expected, stats.line_log_mad) > z_cut
    else:
        outlier = log_z(step.duration_ms, stats.median_ms, stats.spread("duration")) > z_cut
    floor = MIN_EXCESS_CORROBORATED_MS if z_cut < Z_SLOW else MIN_EXCESS_MS
    if not outlier or excess < max(floor, MIN_EXCESS_RATIO * expected) or unusual < floor:
        return None
    decode_slow = tpot_z is not None and tpot_z > z_cut and tpot_z >= (ttft_z or 0.0)
    return {"expected_ms": round(expected, 1), "excess_ms": round(excess, 1),
            "ttft_z": _r(ttft_z), "tpot_z": _r(tpot_z), "z_cut": z_cut,
            "slow_part": "decode" if decode_slow else "prefill" if ttft_z is not None else "whole"}


def llm_expected_ms(step: StepData, stats: BaselineStats) -> float:
    """What an LLM call of this shape usually takes: TTFT for its prompt (the prefill line) plus
    TPOT per further token when it streamed; else the resistant line over output tokens (where
    it fits, BaselineStats.duration_line); else the median."""
    if step.ttft_ms is not None and stats.ttft_median and stats.tpot_median:
        return stats.expected_ttft(step.prefill_tokens) + stats.tpot_median * max((step.output_tokens or 0) - 1, 0)
    line = stats.duration_line()
    if step.output_tokens is not None and line is not None:
        return max(line[0] + line[1] * step.output_tokens, 1.0)
    return stats.median_ms


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _window(samples, start: float, end: float, times: list[float] | None = None):
    if times is None:
        times = [s.ts_ms for s in samples]
    return samples[bisect_left(times, start): bisect_right(times, end)]


def _ratio(sample) -> float | None:
    sm, top = sample.metrics.get("sm_clock_mhz"), sample.metrics.get("sm_clock_max_mhz")
    return sm / top if sm is not None and top else None


def _source_signals(ctx: TaskContext, device: str, step: StepData, times: list[float] | None) -> dict:
    """The worst value of each metric of one device over the step, with its normal and z."""
    normal = ctx.device_normals.get(device)
    samples = ctx.samples.get(device, [])
    pad = (normal.interval_ms if normal else 1000.0) / 2
    window = _window(samples, step.start_ms - pad, step.end_ms + pad, times)
    if not window:
        return {}
    out: dict = {"samples": len(window)}
    for metric in SAMPLE_METRICS:
        values = [x.metrics[metric] for x in window if x.metrics.get(metric) is not None]
        if values:
            out[metric] = _entry(metric, min(values) if metric in LOWER_IS_WORSE else max(values),
                                 normal.metrics.get(metric) if normal else None, device)
    ratios = [(r, x) for x in window if (r := _ratio(x)) is not None]
    if ratios:
        worst, at = min(ratios, key=lambda pair: pair[0])
        ref = None
        if normal and "sm_clock_mhz" in normal.metrics and normal.metrics.get("sm_clock_max_mhz"):
            top = normal.metrics["sm_clock_max_mhz"].median
            if top:
                ref = type(normal.metrics["sm_clock_mhz"])(normal.metrics["sm_clock_mhz"].median / top,
                                                           normal.metrics["sm_clock_mhz"].mad / top)
        entry = _entry("clock_ratio", worst, ref, device)
        entry.update(mhz=round(at.metrics["sm_clock_mhz"]), max_mhz=round(at.metrics["sm_clock_max_mhz"]))
        if ref is not None:
            entry["normal_mhz"] = round(ref.median * at.metrics["sm_clock_max_mhz"])
        out["clock_ratio"] = entry
    elif normal and "sm_clock_mhz" in normal.metrics and not normal.metrics.get("sm_clock_max_mhz"):
        # A stock dcgm-exporter sends the SM clock and no max clock: the clock against its own
        # history (`_clock_fell`).
        clocks = [x.metrics["sm_clock_mhz"] for x in window if x.metrics.get("sm_clock_mhz") is not None]
        if clocks:
            out["clock_mhz"] = _entry("clock_mhz", min(clocks), normal.metrics["sm_clock_mhz"], device)
    bits = 0
    for x in window:
        if x.metrics.get("clock_reasons") is not None:
            bits |= int(x.metrics["clock_reasons"])
    if any(x.metrics.get("clock_reasons") is not None for x in window):
        usual = normal.metrics.get("clock_reasons") if normal else None
        usual_bits = int(usual.median) if usual else 0
        out["clock_reasons"] = {"value": bits, "hex": hex(bits), "normal": usual_bits, "source": device,
                                "reasons": [name for bit, name in CLOCK_REASONS.items() if bits & bit],
                                "new": bits & ~usual_bits}
    queued = _queue_time(samples, step, times)
    if queued is not None:
        entry = _entry("queue_time_ms", queued[0], normal.metrics.get("queue_time_ms") if normal else None, device)
        entry["requests"] = queued[1]
        out["queue_time_ms"] = entry
    counts = [x.metrics["preemptions"] for x in window if x.metrics.get("preemptions") is not None]
    if len(counts) >= 2:
        # A counter: what it rose by over the call (a restart, a fall, is no preemption).
        out["preempted"] = {"value": max(counts[-1] - counts[0], 0.0), "source": device}
    return out


def _queue_time(samples, step: StepData, times: list[float] | None) -> tuple[float, float] | None:
    """(mean ms in queue per request, requests) of a server between its last scrape before the
    call and its first after, from its two queue-time counters (vLLM's queue-time histogram,
    Triton's queue duration); None without two such scrapes, or across a restart."""
    if times is None:
        times = [s.ts_ms for s in samples]

    def counters(x):
        total, count = x.metrics.get("queue_time_s"), x.metrics.get("queue_time_requests")
        return None if total is None or count is None else (total, count)

    before = next((c for x in reversed(samples[:bisect_right(times, step.start_ms)]) if (c := counters(x))), None)
    after = next((c for x in samples[bisect_left(times, step.end_ms):] if (c := counters(x))), None)
    if before is None or after is None or after[1] <= before[1] or after[0] < before[0]:
        return None
    requests = after[1] - before[1]
    return 1000.0 * (after[0] - before[0]) / requests, requests


def _entry(metric: str, worst: float, ref, device: str) -> dict:
    entry = {"value": round(worst, 3), "source": device}
    if ref is not None:
        entry["normal"] = round(ref.median, 3)
        entry["z"] = round(robust_z(worst, ref.median, ref.mad, resolution=RESOLUTION[metric]), 2)
    return entry


def _worse(metric: str, a: dict, b: dict) -> bool:
    """Whether reading `a` is more anomalous than `b`."""
    if "z" in a or "z" in b:
        za, zb = a.get("z", 0.0), b.get("z", 0.0)
        return za < zb if metric in LOWER_IS_WORSE else za > zb
    return a["value"] < b["value"] if metric in LOWER_IS_WORSE else a["value"] > b["value"]


def serving_of(ctx: TaskContext, step: StepData) -> dict | None:
    """The server's timings of a call: its own (a server span standing alone) or those of its
    server span below it (vLLM `llm_request` under the client's chat span, directly or under the
    HTTP client span between them: `TaskContext.transport`)."""
    if step.serving:
        return step.serving
    below = ctx.transport(step)
    return below.server_span.serving if below is not None and below.server_span is not None else None


def served_by(ctx: TaskContext, step: StepData) -> tuple[str, ...]:
    """The devices whose telemetry describes a call: its device, the server its span names beside
    a GPU (`StepData.server`) and the server its request reached (`TaskContext.transport`), and
    those related to each (`TaskContext.related`). A Service's pods stand in for the Service
    only when the server's own span does not say which pod answered."""
    below = ctx.transport(step)
    reached = below.device if below is not None else ""
    named = [d for d in (step.device, step.server) if d]
    pooled = [d for d in named if d in _pools(ctx)]
    if not named or (pooled and reached and below.server_span is not None):
        named = [d for d in named if d not in pooled] + [reached]
    out: list[str] = []
    for device in named:
        if device and device not in out:
            out.append(device)
            out += [d for d in ctx.related.get(device, ()) if d not in out]
    return tuple(out)


def _pools(ctx: TaskContext) -> dict[str, tuple[str, ...]]:
    return getattr(ctx.related, "pools", {})


def device_signals(ctx: TaskContext, step: StepData, *, times: dict[str, list[float]] | None = None) -> dict:
    """Over the step's interval: the worst reading of each metric among the devices that served
    it, against that device's own normal; the server's own timings. `times`: per device, the
    samples' ts_ms, when the caller has them already."""
    sources = served_by(ctx, step)
    signals = _signals_of(ctx, step, sources, times)
    if sources:
        signals["devices"] = list(sources)
    serving = serving_of(ctx, step)
    if serving:
        signals["serving"] = serving
    return signals


def _signals_of(ctx: TaskContext, step: StepData, sources, times: dict[str, list[float]] | None) -> dict:
    """The worst reading of each metric among `sources` over the step, each against its own normal."""
    signals: dict = {"samples": 0}
    for device in sources:
        if times is not None and device not in times:
            times[device] = [x.ts_ms for x in ctx.samples.get(device, [])]
        found = _source_signals(ctx, device, step, times.get(device) if times is not None else None)
        signals["samples"] += found.pop("samples", 0)
        for metric, entry in found.items():
            if metric == "clock_reasons" and metric in signals:
                known = signals[metric]
                # The source named is the device whose bits are new (else the first's).
                source = entry["source"] if entry["new"] and not known["new"] else known["source"]
                entry = {**known, "value": known["value"] | entry["value"], "new": known["new"] | entry["new"],
                         "source": source}
                entry.update(hex=hex(entry["value"]),
                             reasons=[n for bit, n in CLOCK_REASONS.items() if entry["value"] & bit])
            elif metric in signals and not _worse(metric, entry, signals[metric]):
                continue
            signals[metric] = entry
    return signals


def _z(signals: dict, metric: str) -> float:
    return signals.get(metric, {}).get("z", 0.0)


def _hot(signals: dict) -> bool:
    return _z(signals, "temperature_c") > Z_OUTLIER


def _clock_down(signals: dict) -> bool:
    """SM clock well under its normal share of max while the GPU was not idling."""
    clock = signals.get("clock_ratio")
    if not clock or "z" not in clock or clock["z"] >= -Z_OUTLIER or clock["value"] > clock["normal"] - CLOCK_DROP:
        return False
    util = signals.get("utilization", {})
    return "normal" not in util or util["value"] >= util["normal"]


def _clock_fell(signals: dict) -> bool:
    """With no max clock and no clock-event reasons (a stock dcgm-exporter): the SM clock an
    outlier downwards against its own history and at least CLOCK_DROP under its usual, while the
    GPU was not idling (an idle GPU lowers its clock by design)."""
    clock = signals.get("clock_mhz")
    if (not clock or "z" not in clock or "clock_reasons" in signals or clock["z"] >= -Z_OUTLIER
            or clock["value"] > clock["normal"] * (1 - CLOCK_DROP)):
        return False
    util = signals.get("utilization", {})
    return "normal" not in util or util["value"] >= util["normal"]


# How a throttle judged from the SM clock's own history alone is worded (`verdict_for` reads it).
HISTORY_ONLY = "no max clock or clock-event reasons reported: judged against its own history"


def evidence(signals: dict, excess_ms: float | None = None) -> dict[str, list[str]]:
    """What each hardware cause has in its favour, as readings a person can check: keys
    `throttling`, `kv_cache_pressure`, `queueing`, `thermal_only`; an absent key has none."""
    found: dict[str, list[str]] = {}

    def add(cause: str, text: str) -> None:
        found.setdefault(cause, []).append(text)

    reasons = signals.get("clock_reasons")
    clock_down = _clock_down(signals)
    if reasons:
        slowing = reasons["new"] & (SLOWDOWN_BITS | (POWER_CAP_BIT if clock_down else 0))
        if slowing:
            names = ", ".join(n for bit, n in CLOCK_REASONS.items() if slowing & bit)
            add("throttling", f"clock-event reasons {reasons['hex']} ({names})")
    if clock_down:
        c = signals["clock_ratio"]
        add("throttling", f"SM clock {c['mhz']:,} MHz of a {c['max_mhz']:,} MHz max vs a usual {c['normal_mhz']:,}")
    if _clock_fell(signals):
        c = signals["clock_mhz"]
        add("throttling", f"SM clock {c['value']:,.0f} MHz vs a usual {c['normal']:,.0f} MHz ({HISTORY_ONLY})")
        if _z(signals, "power_w") < -Z_OUTLIER:
            add("throttling", _reading(signals, "power_w", "power", " W"))
    if signals.get("throttled", {}).get("value", 0.0) >= 0.5:
        add("throttling", "throttle flag set")
    if _hot(signals):
        t = signals["temperature_c"]
        hot = f"temperature {t['value']:g} °C vs a usual {t['normal']:g} °C"
        slow_output = _z(signals, "tokens_per_s") < -Z_OUTLIER or _z(signals, "power_w") < -Z_OUTLIER
        if slow_output or "throttling" in found:
            add("throttling", hot)
            if slow_output:
                add("throttling", _reading(signals, "tokens_per_s", "tokens/s") or _reading(signals, "power_w", "power", " W"))
        elif "clock_ratio" not in signals and "clock_reasons" not in signals:
            # Hot and no clock readings to say whether it slowed: the heat is the only witness.
            add("thermal_only", hot + " (no clock readings)")
    preempted = signals.get("preempted", {}).get("value", 0.0)
    if preempted >= 1:
        # A preemption is by definition the KV cache running out: vLLM evicts a running request
        # only when a decode step cannot get a block.
        add("kv_cache_pressure", f"{preempted:g} request{'s' if preempted != 1 else ''} preempted during the call")
    kv = signals.get("kv_cache_usage", {})
    if kv.get("z", 0.0) > Z_OUTLIER and kv.get("value", 0.0) >= KV_NEAR_FULL:
        add("kv_cache_pressure", f"KV cache {kv['value']:.0%} full vs a usual {kv['normal']:.0%}")
    serving = signals.get("serving") or {}
    queue_ms = serving.get("queue_ms")
    # The server's own account of one request's wait: the larger part of the excess, and a wait
    # that would be a finding on its own (MIN_EXCESS_MS; `_measured_queue`): a server at work
    # queues requests for tens of ms, which is no saturation, however tight the call's usual.
    if queue_ms is not None and excess_ms and queue_ms >= max(SERVING_SHARE * excess_ms, MIN_EXCESS_MS):
        total = serving.get("e2e_ms")
        of = f" of {fmt_ms(total)}" if total else ""
        add("queueing", f"the server reports {fmt_ms(queue_ms)}{of} in queue")
    waited = signals.get("queue_time_ms", {})
    if (waited.get("z", 0.0) > Z_OUTLIER and excess_ms
            and waited["value"] - waited["normal"] >= SERVING_SHARE * excess_ms):
        add("queueing", f"the server's requests waited {fmt_ms(waited['value'])} in queue on average during the "
                        f"call vs a usual {fmt_ms(waited['normal'])} ({waited['requests']:g} requests)")
    queue = signals.get("queue_depth", {})
    if queue.get("z", 0.0) > Z_OUTLIER and queue.get("value", 0.0) - queue.get("normal", 0.0) >= 1.0:
        add("queueing", f"{queue['value']:g} requests waiting vs a usual {queue['normal']:g}")
    util = signals.get("utilization", {})
    if util.get("z", 0.0) > Z_OUTLIER and util.get("value", 0.0) >= 0.9:
        add("queueing", f"utilisation {util['value']:.0%} vs a usual {util['normal']:.0%}")
    return found


def _reading(sig: dict, metric: str, label: str, unit: str = "") -> str | None:
    entry = sig.get(metric)
    if not entry:
        return None
    normal = f" vs a usual {entry['normal']:g}{unit}" if "normal" in entry else ""
    return f"{label} {entry['value']:g}{unit}{normal}"


def device_anomaly(signals: dict) -> tuple[bool, bool]:
    """(throttled, queued) from the device signals over a step (no server timings)."""
    found = evidence(signals)
    return "throttling" in found, "queueing" in found


def verdict_for(ctx: TaskContext, step: StepData, slowness: dict, signals: dict) -> dict:
    """The hardware verdict of one slow LLM step, with the numbers behind it."""
    stats = ctx.baseline(step)
    found = evidence(signals, slowness["excess_ms"])
    serving = signals.get("serving") or {}
    excess = slowness["excess_ms"]
    long_prompt = False
    if step.input_tokens and stats and stats.input_median:
        long_prompt = (log_z(step.input_tokens, stats.input_median, stats.spread("input")) > Z_OUTLIER
                       or step.input_tokens >= 2 * stats.input_median)
    server_decode = serving.get("decode_ms") is not None and serving["decode_ms"] >= SERVING_SHARE * excess
    server_prefill = serving.get("prefill_ms") is not None and serving["prefill_ms"] >= SERVING_SHARE * excess
    decode_slow = slowness.get("slow_part") == "decode" or (server_decode and "queueing" not in found)
    compute = None
    if step.ttft_ms is not None and stats and stats.ttft_median is not None:
        if stats.prefill_line() is not None and step.input_tokens is not None:
            usual_start = stats.expected_ttft(step.prefill_tokens)
        else:  # no prefill line that fits: the median start, scaled by a longer prompt
            usual_start = stats.ttft_median * (max(1.0, (step.input_tokens or 0) / stats.input_median)
                                               if stats.input_median else 1.0)
        compute = min(step.ttft_ms, usual_start)
    # A long prompt whose TTFT is no more than its prefill would take explains a slow start
    # by itself, whatever the queue did.
    prompt_explains = (long_prompt and not decode_slow and compute is not None
                       and step.ttft_ms <= compute * (1 + MIN_EXCESS_RATIO))
    server_queued = any(e.startswith("the server reports") for e in found.get("queueing", ()))
    if "throttling" in found and (decode_slow or "queueing" not in found or not server_queued):
        verdict = "throttling"
    elif "kv_cache_pressure" in found and any("preempted" in e for e in found["kv_cache_pressure"]):
        verdict = "kv_cache_pressure"
    elif "queueing" in found and not prompt_explains:
        verdict = "queueing"
    elif "kv_cache_pressure" in found:
        verdict = "kv_cache_pressure"
    elif "thermal_only" in found and not _start_only(slowness):
        # Heat slows every token; a slow start alone it does not explain.
        verdict = "throttling"
    elif server_prefill or (long_prompt and not decode_slow):
        verdict = "prefill_bound"
    elif server_decode:
        verdict = "decode_bound"
    else:
        verdict = "nominal"
    if verdict == "throttling":
        reasons = found.get("throttling") or found.get("thermal_only", [])
    else:
        reasons = found.get(verdict, [])
    if verdict == "prefill_bound" and server_prefill:
        reasons = [f"the server reports {fmt_ms(serving['prefill_ms'])} in prefill"]
    elif verdict == "decode_bound":
        reasons = [f"the server reports {fmt_ms(serving['decode_ms'])} decoding {step.output_tokens or 'its'} tokens"]
    device = step.device or (signals.get("devices") or [""])[0]
    if verdict in ("queueing", "kv_cache_pressure") and step.server:
        device = step.server  # a server's cause: the server the call names, not its GPU
    out = {"verdict": verdict, "device": device,
           "telemetry": "present" if signals["samples"] or serving else "missing",
           "evidence": reasons, "signals": signals, **slowness}
    if verdict in HARDWARE_VERDICTS:
        _attribution(ctx, step, out)
    if compute is not None or (serving.get("queue_ms") is not None and step.ttft_ms is not None):
        if serving.get("queue_ms") is not None and step.ttft_ms is not None:
            queue_wait = min(serving["queue_ms"], step.ttft_ms)
        else:
            queue_wait = step.ttft_ms - compute if verdict == "queueing" else 0.0
        out["ttft_split"] = {"ttft_ms": round(step.ttft_ms, 1), "queue_wait_ms": round(queue_wait, 1),
                             "compute_ms": round(step.ttft_ms - queue_wait, 1)}
    return out


CAUSE_WORDS = {"queueing": "queueing", "throttling": "throttling", "kv_cache_pressure": "KV cache full"}


def _attribution(ctx: TaskContext, step: StepData, out: dict) -> None:
    """Where the devices that show the cause cannot be told to be the call's, say so first in the
    evidence and make the verdict possible (`confidence` low):
    - a Service in front of N pods, the call's pod unknown: "queueing on 1 of 3 pods behind
      vllm-llama"; possible unless the call is slow on its own (the ordinary cut-off, not the one
      lowered by device evidence), since one pod in N holds the cause;
    - servers sharing a host whose GPUs nothing attributes (no pod labels, no server span naming
      `hw.id`), the cause seen on a GPU only: "2 servers share gpu-node-7; its GPU 5 throttled";
      always possible: the GPU may be the other server's;
    - a throttle judged from the SM clock's own history alone (a stock dcgm-exporter, no max clock,
      no clock-event reasons): possible unless the call is slow on its own."""
    verdict = out["verdict"]
    if verdict == "throttling":
        cause = {"throttling", "thermal_only"}
    else:
        cause = {verdict}
    excess = out["excess_ms"]
    notes: list[str] = []
    always = False
    pools, shared = _pools(ctx), getattr(ctx.related, "shared", {})
    sources = set(out["signals"].get("devices") or ())
    for named in dict.fromkeys(d for d in (step.device, step.server) if d):
        members = pools.get(named, ())
        if len(members) > 1 and named in sources:  # not when the server's own span named the pod
            showing = [m for m in members
                       if cause & set(evidence(_signals_of(ctx, step, (m, *ctx.related.get(m, ())), None), excess))]
            if showing and len(showing) < len(members):
                service = _service_name(named) or named
                notes.append(f"{CAUSE_WORDS[verdict]} on {len(showing)} of {len(members)} pods behind {service}")
        neighbours = shared.get(named, ())
        if len(neighbours) > 1 and not cause & set(evidence(_signals_of(ctx, step, (named,), None), excess)):
            labels = getattr(ctx.related, "labels", {})
            hosts = getattr(ctx.related, "hosts", {})
            gpus = [g for g in ctx.related.get(named, ()) if g not in neighbours and g in hosts
                    and cause & set(evidence(_signals_of(ctx, step, (g,), None), excess))]
            if gpus:
                which = ", ".join(labels.get(g, {}).get("gpu", g) for g in gpus)
                verb = "throttled" if verdict == "throttling" else f"showed {CAUSE_WORDS[verdict]}"
                notes.append(f"{len(neighbours)} servers share {hosts[gpus[0]]}; its GPU{'s' if len(gpus) > 1 else ''} "
                             f"{which} {verb}")
                always = True
    history_only = verdict == "throttling" and any(HISTORY_ONLY in e for e in out["evidence"]) and not any(
        e.startswith(("clock-event", "throttle flag")) or "MHz max" in e for e in out["evidence"])
    if not notes and not history_only:
        return
    stats = ctx.baseline(step)
    own = out.get("baseline") in ("none", "measured") or (stats is not None and llm_slowness(step, stats) is not None)
    out["evidence"] = [*notes, *out["evidence"]]
    if always or not own:
        out["confidence"] = "low"
        out["possible"] = "; ".join(notes) or "the SM clock fell against its own history only"
        out["possible_why"] = ("the GPU may be another server's" if always else
                               "the call is not slow enough on its own to say it was")


def _service_name(key: str) -> str:
    address = key.rpartition(":")[0] or key
    return address.split(".", 1)[0]


def _start_only(slowness: dict) -> bool:
    """Whether only the start of the call was slow: its TTFT an outlier and its time per token
    not (`slow_part` says which was the slower part; both can be outliers)."""
    if slowness.get("slow_part") != "prefill":
        return False
    tpot_z, cut = slowness.get("tpot_z"), slowness.get("z_cut")
    return tpot_z is None or cut is None or tpot_z <= cut


def _verdict_candidate(ctx: TaskContext, step: StepData) -> bool:
    """An LLM step slow at least at the corroborated cut-off (the lower one), or one whose
    server reports a material wait in its queue (`_measured_queue`). Any other step gets no
    verdict whatever its device did, so its telemetry is never read (most steps)."""
    if step.kind != "llm" or step.status != "ok":
        return False
    stats = ctx.baseline(step)
    if stats is not None and llm_slowness(step, stats, z_cut=Z_CORROBORATED) is not None:
        return True
    return _measured_queue(ctx, step, None) is not None


def _measured_queue(ctx: TaskContext, step: StepData, signals: dict | None) -> tuple[float, bool] | None:
    """A call judged by its server's own account of its wait in queue (vLLM's
    `gen_ai.latency.time_in_queue`): the wait is measured, not inferred, so the question "is
    this duration unusual for the key" (the z-test, which a wait of a fifth of a call cannot
    pass against a key whose durations spread by a seventh) is answered by the measurement.
    Returns (the wait in ms, taken as the waste; whether the call had a baseline) or None.
    - Cold start (no baseline on the call's own device: none at all, or only the model's calls
      on other hardware, another normal): the wait must be at least half the call
      (SERVING_SHARE) and at least MIN_EXCESS_MS, since nothing says what the call usually
      takes (the wait is a lower bound of what the queue cost: a crowded server's batches slow
      the call's own compute too).
    - With a baseline: the wait must be what a slowdown must be to be a finding on its own, at
      least a fifth of what the call usually takes (MIN_EXCESS_RATIO of `llm_expected_ms`) and
      at least MIN_EXCESS_MS (a server at work queues a request for tens of ms), and the
      call must have taken at least half the wait (SERVING_SHARE) longer than usual. A key
      that always waits that long (a server that is always that busy) has the wait in its
      usual time already, learned from its own runs: no finding. Unless the server's own series
      say its requests usually wait far less (`_waits_seldom`): then a key's usual time that
      holds such a wait was learned from few runs that fell in an incident (23 calls of a model
      on one server, most of them in a long queueing window of simulated seed 173205: a median
      start of 1.9 s on a server that starts them in 0.1 s), not from a habit of waiting.
    `signals` None (not read yet: `_verdict_candidate`) asks whether the call could be one."""
    serving = serving_of(ctx, step)
    queue_ms = (serving or {}).get("queue_ms")
    if queue_ms is None:
        return None
    stats = ctx.baseline(step)
    if stats is None or ctx.own_device_count(step) is not None:
        if queue_ms < max(MIN_EXCESS_MS, SERVING_SHARE * step.duration_ms):
            return None
        return float(queue_ms), False
    expected = llm_expected_ms(step, stats)
    if queue_ms < max(MIN_EXCESS_MS, MIN_EXCESS_RATIO * expected):
        return None
    if (step.duration_ms - expected < SERVING_SHARE * queue_ms
            and signals is not None and not _waits_seldom(signals, queue_ms)):
        return None
    return float(queue_ms), True


def _waits_seldom(signals: dict, queue_ms: float) -> bool:
    """The server's own series (its device normal, from every scrape of the window, not one
    key's runs) say its requests usually wait far less than `queue_ms`: their usual mean wait
    (the queue-time counters) under half of it, else (no such counters) under one request
    usually waiting."""
    waited = signals.get("queue_time_ms") or {}
    if waited.get("normal") is not None:
        return waited["normal"] < SERVING_SHARE * queue_ms
    depth = signals.get("queue_depth") or {}
    return depth.get("normal") is not None and depth["normal"] < RESOLUTION["queue_depth"]


def telemetry_devices(ctx: TaskContext) -> set[str]:
    """The devices whose samples `step_verdicts` reads for this task: a batch loads only theirs
    (reading every task's telemetry was a seventh of a worker's CPU)."""
    out: set[str] = set()
    for step in ctx.steps:
        if _verdict_candidate(ctx, step):
            out.update(served_by(ctx, step))
    return out


HARDWARE_VERDICTS = ("queueing", "throttling", "kv_cache_pressure")


def step_verdicts(ctx: TaskContext) -> dict[str, dict]:
    """step_id → verdict for every slow LLM step of the task."""
    verdicts = {}
    times: dict[str, list[float]] = {}  # per device: its samples' times, listed once per task
    for step in ctx.steps:
        if not _verdict_candidate(ctx, step):
            continue
        signals = device_signals(ctx, step, times=times)
        verdict = _judged(ctx, step, signals)
        if verdict is None or verdict["verdict"] not in HARDWARE_VERDICTS:
            measured = _measured_queue(ctx, step, signals)
            if measured is not None:
                queue_ms, warm = measured
                slowness = {"expected_ms": round(step.duration_ms - queue_ms, 1), "excess_ms": round(queue_ms, 1),
                            "ttft_z": None, "tpot_z": None, "z_cut": None, "slow_part": "queue",
                            "baseline": "measured" if warm else "none"}
                queued = verdict_for(ctx, step, slowness, signals)
                if queued["verdict"] == "queueing":
                    verdict = queued
        if verdict is not None:
            verdicts[step.step_id] = verdict
    return verdicts


def _judged(ctx: TaskContext, step: StepData, signals: dict) -> dict | None:
    """The verdict of a step slow against its baseline (None: no baseline, or not slow)."""
    stats = ctx.baseline(step)
    if stats is None:
        return None
    loose = llm_slowness(step, stats, z_cut=Z_CORROBORATED)
    corroborated = loose is not None and bool(
        set(evidence(signals, loose["excess_ms"])) & {"throttling", "queueing", "kv_cache_pressure", "thermal_only"})
    slowness = loose if corroborated else llm_slowness(step, stats)
    if slowness is None:
        return None
    verdict = verdict_for(ctx, step, slowness, signals)
    if corroborated and verdict["verdict"] not in HARDWARE_VERDICTS:
        # The device evidence did not explain it: the step must be slow on its own merits.
        slowness = llm_slowness(step, stats)
        if slowness is None:
            return None
        verdict = verdict_for(ctx, step, slowness, signals)
    return verdict


WHAT = {"queueing": "its server was saturated", "throttling": "its GPU was throttling",
        "kv_cache_pressure": "its server's KV cache was full"}


def hardware_findings(ctx: TaskContext, verdict_name: str):
    """Findings `hardware_<verdict_name>` for the task's slow LLM steps with that verdict."""
    from analysis.engine.detectors.base import Finding, baseline_confidence

    by_id = {s.step_id: s for s in ctx.steps}
    for step_id, verdict in ctx.verdicts.items():
        if verdict["verdict"] != verdict_name:
            continue
        step = by_id[step_id]
        device = verdict.get("device") or "its device"
        seen = "; ".join(verdict.get("evidence") or ()) or "no readings"
        wasted = verdict["excess_ms"]
        normal = ctx.device_normals.get(step.device) or next(
            (ctx.device_normals[d] for d in verdict.get("signals", {}).get("devices", ()) if d in ctx.device_normals), None)
        confidence, reason = baseline_confidence(normal.count if normal else 0,
                                                 what=f"telemetry readings of {device}")
        because = "possibly because" if verdict.get("confidence") == "low" else "because"
        if verdict.get("baseline") in ("none", "measured"):  # `_measured_queue`: the server's wait is the waste
            summary = (f"{step.label} took {fmt_ms(step.duration_ms)}, {fmt_ms(wasted)} of it waiting {because} "
                       f"{WHAT[verdict_name]} ({device}: {seen}).")
        else:
            summary = (f"{step.label} took {fmt_ms(step.duration_ms)} ({fmt_ms(wasted)} over the usual "
                       f"{fmt_ms(verdict['expected_ms'])}) {because} {WHAT[verdict_name]} ({device}: {seen}).")
        if verdict.get("confidence") == "low":
            confidence = "low"
            reason = f"Possible: {verdict['possible']}; {verdict['possible_why']}."
        elif verdict.get("baseline") == "none":
            confidence = "medium"
            reason = (f"No baseline of {step.key} on {device} yet: the server's own queue time is the evidence, "
                      f"and all of it is counted as waste (its usual wait is not known yet).")
        elif verdict.get("baseline") == "measured":
            reason = (f"The server measured the wait, and the call took at least half of it longer than "
                      f"{step.key} usually does. {reason}")
        yield Finding(f"hardware_{verdict_name}", (step_id,), wasted, summary, dict(verdict),
                      ((step.end_ms - wasted, step.end_ms),), confidence=confidence, confidence_reason=reason)
