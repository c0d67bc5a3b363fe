"""The hardware models: the contract the what-if projection relies on, the figures the docs
quote, and the shapes that tell the families apart."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis.hardware import PROFILES, HardwareModel, profile_for


def cv(values) -> float:
    values = np.asarray(values)
    return float(values.std() / values.mean())


def test_profiles_cover_the_three_families_and_vendors_map_onto_them():
    assert set(PROFILES) == {"gpu", "dmatrix", "groq"}
    assert profile_for("nvidia") is PROFILES["gpu"]
    assert profile_for(" DMatrix ") is PROFILES["dmatrix"]
    assert profile_for("groq") is PROFILES["groq"]
    assert [(m.vendor, m.hardware, m.family) for m in PROFILES.values()] == [
        ("nvidia", "H100", "gpu"), ("dmatrix", "Corsair", "dmatrix"), ("groq", "LPU", "groq")]
    for model in PROFILES.values():
        assert isinstance(model, HardwareModel)
        with pytest.raises(dataclasses.FrozenInstanceError):
            model.queue_slot_ms = 1  # type: ignore[misc]
    with pytest.raises(KeyError, match="unknown hardware vendor or family 'tpu'"):
        profile_for("tpu")


@pytest.mark.parametrize("family", ["gpu", "dmatrix", "groq"])
def test_a_step_is_ttft_plus_tpot_times_output_tokens(family):
    m = PROFILES[family]
    kw = {"queue_depth": 2, "batch_size": 12, "model_params_b": 32}
    assert m.step_ms(3000, 250, **kw) == pytest.approx(m.ttft_ms(3000, **kw) + 250 * m.tpot_ms(**kw))
    assert m.step_ms(3000, 250, **kw) == m.step_ms(3000, 250, **kw)  # expected values: no randomness


@pytest.mark.parametrize("family", ["gpu", "dmatrix", "groq"])
def test_sampled_latencies_average_to_the_expected_ones(family):
    m, rng = PROFILES[family], np.random.default_rng(1)
    ttft = [m.sample_ttft_ms(rng, 2000, batch_size=8, queue_depth=1) for _ in range(4000)]
    tpot = [m.sample_tpot_ms(rng, batch_size=8, queue_depth=1) for _ in range(4000)]
    assert np.mean(ttft) == pytest.approx(m.ttft_ms(2000, batch_size=8, queue_depth=1), rel=0.03)
    assert np.mean(tpot) == pytest.approx(m.tpot_ms(batch_size=8, queue_depth=1), rel=0.03)


def test_documented_figures_for_a_70b_model():
    gpu, corsair, lpu = PROFILES["gpu"], PROFILES["dmatrix"], PROFILES["groq"]
    assert gpu.tpot_ms() == pytest.approx(13.5, abs=0.2)
    assert gpu.tpot_ms(batch_size=16) == pytest.approx(19.6, abs=0.3)
    assert corsair.tpot_ms(batch_size=56) == pytest.approx(2.0, abs=0.1)  # vendor: 2 ms/token, 70B
    assert corsair.tpot_ms(batch_size=56, model_params_b=8) == pytest.approx(1.0, abs=0.1)  # 1 ms, 8B
    assert lpu.tpot_ms() == pytest.approx(3.33, abs=0.05)  # ~300 tokens/s measured
    for m in (gpu, corsair, lpu):  # the seed articles' 50–300 ms band for a 2k-token prompt
        assert 100 < m.ttft_ms(2000) < 200


def test_lpu_decode_is_near_constant_while_the_gpu_jitters_with_load():
    rng = np.random.default_rng(2)
    loads = [(float(b), float(q)) for b, q in zip(rng.integers(1, 33, 3000), rng.poisson(1.5, 3000), strict=True)]
    gpu = [PROFILES["gpu"].sample_tpot_ms(rng, batch_size=b, queue_depth=q) for b, q in loads]
    lpu = [PROFILES["groq"].sample_tpot_ms(rng, batch_size=b, queue_depth=q) for b, q in loads]
    assert cv(lpu) < cv(gpu) / 10
    assert cv(lpu) < 0.03


def test_lpu_ttft_grows_with_queueing_not_with_batching():
    lpu = PROFILES["groq"]
    assert lpu.ttft_ms(2000, batch_size=1) == lpu.ttft_ms(2000, batch_size=64)
    assert lpu.tpot_ms(batch_size=1) == lpu.tpot_ms(batch_size=64)
    assert lpu.ttft_ms(2000, queue_depth=20) - lpu.ttft_ms(2000) == pytest.approx(20 * lpu.queue_slot_ms)
    # A request ahead holds the device for its prefill, which is shorter for a smaller model.
    wait_8b = lpu.ttft_ms(2000, queue_depth=20, model_params_b=8) - lpu.ttft_ms(2000, model_params_b=8)
    assert wait_8b < 0.5 * 20 * lpu.queue_slot_ms


def test_gpu_degrades_and_jitters_more_as_batch_and_queue_grow():
    gpu, rng = PROFILES["gpu"], np.random.default_rng(3)
    assert gpu.tpot_ms(batch_size=32) > 1.8 * gpu.tpot_ms(batch_size=1)
    assert gpu.ttft_ms(2000, batch_size=32) > gpu.ttft_ms(2000, batch_size=1)
    quiet = [gpu.sample_tpot_ms(rng, batch_size=1) for _ in range(3000)]
    busy = [gpu.sample_tpot_ms(rng, batch_size=32, queue_depth=4) for _ in range(3000)]
    assert cv(busy) > 2 * cv(quiet)


def test_gpu_decode_is_bound_by_hbm_bandwidth():
    gpu = PROFILES["gpu"]
    faster = dataclasses.replace(gpu, hbm_tb_s=gpu.hbm_tb_s * 2)  # e.g. an HBM3e part
    bandwidth_share = gpu.tpot_ms() - gpu.decode_overhead_ms
    assert gpu.tpot_ms() - faster.tpot_ms() == pytest.approx(bandwidth_share / 2)
    assert gpu.tpot_ms(model_params_b=140) - gpu.decode_overhead_ms == pytest.approx(2 * bandwidth_share)


def test_corsair_is_fast_and_steady_until_the_model_outgrows_sram():
    corsair, rng = PROFILES["dmatrix"], np.random.default_rng(4)
    capacity = corsair.sram_capacity_params_b
    assert 95 < capacity < 110  # vendor: "up to ~100 B parameters per rack"
    assert corsair.spill_fraction(70) == 0.0

    def resident_line(params):  # what TPOT would be if SRAM were unlimited
        return corsair.tpot_fixed_ms + corsair.tpot_ms_per_b_param * params

    assert corsair.tpot_ms(model_params_b=70) == pytest.approx(resident_line(70))
    assert corsair.tpot_ms(model_params_b=120) > 1.4 * resident_line(120)
    assert corsair.tpot_ms(model_params_b=405) > 3 * resident_line(405)
    steady = [corsair.sample_tpot_ms(rng, model_params_b=70) for _ in range(3000)]
    spilled = [corsair.sample_tpot_ms(rng, model_params_b=405) for _ in range(3000)]
    assert cv(spilled) > 3 * cv(steady)
    assert cv(steady) < cv([PROFILES["gpu"].sample_tpot_ms(rng, batch_size=8) for _ in range(3000)])


@pytest.mark.parametrize("family", ["gpu", "dmatrix", "groq"])
def test_throttling_slows_steps_and_shows_in_telemetry(family):
    m, rng = PROFILES[family], np.random.default_rng(5)
    assert m.step_ms(2000, 200, throttled=True) > 1.3 * m.step_ms(2000, 200)
    normal = m.sample_telemetry(rng, load=0.6, queue_depth=1, batch_size=8)
    hot = m.sample_telemetry(rng, load=0.6, queue_depth=1, batch_size=8, throttled=True)
    assert set(normal) == {"utilization", "queue_depth", "batch_size", "power_w", "temperature_c",
                           "mem_bw_util", "kv_cache_hit_rate", "tokens_per_s", "throttled"}
    assert (normal["throttled"], hot["throttled"]) == (0.0, 1.0)
    assert hot["temperature_c"] >= m.throttle_temp_c - 2 > normal["temperature_c"]
    assert hot["tokens_per_s"] < normal["tokens_per_s"] / 1.3


def test_a_long_queue_reads_as_a_saturated_device():
    m, rng = PROFILES["gpu"], np.random.default_rng(6)
    sample = m.sample_telemetry(rng, load=0.5, queue_depth=30, batch_size=58)
    assert sample["utilization"] >= 0.95 and sample["queue_depth"] == 30
