"""Latency and telemetry models of the inference hardware agents run on, one per family.

Used by the workload simulator (sampled latencies and device telemetry) and by the what-if
projection (expected latencies of a task's LLM steps on other hardware). Each family's module
documents its figures and their sources:

| family | model | TPOT, 70B | TTFT, 2k-token prompt | shape |
|---|---|---|---|---|
| `gpu` | `gpu.H100Model` (4× H100, FP8) | 13.5 ms at batch 1, ~20 ms at 16 | ~125–165 ms | degrades and jitters with batch and queue; HBM-bound decode |
| `dmatrix` | `dmatrix.CorsairModel` (64-card pool) | ~1.7 ms, 2 ms at batch 56 | ~120 ms | fast and steady until the model exceeds SRAM (~102 B params), then degrades |
| `groq` | `groq.LpuModel` (576 chips) | 3.3 ms, constant | ~130 ms | TPOT independent of load; TTFT grows with the queue only |

`PROFILES` holds the default instance of each family; `profile_for` maps the vendor strings
telemetry carries (`nvidia`, `dmatrix`, `groq`) or a family name to one of them. Profiles are
frozen dataclasses: `dataclasses.replace(PROFILES["gpu"], gpus=8)` is another configuration.
"""

from __future__ import annotations

from analysis.hardware.base import HardwareModel
from analysis.hardware.dmatrix import CorsairModel
from analysis.hardware.gpu import H100Model
from analysis.hardware.groq import LpuModel

PROFILES: dict[str, HardwareModel] = {
    "gpu": H100Model(),
    "dmatrix": CorsairModel(),
    "groq": LpuModel(),
}

_ALIASES = {
    "gpu": "gpu", "nvidia": "gpu", "h100": "gpu", "h200": "gpu", "cuda": "gpu",
    "dmatrix": "dmatrix", "d-matrix": "dmatrix", "d_matrix": "dmatrix", "corsair": "dmatrix",
    "groq": "groq", "lpu": "groq",
}


def profile_for(vendor_or_family: str) -> HardwareModel:
    """The profile of a vendor (`nvidia`, `dmatrix`, `groq`) or family (`gpu`, …); case and
    surrounding whitespace do not matter. Raises KeyError naming the accepted values."""
    key = family_of(vendor_or_family)
    if key is None:
        raise KeyError(f"unknown hardware vendor or family {vendor_or_family!r}; "
                       f"expected one of {', '.join(sorted(_ALIASES))}")
    return PROFILES[key]


def family_of(vendor_or_family: str) -> str | None:
    """The family (a PROFILES key) of a vendor or family name, None when no profile knows it."""
    return _ALIASES.get((vendor_or_family or "").strip().lower())


__all__ = ["PROFILES", "HardwareModel", "H100Model", "CorsairModel", "LpuModel", "family_of", "profile_for"]
