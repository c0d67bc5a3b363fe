"""Groq LPU: a deterministic, compiler-scheduled pipeline over hundreds of chips, weights in
on-chip SRAM, no external DRAM.

The device is one LPU deployment sized for the model (576 chips, the figure Groq gave for
Llama-2-70B). Shape: very low, near-constant TPOT whatever the load (the schedule is fixed at
compile time; requests flow through pipeline stages instead of being batched), and TTFT that
rises linearly with the number of requests queued ahead, not with batching jitter.

Figures and where they come from:
- Per chip: 230 MB SRAM, 80 TB/s on-die bandwidth, 750 TOPS INT8 / 188 TFLOPS FP16, ~215 W:
  GroqChip product brief; 576 chips for Llama-2-70B: Groq, 2023/2024.
- Measured output speed ~300 tokens/s for Llama-2-70B and ~750 tokens/s for Llama-2-7B
  (LLMPerf leaderboard and ArtificialAnalysis, early 2024): TPOT is calibrated as a line
  through (7B, 1.33 ms) and (70B, 3.33 ms). Larger models span more chips, i.e. more
  pipeline hops: hence linear in parameters, and no capacity cliff (a deployment is sized to
  fit its model).
- TPOT spread σ = 1.5 %: only host-side streaming varies; the chip schedule does not.
- Prefill: 2 · params · tokens FLOPs at 5 % of the deployment's FP16 peak (≈ 19k prompt
  tokens/s on 70B: the pipeline is laid out for token-by-token decode, a long prompt flows
  through it in chunks), plus 80 ms of API, tokenisation and network (public TTFT
  measurements of Groq's API sit at 0.1–0.3 s for short prompts): 2,000 tokens on 70B →
  ≈ 130 ms, 20,000 → ≈ 600 ms. Batch size does not enter either formula.
- Queue: 40 ms per request ahead; TTFT spread σ = 5 % and does not grow with the queue
  (waiting is deterministic, only its length varies).
- Throttling: the pipeline is clocked as one; a throttled deployment slows uniformly, ×1.5.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.hardware.base import HardwareModel


@dataclass(frozen=True)
class LpuModel(HardwareModel):
    family: str = "groq"
    vendor: str = "groq"
    hardware: str = "LPU"
    chips: int = 576
    tpot_fixed_ms: float = 1.11
    tpot_ms_per_b_param: float = 0.0317
    fp16_tflops_per_chip: float = 188.0
    prefill_efficiency: float = 0.05
    ttft_overhead_ms: float = 80.0
    max_batch: int = 16
    queue_slot_ms: float = 40.0
    throttle_slowdown: float = 1.5
    idle_power_w: float = 60.0
    tdp_w: float = 215.0
    ambient_temp_c: float = 30.0
    full_load_temp_c: float = 62.0
    throttle_temp_c: float = 85.0

    def _prefill_ms(self, input_tokens: int, *, batch_size: float, model_params_b: float) -> float:
        flops = 2.0 * model_params_b * 1e9 * input_tokens
        peak = self.chips * self.fp16_tflops_per_chip * 1e12 * self.prefill_efficiency
        return self.ttft_overhead_ms + flops / peak * 1000.0

    def _decode_ms(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return self.tpot_fixed_ms + self.tpot_ms_per_b_param * model_params_b

    def _ttft_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.05

    def _tpot_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.015

    def _mem_bw_util(self, util: float, model_params_b: float) -> float:
        return 0.2 + 0.7 * util  # on-chip SRAM streams at the pipeline's pace
