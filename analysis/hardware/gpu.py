"""GPU (NVIDIA H100 SXM class): a serving replica of 4 GPUs, tensor-parallel, FP8 weights.

Shape: good throughput, but TTFT and TPOT degrade and jitter with batch size and queue depth;
decode is HBM-bandwidth-bound (every token reads every weight once).

Figures and where they come from:
- HBM3 bandwidth 3.35 TB/s per GPU, dense FP8 tensor throughput 1,979 TFLOPS, 700 W TDP,
  80 GB HBM3: NVIDIA H100 SXM5 datasheet.
- Decode: TPOT = weight bytes / (achieved bandwidth × GPUs) + fixed overhead. Inference
  engines (vLLM, TensorRT-LLM) reach roughly half of peak HBM bandwidth on the GEMV-shaped
  decode step, so `hbm_efficiency` = 0.55; `decode_overhead_ms` = 4 covers kernel launches,
  sampling, tensor-parallel all-reduce and KV-cache reads. For Llama-3-70B in FP8 on 4 GPUs
  this gives 13.5 ms at batch 1 and ≈ 20 ms at batch 16 (≈ 50 tokens/s per stream), within
  the 15–60 ms/token the seed articles give for GPUs and the 28 ms of their tuned example.
- Batching: each extra sequence adds ~3 % to TPOT (more KV cache read per step, attention
  grows with the batch): TPOT roughly doubles between batch 1 and 32, as published vLLM
  latency-vs-concurrency curves show.
- Prefill: 2 · params · tokens FLOPs at 40 % model-FLOPs utilisation (typical for large-batch
  prefill GEMMs), plus 35 ms of tokenisation, scheduling and first-token delivery. 2,000
  prompt tokens on 70B → ≈ 125 ms at batch 1, ≈ 165 ms at batch 16: inside the seed articles'
  50–300 ms TTFT band.
- Chunked prefill shares each engine step with the running batch: +2 % TTFT per sequence.
- Queue: a request waits ≈ 60 ms per request ahead of it (one prefill slot of a typical
  prompt at moderate batch).
- Jitter grows with batch and queue (continuous-batching schedulers reorder and preempt):
  lognormal σ = 0.04 + 0.0025·batch + 0.01·queue for TPOT and 0.06 + 0.003·batch +
  0.015·queue for TTFT, each term capped (batch 32, queue 8): ≈ 0.07 / 0.10 at a typical
  batch of 12, at most ≈ 0.20 / 0.28 when saturated. (An LPU's TPOT spread is 0.015.)
- Throttling: H100 slows its clocks near 87–90 °C (nvidia-smi "slowdown temp"); a thermally
  throttled GPU loses 30–50 % of its clock, so every kernel takes ~1.7× as long.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.hardware.base import HardwareModel


@dataclass(frozen=True)
class H100Model(HardwareModel):
    family: str = "gpu"
    vendor: str = "nvidia"
    hardware: str = "H100"
    gpus: int = 4
    hbm_tb_s: float = 3.35
    hbm_efficiency: float = 0.55
    bytes_per_param: float = 1.0
    decode_overhead_ms: float = 4.0
    batch_tpot_slope: float = 0.03
    fp8_tflops: float = 1979.0
    prefill_mfu: float = 0.40
    ttft_overhead_ms: float = 35.0
    batch_ttft_slope: float = 0.02
    max_batch: int = 64
    queue_slot_ms: float = 60.0
    throttle_slowdown: float = 1.7
    idle_power_w: float = 90.0
    tdp_w: float = 700.0
    ambient_temp_c: float = 34.0
    full_load_temp_c: float = 74.0
    throttle_temp_c: float = 87.0

    def _prefill_ms(self, input_tokens: int, *, batch_size: float, model_params_b: float) -> float:
        flops = 2.0 * model_params_b * 1e9 * input_tokens
        compute_ms = flops / (self.gpus * self.fp8_tflops * 1e12 * self.prefill_mfu) * 1000.0
        return (self.ttft_overhead_ms + compute_ms) * (1 + self.batch_ttft_slope * (batch_size - 1))

    def _decode_ms(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        weight_bytes = model_params_b * 1e9 * self.bytes_per_param
        bandwidth = self.gpus * self.hbm_tb_s * 1e12 * self.hbm_efficiency
        base = weight_bytes / bandwidth * 1000.0 + self.decode_overhead_ms
        return base * (1 + self.batch_tpot_slope * (batch_size - 1))

    def _ttft_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.06 + 0.003 * min(batch_size, 32) + 0.015 * min(queue_depth, 8)

    def _tpot_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.04 + 0.0025 * min(batch_size, 32) + 0.01 * min(queue_depth, 8)

    def _mem_bw_util(self, util: float, model_params_b: float) -> float:
        return 0.15 + 0.75 * util  # decode streams the weights from HBM: bandwidth tracks load
