"""d-Matrix Corsair: digital in-memory compute in SRAM, LPDDR5X behind it, chiplets.

The device is one rack-scale Corsair pool (64 cards = 128 chips), the unit d-Matrix quotes
70B-class figures for. Shape: low TPOT with low variance while the model's weights fit in
the pooled SRAM ("performance memory"); past that, the spilled weights stream from LPDDR5X
("capacity memory") every token, and decode slows and jitters in proportion to the spill.

Figures and where they come from (vendor claims, SC24 launch and Hot Chips 2025 talk, as
reported by EE Times; not independently benchmarked: d-Matrix has not submitted to MLPerf):
- Per card: 2 GB SRAM at 150 TB/s, 256 GB LPDDR5X, 2,400 TFLOPS 8-bit peak, PCIe Gen5 FHFL.
- "Llama3-8B: 60,000 tokens/s at 1 ms/token in one server; Llama3-70B: 30,000 tokens/s at
  2 ms/token in one rack (128 chips), at batch 48–64"; "optimised for models up to ~100 B
  parameters per rack". TPOT is therefore calibrated as a line through (8B, 1 ms) and
  (70B, 2 ms) at batch ≈ 56, with a small batch slope (+0.4 % per sequence: in-memory
  compute amortises weights, the batch mostly adds activation traffic).
- SRAM-resident capacity: 64 cards × 2 GB × 80 % usable (the rest holds activations and the
  hot KV cache) at 1 byte per parameter (block-FP8 weights) ≈ 102 B parameters, which matches
  the vendor's "up to 100 B per rack".
- Spill: weights beyond capacity are read from LPDDR5X each token. The per-card LPDDR5X
  bandwidth is not published; 0.4 TB/s per card at 60 % efficiency is an assumption (a
  256 GB LPDDR5X bank on 8 chiplet interfaces). Against the SRAM-resident line: 120 B →
  TPOT +50 %; 405 B → ≈ 4× (26 ms instead of 6).
- Prefill: 2 · params · tokens FLOPs at 2 % of the pool's 8-bit peak (≈ 3 PFLOPS, about what
  4 H100s deliver: d-Matrix positions Corsair for decode and pairs it with GPUs for prefill,
  so we do not credit it with a prefill advantage) plus 30 ms of host overhead: 2,000 tokens
  on 70B → ≈ 120 ms.
- Queue: 30 ms per request ahead (short service time per request).
- Power: not disclosed; 550 W per card is an assumption within the PCIe CEM 5.0 600 W
  envelope for FHFL cards. Throttling slows clocks like any chip: ×1.6.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.hardware.base import HardwareModel


@dataclass(frozen=True)
class CorsairModel(HardwareModel):
    family: str = "dmatrix"
    vendor: str = "dmatrix"
    hardware: str = "Corsair"
    cards: int = 64
    sram_gb_per_card: float = 2.0
    sram_usable_fraction: float = 0.8
    bytes_per_param: float = 1.0
    tpot_fixed_ms: float = 0.73
    tpot_ms_per_b_param: float = 0.0134
    batch_tpot_slope: float = 0.004
    lpddr_tb_s_per_card: float = 0.4
    lpddr_efficiency: float = 0.6
    tflops_per_card: float = 2400.0
    prefill_efficiency: float = 0.02
    ttft_overhead_ms: float = 30.0
    batch_ttft_slope: float = 0.005
    max_batch: int = 64
    queue_slot_ms: float = 30.0
    throttle_slowdown: float = 1.6
    idle_power_w: float = 80.0
    tdp_w: float = 550.0
    ambient_temp_c: float = 30.0
    full_load_temp_c: float = 66.0
    throttle_temp_c: float = 90.0

    @property
    def sram_capacity_params_b(self) -> float:
        """Largest model (billions of parameters) whose weights stay resident in SRAM."""
        return self.cards * self.sram_gb_per_card * self.sram_usable_fraction / self.bytes_per_param

    def spill_fraction(self, model_params_b: float) -> float:
        """Share of the weights that do not fit in SRAM (0 while the model is resident)."""
        if model_params_b <= 0:
            return 0.0
        return max(model_params_b - self.sram_capacity_params_b, 0.0) / model_params_b

    def _spill_ms(self, model_params_b: float) -> float:
        spill_gb = max(model_params_b - self.sram_capacity_params_b, 0.0) * self.bytes_per_param
        bandwidth_gb_ms = self.cards * self.lpddr_tb_s_per_card * self.lpddr_efficiency  # GB/ms
        return spill_gb / bandwidth_gb_ms

    def _prefill_ms(self, input_tokens: int, *, batch_size: float, model_params_b: float) -> float:
        flops = 2.0 * model_params_b * 1e9 * input_tokens
        compute_ms = flops / (self.cards * self.tflops_per_card * 1e12 * self.prefill_efficiency) * 1000.0
        base = self.ttft_overhead_ms + compute_ms + self._spill_ms(model_params_b)
        return base * (1 + self.batch_ttft_slope * (batch_size - 1))

    def _decode_ms(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        resident = self.tpot_fixed_ms + self.tpot_ms_per_b_param * model_params_b
        return (resident + self._spill_ms(model_params_b)) * (1 + self.batch_tpot_slope * (batch_size - 1))

    def _ttft_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.05 + 0.15 * self.spill_fraction(model_params_b)

    def _tpot_sigma(self, *, batch_size: float, queue_depth: float, model_params_b: float) -> float:
        return 0.025 + 0.2 * self.spill_fraction(model_params_b)

    def _mem_bw_util(self, util: float, model_params_b: float) -> float:
        # Off-chip (LPDDR5X) bandwidth: idle while the model is SRAM-resident.
        return 0.04 + 0.08 * util + 0.85 * self.spill_fraction(model_params_b) * util
