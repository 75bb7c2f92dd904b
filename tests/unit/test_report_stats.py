"""The hierarchical bootstrap interval of a ratio of medians and its verdict."""
from __future__ import annotations

import numpy as np
import pytest

from cherry.report.stats import median_ratio


def test_clearly_different_samples_give_a_verdict_and_an_interval_around_the_ratio():
    rng = np.random.default_rng(1)
    slow = [2.0 + 0.05 * rng.standard_normal(20) for _ in range(2)]  # two runs of 20 steps
    fast = [1.0 + 0.05 * rng.standard_normal(20) for _ in range(2)]
    r = median_ratio(slow, fast)
    assert r.low < r.value < r.high and 1.8 < r.low and r.high < 2.2
    assert r.verdict == "cherry faster"
    assert median_ratio(fast, slow).verdict == "cherry slower"


def test_overlapping_samples_are_within_noise_and_the_interval_is_reproducible():
    rng = np.random.default_rng(2)
    a = [1.0 + 0.3 * rng.standard_normal(10) ** 2 for _ in range(2)]
    b = [1.0 + 0.3 * rng.standard_normal(10) ** 2 for _ in range(2)]
    r = median_ratio(a, b)
    assert r.low <= 1.0 <= r.high and r.verdict == "within noise"
    assert median_ratio(a, b) == r  # seeded: the same data give the same interval


def test_coverage_of_the_true_ratio_is_near_the_confidence_level():
    rng = np.random.default_rng(3)
    hits = 0
    for trial in range(200):
        a = [rng.lognormal(np.log(1.5), 0.2, 25)]
        b = [rng.lognormal(0.0, 0.2, 25)]
        r = median_ratio(a, b, num_resamples=500, seed=trial)
        hits += r.low <= 1.5 <= r.high
    assert 0.85 <= hits / 200 <= 0.99, hits


def test_too_few_samples_and_bad_arguments():
    assert median_ratio([1.0, 2.0], [1.0, 1.0, 1.0]) is None
    with pytest.raises(ValueError, match="confidence"):
        median_ratio([1.0] * 5, [1.0] * 5, confidence=1.5)
    with pytest.raises(ValueError, match="positive"):
        median_ratio([1.0, 0.0, 1.0], [1.0] * 3)


def _correlated_runs(rng, true_s: float, runs: int, steps: int) -> list:
    """Runs whose steps share one per-run offset (the machine's load during that run) plus step noise."""
    return [true_s * rng.lognormal(0.15 * rng.standard_normal(), 0.03, steps) for _ in range(runs)]


def test_run_to_run_spread_widens_the_interval_and_two_workflows_agree():
    # Equal true times, strongly correlated steps within a run: resampling steps alone (all steps as
    # one run) claims a difference; the hierarchical interval, which draws runs, does not.
    rng = np.random.default_rng(4)
    agree = 0
    for trial in range(40):
        a, b = _correlated_runs(rng, 1.0, 3, 8), _correlated_runs(rng, 1.0, 3, 8)
        pooled = median_ratio([np.concatenate(a)], [np.concatenate(b)], num_resamples=400)
        runs = median_ratio(a, b, num_resamples=400)
        assert runs.high - runs.low > pooled.high - pooled.low
        agree += runs.verdict == "within noise"
    assert agree >= 36, agree  # equal systems: "within noise" in (nearly) every simulated workflow run


def test_a_real_difference_survives_run_to_run_spread():
    rng = np.random.default_rng(5)
    verdicts = {median_ratio(_correlated_runs(rng, 2.0, 3, 8), _correlated_runs(rng, 1.0, 3, 8),
                             num_resamples=400).verdict for _ in range(20)}
    assert verdicts == {"cherry faster"}


def test_margin_and_too_few_runs():
    rng = np.random.default_rng(6)
    a = [1.03 + 0.001 * rng.standard_normal(30) for _ in range(3)]
    b = [1.0 + 0.001 * rng.standard_normal(30) for _ in range(3)]
    assert median_ratio(a, b).verdict == "within noise"  # 3% apart: inside the 5% noise margin
    assert median_ratio(a, b, margin=0.0).verdict == "cherry faster"
    one_run = median_ratio([np.concatenate(a)], b)
    assert one_run.runs_numerator == 1 and one_run.verdict == "too few runs"
    unequal = median_ratio([a[0], a[1][:10]], [b[0][:5], b[1]], num_resamples=200)  # runs of unequal length
    assert unequal.num_numerator == 40 and unequal.num_denominator == 35
    with pytest.raises(ValueError, match="margin"):
        median_ratio(a, b, margin=-0.1)
    with pytest.raises(TypeError, match="sequence"):
        median_ratio(3.0, b)
