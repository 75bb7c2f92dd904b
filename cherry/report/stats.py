"""Ratios of step times with their uncertainty, and the verdict a ratio supports.

A timed comparison of two systems is the ratio of their median step times (per-step times pooled
over repeats, warm-up excluded). Its 95% interval comes from a percentile bootstrap: both samples are
resampled with replacement, independently, and the ratio of the resampled medians is taken
`NUM_RESAMPLES` times. A seeded generator makes the interval a function of the data alone (the same
table gives the same interval). The verdict is "faster" / "slower" only when the whole interval lies
on one side of 1, else "within noise".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

NUM_RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_SAMPLES = 3  # fewer per-step times than this carry no interval


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of medians, with a bootstrap interval ``[low, high]``."""

    value: float
    low: float
    high: float
    num_numerator: int
    num_denominator: int

    @property
    def verdict(self) -> str:
        """For a time ratio other / cherry: "cherry faster" above 1, "cherry slower" below."""
        return self.verdict_as("cherry faster", "cherry slower")

    def verdict_as(self, above: str, below: str) -> str:
        """``above`` if the whole interval exceeds 1, ``below`` if it lies under 1, else "within noise"."""
        if self.low > 1.0:
            return above
        if self.high < 1.0:
            return below
        return "within noise"

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


def median_ratio(numerator: Sequence[float], denominator: Sequence[float], num_resamples: int = NUM_RESAMPLES,
                 confidence: float = CONFIDENCE, seed: int = 0) -> Optional[Ratio]:
    """The ratio of medians with its percentile-bootstrap interval, or None if either side has fewer
    than `MIN_SAMPLES` values (no interval can be trusted there)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if isinstance(num_resamples, bool) or not isinstance(num_resamples, int) or num_resamples < 100:
        raise ValueError(f"num_resamples must be an int >= 100, got {num_resamples!r}")
    a = np.asarray([float(v) for v in numerator if v is not None], dtype=float)
    b = np.asarray([float(v) for v in denominator if v is not None], dtype=float)
    if a.size < MIN_SAMPLES or b.size < MIN_SAMPLES:
        return None
    if (b <= 0).any() or (a <= 0).any():
        raise ValueError("times must be positive")
    rng = np.random.default_rng(seed)
    ra = np.median(a[rng.integers(0, a.size, size=(num_resamples, a.size))], axis=1)
    rb = np.median(b[rng.integers(0, b.size, size=(num_resamples, b.size))], axis=1)
    ratios = ra / rb
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return Ratio(float(np.median(a) / np.median(b)), float(low), float(high), int(a.size), int(b.size))
