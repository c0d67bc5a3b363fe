"""Simulated devices: their background load over the day, fault windows (queue spikes and
thermal throttling) and the telemetry they report.

The traced tasks are a small sample of what a real device serves, so each device also
carries *background* load from untraced traffic: a diurnal curve (quiet at 04:00, busy at
16:00 UTC, shifted per device) plus slow wobble. Background sets the batch size and the
normal queue depth the traced LLM steps see (a Poisson count with mean ≤ 0.2 that holds for
10 s: usually 0, now and then 1–2), and the telemetry reports the same values together with
the traced steps in flight.

Fault windows are the only place where the queue explodes or a device throttles: outside
them a device is never throttled and its queue stays small, so ground truth stays true.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from analysis.hardware import HardwareModel, profile_for

IDLE_SAMPLE_S = 60.0  # cadence when no traced step is near: exporters back off when idle
ACTIVE_SAMPLE_S = (5.0, 10.0)  # cadence around traced steps and fault windows
ACTIVE_MARGIN_S = 30.0


@dataclass(frozen=True)
class Window:
    device: str
    kind: str  # "hardware_queueing" | "hardware_throttling"
    start_ms: float
    end_ms: float
    queue_depth: float = 0.0


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


def device_samples(device: SimDevice, *, start_ms: float, end_ms: float, rng: np.random.Generator,
                   model_params_b: float = 70) -> list[tuple[float, dict[str, float]]]:
    """(time, metrics) readings of one device, consistent with the traced LLM steps it served
    and its fault windows."""
    times = np.array(_sample_times(device, start_ms, end_ms, rng))
    if not len(times):
        return []
    starts = np.sort([s for s, _ in device.llm_steps])
    ends = np.sort([e for _, e in device.llm_steps])
    in_flight = np.searchsorted(starts, times, side="right") - np.searchsorted(ends, times, side="right")
    background = device.load(times)
    load = np.minimum(background + 0.02 * in_flight, 0.95)
    batch = 1.0 + background * 0.3 * device.model.max_batch + in_flight
    queue = device.background_queues(times)
    throttled = np.zeros(len(times), dtype=bool)
    for window in device.windows:
        inside = (times >= window.start_ms) & (times < window.end_ms)
        n = int(inside.sum())
        if window.kind == "hardware_queueing":
            queue[inside] = np.maximum(window.queue_depth * (1 + rng.normal(0, 0.1, n)), 1.0)
            batch[inside] = device.model.max_batch * 0.9 + rng.normal(0, 1, n)
            load[inside] = 0.98
        else:
            throttled[inside] = True
    metrics = device.model.sample_telemetry_many(
        rng, load=load, queue_depth=queue, batch_size=batch, throttled=throttled,
        model_params_b=model_params_b, kv_cache_hit_rate=0.35 + 0.3 * load)
    return list(zip(times.tolist(), metrics, strict=True))
