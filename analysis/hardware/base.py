"""The interface every device family implements, and what the families share.

A `HardwareModel` answers two kinds of question:

- *expected* latencies (`ttft_ms`, `tpot_ms`, `step_ms`): deterministic, no randomness. The
  what-if projection replays a task's critical path with these.
- *sampled* latencies and telemetry (`sample_ttft_ms`, `sample_tpot_ms`, `sample_telemetry`):
  what one request or one telemetry reading looks like, drawn from a
  `numpy.random.Generator`. The simulator uses these.

Sampled latencies are lognormal around the expected value with a family-specific spread
(`_ttft_sigma`, `_tpot_sigma`); the lognormal's median is set to `expected · exp(−σ²/2)` so
that its *mean* is the expected value and the two views agree on average.

Every family takes the same keyword arguments, so a caller never needs to know which family
it holds: `queue_depth` (requests waiting ahead of this one), `batch_size` (sequences decoded
together), `model_params_b` (billions of parameters of the served model) and `throttled`
(thermal/power throttling in force). A family ignores what does not affect it (a Groq LPU's
latency does not depend on batch size) — that is the point of having shapes that differ.

All figures are dataclass fields, so a profile is reconfigured with `dataclasses.replace`.
Power is reported per accelerator card/chip (so H100, Corsair and LPU readings compare on one
axis); temperature is the hottest sensor of the device, as exporters usually report it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HardwareModel:
    family: str = ""
    vendor: str = ""
    hardware: str = ""
    # Continuous batching admits at most this many sequences; the simulator keeps normal load
    # well below it.
    max_batch: int = 64
    # Queue wait: each request ahead of this one delays its first token by about this long
    # for a 70B model (a prefill slot; see each family for the figure), less for smaller ones.
    queue_slot_ms: float = 50.0
    # Throttling: clocks drop, every token and every prefill takes this factor longer.
    throttle_slowdown: float = 1.8
    # Telemetry figures (per card/chip).
    idle_power_w: float = 100.0
    tdp_w: float = 700.0
    ambient_temp_c: float = 32.0
    full_load_temp_c: float = 70.0
    throttle_temp_c: float = 88.0

    # --- expected values ------------------------------------------------------------------

    def ttft_ms(self, input_tokens: int, *, queue_depth: float = 0, batch_size: float = 1,
                model_params_b: float = 70, throttled: bool = False) -> float:
        """Expected time to first token: queue wait + prefill of `input_tokens`."""
        compute = self._prefill_ms(max(int(input_tokens), 0), batch_size=max(batch_size, 1),
                                   model_params_b=model_params_b)
        if throttled:
            compute *= self.throttle_slowdown
        return compute + self._queue_wait_ms(max(queue_depth, 0.0), model_params_b=model_params_b)

    def tpot_ms(self, *, batch_size: float = 1, queue_depth: float = 0, model_params_b: float = 70,
                throttled: bool = False) -> float:
        """Expected time per output token (decode), at this batch size."""
        value = self._decode_ms(batch_size=max(batch_size, 1), queue_depth=max(queue_depth, 0.0),
                                model_params_b=model_params_b)
        return value * self.throttle_slowdown if throttled else value

    def step_ms(self, input_tokens: int, output_tokens: int, **kwargs) -> float:
        """Expected duration of one LLM call: TTFT + TPOT × output tokens."""
        return (self.ttft_ms(input_tokens, **kwargs)
                + self.tpot_ms(**kwargs) * max(int(output_tokens), 0))

    # --- sampled values -------------------------------------------------------------------

    def sample_ttft_ms(self, rng: np.random.Generator, input_tokens: int, *, queue_depth: float = 0,
                       batch_size: float = 1, model_params_b: float = 70,
                       throttled: bool = False) -> float:
        expected = self.ttft_ms(input_tokens, queue_depth=queue_depth, batch_size=batch_size,
                                model_params_b=model_params_b, throttled=throttled)
        sigma = self._ttft_sigma(batch_size=max(batch_size, 1), queue_depth=max(queue_depth, 0.0),
                                 model_params_b=model_params_b)
        return _lognormal_mean(rng, expected, sigma)

    def sample_tpot_ms(self, rng: np.random.Generator, *, batch_size: float = 1,
                       queue_depth: float = 0, model_params_b: float = 70,
                       throttled: bool = False) -> float:
        expected = self.tpot_ms(batch_size=batch_size, queue_depth=queue_depth,
                                model_params_b=model_params_b, throttled=throttled)
        sigma = self._tpot_sigma(batch_size=max(batch_size, 1), queue_depth=max(queue_depth, 0.0),
                                 model_params_b=model_params_b)
        return _lognormal_mean(rng, expected, sigma)

    def sample_telemetry(self, rng: np.random.Generator, *, load: float, queue_depth: float,
                         batch_size: float, throttled: bool = False, model_params_b: float = 70,
                         kv_cache_hit_rate: float = 0.5) -> dict[str, float]:
        """One resource sample of a device under this load (0–1 share of its capacity in use),
        queue and batch. Throttling shows as temperature at the throttle point, `throttled`=1,
        power held down and fewer tokens per second for the same batch."""
        return self.sample_telemetry_many(
            rng, load=[load], queue_depth=[queue_depth], batch_size=[batch_size], throttled=[throttled],
            model_params_b=model_params_b, kv_cache_hit_rate=[kv_cache_hit_rate])[0]

    def sample_telemetry_many(self, rng: np.random.Generator, *, load, queue_depth, batch_size,
                              throttled, model_params_b: float = 70,
                              kv_cache_hit_rate=0.5) -> list[dict[str, float]]:
        """`sample_telemetry` for many readings at once (array-likes of equal length)."""
        load = np.asarray(load, dtype=float)
        n = load.size
        queue = np.broadcast_to(np.asarray(queue_depth, dtype=float), n).clip(min=0.0)
        batch = np.broadcast_to(np.asarray(batch_size, dtype=float), n).clip(min=0.0)
        hot = np.broadcast_to(np.asarray(throttled, dtype=bool), n)
        kv = np.broadcast_to(np.asarray(kv_cache_hit_rate, dtype=float), n)
        util = np.clip(load + rng.normal(0, 0.02, n), 0.0, 1.0)
        saturated = queue >= max(4.0, self.max_batch * 0.25)  # a queue builds only when saturated
        util = np.where(saturated, np.maximum(util, 0.96 + rng.uniform(0, 0.04, n)), util)
        tpot = self._decode_ms(batch_size=np.maximum(batch, 1.0), queue_depth=queue,
                               model_params_b=model_params_b) * np.where(hot, self.throttle_slowdown, 1.0)
        # Every sequence in the batch gets one token per TPOT.
        tokens_per_s = np.maximum(batch * 1000.0 / tpot * (1 + rng.normal(0, 0.03, n)), 0.0)
        power = self.idle_power_w + (self.tdp_w - self.idle_power_w) * util ** 0.8
        power = np.where(hot, np.minimum(power, self.tdp_w * 0.75), power) * (1 + rng.normal(0, 0.02, n))
        temp = self.ambient_temp_c + (self.full_load_temp_c - self.ambient_temp_c) * util
        temp = np.where(hot, self.throttle_temp_c + rng.uniform(0.0, 4.0, n), temp) + rng.normal(0, 0.6, n)
        mem = np.clip(self._mem_bw_util(util, model_params_b) + rng.normal(0, 0.015, n), 0.0, 1.0)
        kv = np.clip(kv + rng.normal(0, 0.03, n), 0.0, 1.0)
        columns = {
            "utilization": util.round(4), "queue_depth": queue.round(), "batch_size": batch.round(),
            "power_w": power.round(1), "temperature_c": temp.round(1), "mem_bw_util": mem.round(4),
            "kv_cache_hit_rate": kv.round(4), "tokens_per_s": tokens_per_s.round(1),
            "throttled": hot.astype(float),
        }
        names = list(columns)
        return [dict(zip(names, row, strict=True)) for row in zip(*(columns[k].tolist() for k in names), strict=True)]

    # --- what a family defines ------------------------------------------------------------

    def _prefill_ms(self, input_tokens: int, *, batch_size: float, model_params_b: float) -> float:
        raise NotImplementedError

    def _decode_ms(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        raise NotImplementedError

    def _queue_wait_ms(self, queue_depth: float, *, model_params_b: float) -> float:
        # Each request ahead holds the device for about its prefill, which grows with the
        # model: `queue_slot_ms` is the figure for a 70B model, a fixed 30 % of it is scheduling.
        return queue_depth * self.queue_slot_ms * (0.3 + 0.7 * model_params_b / 70.0)

    def _ttft_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.08

    def _tpot_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.05

    def _mem_bw_util(self, util: float, model_params_b: float) -> float:
        return 0.1 + 0.6 * util


def _lognormal_mean(rng: np.random.Generator, mean: float, sigma: float) -> float:
    if mean <= 0:
        return 0.0
    return float(mean * math.exp(sigma * rng.standard_normal() - sigma * sigma / 2))
