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

import hashlib
import math
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


@dataclass
class SimDevice:
    name: str
    family: str
    model: HardwareModel
    phase_h: float
    base_load: float
    salt: str = ""
    windows: list[Window] = field(default_factory=list)
    # (start_ms, end_ms) of traced LLM steps served, for the telemetry.
    llm_steps: list[tuple[float, float]] = field(default_factory=list)

    def load(self, t_ms: float) -> float:
        hours = t_ms / 3_600_000.0 + self.phase_h
        diurnal = 0.5 - 0.5 * math.cos(2 * math.pi * ((hours % 24) - 4) / 24)
        wobble = 0.04 * math.sin(t_ms / 1_300_000.0 + self.phase_h * 7) + 0.03 * math.sin(t_ms / 457_000.0 + self.phase_h)
        return min(max(self.base_load + 0.22 * diurnal + wobble, 0.05), 0.9)

    def batch(self, t_ms: float) -> float:
        return 1.0 + self.load(t_ms) * 0.3 * self.model.max_batch

    def queue_mean(self, t_ms: float) -> float:
        # A continuously batching server admits new requests at once until the batch is full,
        # so a busy afternoon still has an empty queue most of the time.
        return 0.02 + 0.25 * self.load(t_ms) ** 2

    def background_queue(self, t_ms: float) -> float:
        """Requests waiting at `t_ms` from untraced traffic: a Poisson count that holds for
        QUEUE_BUCKET_MS, the same for a traced step and a telemetry reading at that moment."""
        bucket = int(t_ms // QUEUE_BUCKET_MS)
        digest = hashlib.blake2b(f"{self.salt}:{bucket}".encode(), digest_size=8).digest()
        u = int.from_bytes(digest, "big") / 2.0**64
        lam = self.queue_mean((bucket + 0.5) * QUEUE_BUCKET_MS)
        k, p = 0, math.exp(-lam)
        cdf = p
        while u > cdf and k < 50:
            k += 1
            p *= lam / k
            cdf += p
        return float(k)

    def window_at(self, t_ms: float) -> Window | None:
        starts = [w.start_ms for w in self.windows]
        i = bisect_right(starts, t_ms) - 1
        if i >= 0 and self.windows[i].start_ms <= t_ms < self.windows[i].end_ms:
            return self.windows[i]
        return None

    def overlaps(self, start_ms: float, end_ms: float, margin_ms: float) -> bool:
        return any(w.start_ms - margin_ms < end_ms and start_ms < w.end_ms + margin_ms for w in self.windows)

    def add_window(self, window: Window) -> None:
        self.windows.append(window)
        self.windows.sort(key=lambda w: w.start_ms)


def make_devices(spec: tuple[tuple[str, int], ...], rng: np.random.Generator) -> list[SimDevice]:
    devices = []
    for family, count in spec:
        model = profile_for(family)
        for i in range(1, count + 1):
            devices.append(SimDevice(
                name=f"{model.family}-{model.hardware.lower()}-{i:02d}", family=model.family, model=model,
                phase_h=float(rng.uniform(-2, 2)), base_load=float(rng.uniform(0.3, 0.45)),
                salt=f"{model.family}-{i}-{int(rng.integers(0, 2**62))}",
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
    starts = sorted(s for s, _ in device.llm_steps)
    ends = sorted(e for _, e in device.llm_steps)
    out = []
    for t in _sample_times(device, start_ms, end_ms, rng):
        in_flight = bisect_right(starts, t) - bisect_right(ends, t)
        load = min(device.load(t) + 0.02 * in_flight, 0.95)
        batch = device.batch(t) + in_flight
        window = device.window_at(t)
        queue = device.background_queue(t)
        throttled = False
        if window is not None and window.kind == "hardware_queueing":
            queue = max(window.queue_depth * (1 + rng.normal(0, 0.1)), 1.0)
            batch = device.model.max_batch * 0.9 + rng.normal(0, 1)
            load = 0.98
        elif window is not None and window.kind == "hardware_throttling":
            throttled = True
        metrics = device.model.sample_telemetry(
            rng, load=load, queue_depth=queue, batch_size=batch, throttled=throttled,
            model_params_b=model_params_b, kv_cache_hit_rate=0.35 + 0.3 * load)
        out.append((t, metrics))
    return out
