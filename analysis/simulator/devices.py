"""Simulated devices: their background load over the day, fault windows (queue spikes, GPU
throttling, KV-cache exhaustion) and the telemetry they report, in the shapes real exporters
send (docs/simulator.md, "What the simulator sends").

Every simulated device is a host running one inference server that exports vLLM's Prometheus
series (`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`,
`vllm:num_preemptions_total`) as `<host>:8000`, and its accelerators: a GPU host's GPUs report
through dcgm-exporter (DCGM_FI_* names, labels gpu, UUID, modelName, Hostname); d-Matrix Corsair
cards and Groq LPUs have no public exporter, so the simulator makes them report the
OpenTelemetry hardware conventions (`hw.power`, `hw.temperature`, with `hw.id`, `hw.vendor`,
`hw.model`), documented as simulated. The readings go out as OTLP metrics (`otlp_metrics`),
the shape the Collector's Prometheus receiver forwards to /v1/metrics.

The traced tasks are a small sample of what a real device serves, so each device also
carries *background* load from untraced traffic: a diurnal curve (quiet at 04:00, busy at
16:00 UTC, shifted per device) plus slow wobble. Background sets the batch size and the
normal queue depth the traced LLM steps see (a Poisson count with mean ≤ 0.2 that holds for
10 s: usually 0, now and then 1–2), and the telemetry reports the same values together with
the traced steps in flight.

Fault windows are the only place where the queue explodes, a device throttles or the KV cache
fills and preempts: outside them no clock-event slowdown bit is set, the queue stays small and
no request is preempted, so ground truth stays true.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from analysis.hardware import HardwareModel, profile_for

IDLE_SAMPLE_S = 60.0  # cadence when no traced step is near: exporters back off when idle
ACTIVE_SAMPLE_S = (5.0, 10.0)  # cadence around traced steps and fault windows
ACTIVE_MARGIN_S = 30.0
SERVER_PORT = 8000
# GPUs a simulated GPU host reports (a 70B model served tensor-parallel on 4 H100s).
GPUS_PER_HOST = 4
MAX_SM_CLOCK_MHZ = 1980.0  # H100 SXM
FB_TOTAL_MIB = 81_559.0
# Clock-event reasons (DCGM_CLOCKS_EVENT_REASON_*): what a throttling incident reports.
GPU_IDLE, SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x1, 0x4, 0x8, 0x20, 0x40, 0x80
THROTTLE_REASONS = (HW_POWER_BRAKE, SW_THERMAL, SW_THERMAL | HW_THERMAL, HW_SLOWDOWN | HW_POWER_BRAKE)
THERMAL = SW_THERMAL | HW_THERMAL
# KV-cache incident: the cache this full, and preemptions per reading while it lasts.
KV_FULL = (0.95, 0.995)
KV_PREEMPTIONS_PER_S = 0.2


@dataclass(frozen=True)
class Window:
    device: str
    kind: str  # "hardware_queueing" | "hardware_throttling" | "hardware_kv_cache_pressure"
    start_ms: float
    end_ms: float
    queue_depth: float = 0.0
    # Throttling: the GPU that slows (its tensor-parallel peers wait for it), the DCGM
    # clock-event reasons it reports and the share of its max SM clock it holds.
    gpu: int = 0
    reasons: int = 0
    clock_share: float = 1.0


QUEUE_BUCKET_MS = 10_000.0  # the background queue holds its value this long
QUEUE_CHUNK = 1024  # buckets drawn at once


@dataclass
class SimDevice:
    name: str
    family: str
    model: HardwareModel
    phase_h: float
    base_load: float
    seed: int = 0
    windows: list[Window] = field(default_factory=list)
    # (start_ms, end_ms) of traced LLM steps served, for the telemetry.
    llm_steps: list[tuple[float, float]] = field(default_factory=list)
    _window_starts: list[float] = field(default_factory=list, repr=False)
    _queues: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def host(self) -> str:
        return self.name

    @property
    def server(self) -> str:
        """The inference server's key, as a client names it (`server.address:server.port`) and
        as its Prometheus series are keyed (`instance`)."""
        return f"{self.name}:{SERVER_PORT}"

    @property
    def accelerators(self) -> int:
        return GPUS_PER_HOST if self.family == "gpu" else 1

    def uuid(self, index: int) -> str:
        digest = hashlib.blake2b(f"{self.seed}:{index}".encode(), digest_size=16).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def card_id(self, index: int) -> str:
        return f"{self.name}-{self.model.vendor}{index}"

    def load(self, t_ms):
        """Background load (0.05–0.9) at a time or an array of times."""
        hours = np.asarray(t_ms, dtype=float) / 3_600_000.0 + self.phase_h
        diurnal = 0.5 - 0.5 * np.cos(2 * np.pi * ((hours % 24) - 4) / 24)
        t = hours * 3_600_000.0
        wobble = 0.04 * np.sin(t / 1_300_000.0 + self.phase_h * 7) + 0.03 * np.sin(t / 457_000.0 + self.phase_h)
        value = np.clip(self.base_load + 0.22 * diurnal + wobble, 0.05, 0.9)
        return float(value) if value.ndim == 0 else value

    def batch(self, t_ms):
        return 1.0 + self.load(t_ms) * 0.3 * self.model.max_batch

    def queue_mean(self, t_ms):
        # A continuously batching server admits new requests at once until the batch is full,
        # so a busy afternoon still has an empty queue most of the time.
        return 0.02 + 0.25 * self.load(t_ms) ** 2

    def background_queue(self, t_ms: float) -> float:
        """Requests waiting at `t_ms` from untraced traffic: a Poisson count that holds for
        QUEUE_BUCKET_MS, the same for a traced step and a telemetry reading at that moment."""
        bucket = int(t_ms // QUEUE_BUCKET_MS)
        return float(self._queue_chunk(bucket // QUEUE_CHUNK)[bucket % QUEUE_CHUNK])

    def background_queues(self, t_ms: np.ndarray) -> np.ndarray:
        buckets = (np.asarray(t_ms, dtype=float) // QUEUE_BUCKET_MS).astype(np.int64)
        out = np.empty(len(buckets))
        for chunk in np.unique(buckets // QUEUE_CHUNK):
            mask = buckets // QUEUE_CHUNK == chunk
            out[mask] = self._queue_chunk(int(chunk))[buckets[mask] % QUEUE_CHUNK]
        return out

    def _queue_chunk(self, chunk: int) -> np.ndarray:
        cached = self._queues.get(chunk)
        if cached is None:
            mids = (np.arange(QUEUE_CHUNK) + chunk * QUEUE_CHUNK + 0.5) * QUEUE_BUCKET_MS
            lam = self.queue_mean(mids)
            u = np.random.default_rng([self.seed, chunk]).random(QUEUE_CHUNK)
            cached = np.zeros(QUEUE_CHUNK)  # inverse Poisson CDF, per bucket
            p = np.exp(-lam)
            cdf = p.copy()
            for k in range(1, 30):
                more = u > cdf
                if not more.any():
                    break
                cached += more
                p = p * lam / k
                cdf = cdf + p
            self._queues[chunk] = cached
        return cached

    def window_at(self, t_ms: float) -> Window | None:
        i = bisect_right(self._window_starts, t_ms) - 1
        if i >= 0 and self.windows[i].start_ms <= t_ms < self.windows[i].end_ms:
            return self.windows[i]
        return None

    def overlaps(self, start_ms: float, end_ms: float, margin_ms: float) -> bool:
        return any(w.start_ms - margin_ms < end_ms and start_ms < w.end_ms + margin_ms for w in self.windows)

    def add_window(self, window: Window) -> None:
        self.windows.append(window)
        self.windows.sort(key=lambda w: w.start_ms)
        self._window_starts = [w.start_ms for w in self.windows]


def make_devices(spec: tuple[tuple[str, int], ...], rng: np.random.Generator) -> list[SimDevice]:
    devices = []
    for family, count in spec:
        model = profile_for(family)
        for i in range(1, count + 1):
            devices.append(SimDevice(
                name=f"{model.family}-{model.hardware.lower()}-{i:02d}", family=model.family, model=model,
                phase_h=float(rng.uniform(-2, 2)), base_load=float(rng.uniform(0.3, 0.45)),
                seed=int(rng.integers(0, 2**62)),
            ))
    return devices


def _sample_times(device: SimDevice, start_ms: float, end_ms: float, rng: np.random.Generator) -> list[float]:
    """Dense around traced steps and fault windows, sparse elsewhere."""
    margin = ACTIVE_MARGIN_S * 1000
    spans = sorted([(s - margin, e + margin) for s, e in device.llm_steps]
                   + [(w.start_ms - 2 * margin, w.end_ms + 2 * margin) for w in device.windows])
    active: list[list[float]] = []
    for s, e in spans:
        if active and s <= active[-1][1]:
            active[-1][1] = max(active[-1][1], e)
        else:
            active.append([s, e])
    times = []
    t = start_ms + float(rng.uniform(0, IDLE_SAMPLE_S * 1000))
    i = 0
    while t < end_ms:
        while i < len(active) and active[i][1] < t:
            i += 1
        if i < len(active) and active[i][0] <= t:
            times.append(t)
            t += float(rng.uniform(*ACTIVE_SAMPLE_S)) * 1000
        else:
            times.append(t)
            nxt = t + IDLE_SAMPLE_S * 1000
            if i < len(active) and active[i][0] < nxt:
                nxt = max(active[i][0], t + ACTIVE_SAMPLE_S[0] * 1000)
            t = nxt
    return times


def device_readings(device: SimDevice, *, start_ms: float, end_ms: float, rng: np.random.Generator,
                    model_params_b: float = 70) -> dict:
    """The server's and the accelerators' readings over the period, consistent with the traced
    LLM steps the device served and its fault windows: {"times", "server": {field: array},
    "accelerators": [{field: array}, ...]}."""
    times = np.array(_sample_times(device, start_ms, end_ms, rng))
    n = len(times)
    if not n:
        return {"times": times, "server": {}, "accelerators": []}
    starts = np.sort([s for s, _ in device.llm_steps])
    ends = np.sort([e for _, e in device.llm_steps])
    in_flight = np.searchsorted(starts, times, side="right") - np.searchsorted(ends, times, side="right")
    background = device.load(times)
    load = np.minimum(background + 0.02 * in_flight, 0.95)
    batch = 1.0 + background * 0.3 * device.model.max_batch + in_flight
    queue = device.background_queues(times)
    kv = np.clip(0.12 + 0.55 * load + rng.normal(0, 0.03, n), 0.01, 0.85)
    preempted = np.zeros(n)
    slowed = [np.zeros(n, dtype=bool) for _ in range(device.accelerators)]
    reasons = [np.zeros(n, dtype=np.int64) for _ in range(device.accelerators)]
    share = [np.ones(n) for _ in range(device.accelerators)]
    for window in device.windows:
        inside = (times >= window.start_ms) & (times < window.end_ms)
        k = int(inside.sum())
        if window.kind == "hardware_queueing":
            queue[inside] = np.maximum(window.queue_depth * (1 + rng.normal(0, 0.1, k)), 1.0)
            batch[inside] = device.model.max_batch * 0.9 + rng.normal(0, 1, k)
            load[inside] = 0.98
            kv[inside] = np.clip(0.8 + rng.normal(0, 0.03, k), 0.0, 0.9)
        elif window.kind == "hardware_kv_cache_pressure":
            kv[inside] = rng.uniform(*KV_FULL, k)
            gaps = np.diff(times, prepend=times[0] - ACTIVE_SAMPLE_S[0] * 1000) / 1000.0
            preempted[inside] = rng.poisson(np.maximum(gaps[inside], 1.0) * KV_PREEMPTIONS_PER_S) + 1
        else:
            g = window.gpu % device.accelerators
            slowed[g] |= inside
            reasons[g][inside] = window.reasons
            share[g][inside] = window.clock_share * (1 + rng.normal(0, 0.02, k))
    server = {"waiting": queue.round(), "running": np.maximum(batch, 0.0).round(),
              "kv": kv.round(4), "preemptions": np.cumsum(preempted)}
    accelerators = []
    for g in range(device.accelerators):
        # Power brake is an external signal: the clock drops, the chip does not heat up.
        thermal = slowed[g] & ((reasons[g] & THERMAL) != 0) if device.family == "gpu" else slowed[g]
        columns = device.model.sample_telemetry_many(
            rng, load=load, queue_depth=queue, batch_size=batch, throttled=thermal,
            model_params_b=model_params_b)
        out = {f: np.array([c[f] for c in columns]) for f in ("utilization", "power_w", "temperature_c", "mem_bw_util")}
        braked = slowed[g] & ~thermal
        out["power_w"] = np.where(braked, np.minimum(out["power_w"], device.model.tdp_w * 0.5), out["power_w"])
        if device.family == "gpu":
            util = out["utilization"]
            idle = util < 0.1
            capped = (util > 0.85) & (rng.random(n) < 0.3)  # holding its power limit at full load
            clock = np.clip(0.985 - 0.04 * util + rng.normal(0, 0.008, n), 0.9, 1.0)
            clock = np.where(capped, clock * 0.95, clock)
            clock = np.where(idle, 0.35, clock)
            clock = np.where(slowed[g], share[g], clock)
            bits = np.where(idle, GPU_IDLE, 0) | np.where(capped, SW_POWER_CAP, 0) | reasons[g]
            out["sm_clock"] = (clock * MAX_SM_CLOCK_MHZ).round()
            out["reasons"] = bits
            out["fb_used"] = (FB_TOTAL_MIB * 0.9 + rng.normal(0, 40, n)).round()
        accelerators.append(out)
    return {"times": times, "server": server, "accelerators": accelerators}


def _attrs(values: dict) -> list[dict]:
    out = []
    for key, value in values.items():
        if isinstance(value, int):
            out.append({"key": key, "value": {"intValue": str(value)}})
        else:
            out.append({"key": key, "value": {"stringValue": str(value)}})
    return out


def _gauge(name: str, times_ns: list[int], values, labels: dict, unit: str = "") -> dict:
    attrs = _attrs(labels)  # one list shared by the points: they carry the same labels
    points = [{"timeUnixNano": t, "asDouble": v, "attributes": attrs}
              for t, v in zip(times_ns, np.asarray(values, dtype=float).tolist(), strict=True)]
    return {"name": name, "unit": unit, "gauge": {"dataPoints": points}}


def _counter(name: str, start_ns: int, times_ns: list[int], values, labels: dict) -> dict:
    attrs = _attrs(labels)
    points = [{"startTimeUnixNano": start_ns, "timeUnixNano": t, "asDouble": v, "attributes": attrs}
              for t, v in zip(times_ns, np.asarray(values, dtype=float).tolist(), strict=True)]
    return {"name": name, "sum": {"dataPoints": points, "aggregationTemporality": 2, "isMonotonic": True}}


def _resource(attributes: dict, metrics: list[dict]) -> dict:
    return {"resource": {"attributes": _attrs(attributes)},
            "scopeMetrics": [{"scope": {"name": "otelcol/prometheusreceiver"}, "metrics": metrics}]}


VENDOR_NAMES = {"nvidia": "NVIDIA", "dmatrix": "d-Matrix", "groq": "Groq"}
HARDWARE_NAMES = {"H100": "NVIDIA H100 80GB HBM3"}


def otlp_metrics(device: SimDevice, readings: dict, *, served_model: str, chunk: int = 400) -> list[dict]:
    """The readings as ExportMetricsServiceRequest bodies (OTLP JSON) of about `chunk` reading
    times each, as a Collector scraping the server's and the exporters' /metrics forwards them."""
    times = readings["times"]
    if not len(times):
        return []
    start_ns = int(round(float(times[0]) * 1000)) * 1000 - 60_000_000_000
    bodies = []
    for lo in range(0, len(times), chunk):
        sl = slice(lo, lo + chunk)
        ts = [int(round(t * 1000)) * 1000 for t in times[sl].tolist()]
        server = {k: v[sl] for k, v in readings["server"].items()}
        labels = {"model_name": served_model, "engine": "0"}
        resources = [_resource(
            {"service.name": "vllm", "service.instance.id": device.server},
            [_gauge("vllm:num_requests_waiting", ts, server["waiting"], labels),
             _gauge("vllm:num_requests_running", ts, server["running"], labels),
             _gauge("vllm:kv_cache_usage_perc", ts, server["kv"], labels),
             _counter("vllm:num_preemptions_total", start_ns, ts, server["preemptions"], labels)])]
        if device.family == "gpu":
            metrics = []
            for g, acc in enumerate(readings["accelerators"]):
                acc = {k: v[sl] for k, v in acc.items()}
                labels = {"gpu": str(g), "UUID": device.uuid(g), "device": f"nvidia{g}",
                          "modelName": HARDWARE_NAMES.get(device.model.hardware, device.model.hardware),
                          "Hostname": device.host}
                metrics += [
                    _gauge("DCGM_FI_DEV_GPU_UTIL", ts, (acc["utilization"] * 100).round(), labels),
                    _gauge("DCGM_FI_DEV_MEM_COPY_UTIL", ts, (acc["mem_bw_util"] * 100).round(), labels),
                    _gauge("DCGM_FI_DEV_SM_CLOCK", ts, acc["sm_clock"], labels),
                    _gauge("DCGM_FI_DEV_MAX_SM_CLOCK", ts, np.full(len(ts), MAX_SM_CLOCK_MHZ), labels),
                    _gauge("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", ts, acc["reasons"], labels),
                    _gauge("DCGM_FI_DEV_POWER_USAGE", ts, acc["power_w"], labels),
                    _gauge("DCGM_FI_DEV_POWER_MGMT_LIMIT", ts, np.full(len(ts), device.model.tdp_w), labels),
                    _gauge("DCGM_FI_DEV_GPU_TEMP", ts, acc["temperature_c"].round(), labels),
                    _gauge("DCGM_FI_DEV_FB_USED", ts, acc["fb_used"], labels),
                ]
            resources.append(_resource({"service.name": "dcgm-exporter",
                                        "service.instance.id": f"{device.host}:9400"}, metrics))
        else:
            metrics = []
            for g, acc in enumerate(readings["accelerators"]):
                acc = {k: v[sl] for k, v in acc.items()}
                labels = {"hw.id": device.card_id(g), "hw.type": "accelerator"}
                metrics += [_gauge("hw.power", ts, acc["power_w"], labels, "W"),
                            _gauge("hw.temperature", ts, acc["temperature_c"], labels, "Cel")]
            resources.append(_resource(
                {"service.name": f"{device.model.vendor}-exporter (simulated)", "host.name": device.host,
                 "hw.vendor": VENDOR_NAMES.get(device.model.vendor, device.model.vendor),
                 "hw.model": device.model.hardware}, metrics))
        bodies.append({"resourceMetrics": resources})
    return bodies


def otlp_point_count(body: dict) -> int:
    return sum(len(m[kind]["dataPoints"]) for r in body.get("resourceMetrics", ())
               for s in r["scopeMetrics"] for m in s["metrics"] for kind in ("gauge", "sum") if kind in m)
