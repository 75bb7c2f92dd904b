"""The bootstrap interval of a ratio of medians and its verdict (issue 11)."""
from __future__ import annotations

import numpy as np
import pytest

from cherry.report.stats import median_ratio


def test_clearly_different_samples_give_a_verdict_and_an_interval_around_the_ratio():
    rng = np.random.default_rng(1)
    slow = 2.0 + 0.05 * rng.standard_normal(40)
    fast = 1.0 + 0.05 * rng.standard_normal(40)
    r = median_ratio(slow, fast)
    assert r.low < r.value < r.high and 1.8 < r.low and r.high < 2.2
    assert r.verdict == "cherry faster"
    assert median_ratio(fast, slow).verdict == "cherry slower"


def test_overlapping_samples_are_within_noise_and_the_interval_is_reproducible():
    rng = np.random.default_rng(2)
    a, b = 1.0 + 0.3 * rng.standard_normal(10) ** 2, 1.0 + 0.3 * rng.standard_normal(10) ** 2
    r = median_ratio(a, b)
    assert r.low <= 1.0 <= r.high and r.verdict == "within noise"
    assert median_ratio(a, b) == r  # seeded: the same data give the same interval


def test_coverage_of_the_true_ratio_is_near_the_confidence_level():
    rng = np.random.default_rng(3)
    hits = 0
    for trial in range(200):
        a = rng.lognormal(np.log(1.5), 0.2, 25)
        b = rng.lognormal(0.0, 0.2, 25)
        r = median_ratio(a, b, num_resamples=500, seed=trial)
        hits += r.low <= 1.5 <= r.high
    assert 0.85 <= hits / 200 <= 0.99, hits


def test_too_few_samples_and_bad_arguments():
    assert median_ratio([1.0, 2.0], [1.0, 1.0, 1.0]) is None
    with pytest.raises(ValueError, match="confidence"):
        median_ratio([1.0] * 5, [1.0] * 5, confidence=1.5)
    with pytest.raises(ValueError, match="positive"):
        median_ratio([1.0, 0.0, 1.0], [1.0] * 3)
