"""The statistics behind a release verdict, checked against scipy and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from analysis.releases import stats


def test_percentile_interpolates_like_percentile_cont():
    assert stats.percentile([1, 2, 3, 4], 50) == 2.5
    assert stats.percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    assert stats.percentile([10], 99) == 10
    assert stats.percentile([], 95) is None
    assert stats.percentiles([4, 1, 3, 2], (50, 95)) == {50: 2.5, 95: pytest.approx(3.85)}


def test_mann_whitney_matches_the_exact_small_sample_value():
    # All of b above all of a: the exact two-sided p is 2 / C(6, 3) = 0.1.
    assert stats.mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    rng = np.random.default_rng(1)
    a, b = rng.lognormal(0, 1, 300), rng.lognormal(0.2, 1, 280)
    assert stats.mann_whitney_p(a, b) == pytest.approx(scipy_stats.mannwhitneyu(a, b).pvalue)
    assert stats.mann_whitney_p([], [1.0]) is None
    assert stats.mann_whitney_p([5.0, 5.0], [5.0]) == 1.0


@pytest.mark.parametrize(("n_a", "n_b", "bins", "shift"), [(10, 12, 3, 0), (50, 70, 5, 1), (1000, 800, 40, 10)])
def test_binned_mann_whitney_equals_scipy_on_the_bin_indices(n_a, n_b, bins, shift):
    # Counts per ordered bin (the rollups' histograms) give what scipy gives for tied values.
    rng = np.random.default_rng(n_a)
    a, b = rng.integers(0, bins, n_a), rng.integers(0, bins, n_b) + shift
    expected = scipy_stats.mannwhitneyu(a, b, method="asymptotic").pvalue
    counts_a, counts_b = np.bincount(a, minlength=2 * bins), np.bincount(b, minlength=2 * bins)
    assert stats.mann_whitney_binned_p(counts_a, counts_b) == pytest.approx(expected, rel=1e-9)


def test_binned_mann_whitney_edge_cases():
    assert stats.mann_whitney_binned_p([0, 0], [3, 1]) is None
    assert stats.mann_whitney_binned_p([0, 4, 0], [0, 9, 0]) == 1.0
    assert stats.mann_whitney_binned_p([40, 0], [0, 40]) < 1e-10


def test_bootstrap_interval_agrees_with_scipy_bootstrap():
    rng = np.random.default_rng(7)
    a, b = rng.lognormal(6, 0.5, 400), rng.lognormal(6.2, 0.5, 350)
    ours = stats.bootstrap_percentile_diff(a, b, qs=(50, 90), level=0.95, seed=3)

    def diff(q):
        return lambda x, y, axis: np.percentile(y, q, axis=axis) - np.percentile(x, q, axis=axis)

    for i, q in enumerate((50, 90)):
        ref = scipy_stats.bootstrap((a, b), diff(q), paired=False, vectorized=True, n_resamples=4000,
                                    method="percentile", random_state=np.random.default_rng(5))
        low, high = ref.confidence_interval
        width = high - low
        assert ours[i, 0] == pytest.approx(low, abs=0.15 * width)
        assert ours[i, 1] == pytest.approx(high, abs=0.15 * width)


def test_bootstrap_is_reproducible_for_a_seed():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 10, 500), rng.normal(105, 10, 500)
    first = stats.bootstrap_percentile_diff(a, b, seed=11)
    assert np.array_equal(first, stats.bootstrap_percentile_diff(a[::-1], b, seed=11))
    assert not np.array_equal(first, stats.bootstrap_percentile_diff(a, b, seed=12))


def test_a_sample_standing_for_a_large_release_gets_the_width_of_the_full_release():
    # Difference of medians of two N(0, 1) samples of 200,000: SE = sqrt(2 * pi / 2 / n).
    rng = np.random.default_rng(2)
    n = 200_000
    a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
    expected_width = 2 * 1.96 * np.sqrt(2 * np.pi / 2 / n)
    full = stats.bootstrap_percentile_diff(a, b, qs=(50,), seed=1)
    assert full[0, 1] - full[0, 0] == pytest.approx(expected_width, rel=0.1)
    # 10,000 random tasks of each release, told the releases have 200,000.
    sampled = stats.bootstrap_percentile_diff(a[:10_000], b[:10_000], qs=(50,), seed=1,
                                              population_a=n, population_b=n)
    assert sampled[0, 1] - sampled[0, 0] == pytest.approx(expected_width, rel=0.15)
    unscaled = stats.bootstrap_percentile_diff(a[:10_000], b[:10_000], qs=(50,), seed=1)
    assert unscaled[0, 1] - unscaled[0, 0] > 3 * expected_width


def test_order_statistic_draws_match_an_index_matrix_bootstrap():
    rng = np.random.default_rng(12)
    x = np.sort(rng.lognormal(5, 0.8, 300))
    brute = np.percentile(x[rng.integers(0, x.size, size=(4000, x.size))], [50, 95], axis=1)
    ours = stats._bootstrap_deviations(x, (50, 95), rng=np.random.default_rng(3), resamples=4000,
                                       population=x.size) + np.percentile(x, [50, 95])[:, None]
    for i in range(2):
        for level in (2.5, 25, 50, 75, 97.5):
            spread = np.percentile(brute[i], 97.5) - np.percentile(brute[i], 2.5)
            assert np.percentile(ours[i], level) == pytest.approx(np.percentile(brute[i], level),
                                                                   abs=0.08 * spread)


def test_interval_covers_the_true_difference_about_as_often_as_promised():
    rng = np.random.default_rng(4)
    true_diff = 20.0  # medians of N(100, 15) and N(120, 15)
    covered = 0
    runs = 120
    for run in range(runs):
        a, b = rng.normal(100, 15, 200), rng.normal(120, 15, 200)
        low, high = stats.bootstrap_percentile_diff(a, b, qs=(50,), resamples=500, seed=run)[0]
        covered += low <= true_diff <= high
    assert 0.88 <= covered / runs <= 0.99


def _verdict(a, b, **kw):
    qs = stats.HEADLINE_PERCENTILES
    cis = stats.bootstrap_percentile_diff(a, b, qs=qs, level=stats.interval_level(kw.get("alpha", 0.05)))
    changes = [stats.Change(q, stats.percentile(a, q), stats.percentile(b, q), tuple(ci))
               for q, ci in zip(qs, cis, strict=True)]
    return stats.verdict(n_a=len(a), n_b=len(b), changes=changes, p_value=stats.mann_whitney_p(a, b), **kw)


def test_a_clearly_slower_release_is_a_regression_and_the_reverse_an_improvement():
    rng = np.random.default_rng(8)
    a, b = rng.lognormal(7, 0.4, 500), rng.lognormal(7.4, 0.4, 500)
    slower = _verdict(a, b)
    assert slower.regressed and slower.significant and slower.label == "regressed"
    assert slower.text.startswith("Regressed: p50")
    assert "significant at 95% over p50 and p95" in slower.text
    faster = _verdict(b, a)
    assert faster.improved and not faster.regressed and faster.label == "improved"


@pytest.mark.parametrize("threshold_pct", [10.0, 0.0])
def test_two_samples_of_one_distribution_are_not_called_a_regression(threshold_pct):
    false_alarms = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        a, b = rng.lognormal(7, 0.6, 400), rng.lognormal(7, 0.6, 400)
        false_alarms += _verdict(a, b, threshold_pct=threshold_pct).regressed
    # Bonferroni over p50 and p95 keeps the one-sided false-alarm rate under 2.5%: about 0.5 in
    # 20 runs with no threshold.
    assert false_alarms <= (0 if threshold_pct else 2)


def test_a_small_significant_change_is_reported_but_not_a_regression():
    rng = np.random.default_rng(9)
    a, b = rng.normal(1000, 20, 5000), rng.normal(1030, 20, 5000)
    result = _verdict(a, b, threshold_pct=10.0)
    assert result.significant and not result.regressed
    assert result.label == "slower"
    assert "under the 10% threshold" in result.text


def test_too_few_tasks_gives_no_verdict_and_says_why():
    result = _verdict([100.0] * 5 + [900.0] * 5, [5000.0] * 12)
    assert result.label == "insufficient data"
    assert not result.regressed
    assert "too few tasks" in result.warnings[0]


def test_a_slower_typical_task_is_a_regression_even_when_the_tail_holds():
    rng = np.random.default_rng(21)
    a = rng.lognormal(7, 0.3, 800)
    b = np.where(rng.random(800) < 0.9, a * 1.25, a)  # most tasks 25% slower, the tail unchanged
    b[np.argsort(b)[-60:]] = np.sort(a)[-60:]
    result = _verdict(a, b)
    assert result.regressed and "p50" in result.text
