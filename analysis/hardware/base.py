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
        util = _clip(load + rng.normal(0, 0.02), 0.0, 1.0)
        if queue_depth >= max(4.0, self.max_batch * 0.25):
            util = max(util, 0.96 + rng.uniform(0, 0.04))  # a queue builds only when saturated
        tpot = self.tpot_ms(batch_size=batch_size, queue_depth=queue_depth,
                            model_params_b=model_params_b, throttled=throttled)
        # Every sequence in the batch gets one token per TPOT.
        tokens_per_s = max(batch_size * 1000.0 / tpot * (1 + rng.normal(0, 0.03)), 0.0)
        power = self.idle_power_w + (self.tdp_w - self.idle_power_w) * util ** 0.8
        temp = self.ambient_temp_c + (self.full_load_temp_c - self.ambient_temp_c) * util
        if throttled:
            power = min(power, self.tdp_w * 0.75)
            temp = self.throttle_temp_c + rng.uniform(0.0, 4.0)
        return {
            "utilization": round(util, 4),
            "queue_depth": float(round(max(queue_depth, 0.0))),
            "batch_size": float(round(max(batch_size, 0.0))),
            "power_w": round(power * (1 + rng.normal(0, 0.02)), 1),
            "temperature_c": round(temp + rng.normal(0, 0.6), 1),
            "mem_bw_util": round(_clip(self._mem_bw_util(util, model_params_b)
                                       + rng.normal(0, 0.015), 0.0, 1.0), 4),
            "kv_cache_hit_rate": round(_clip(kv_cache_hit_rate + rng.normal(0, 0.03), 0.0, 1.0), 4),
            "tokens_per_s": round(tokens_per_s, 1),
            "throttled": 1.0 if throttled else 0.0,
        }

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


def _clip(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)
