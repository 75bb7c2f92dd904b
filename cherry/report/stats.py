"""Ratios of step times with an interval that holds from run to run, and the verdict a ratio supports.

A timed comparison of two systems is the ratio of their median step times (per-step times pooled
over repeats, warm-up excluded). Steps of one run are correlated (the machine's load, caches, the
process's allocator drift together), so resampling steps alone gives intervals far narrower than the
spread between two workflow runs (a technique that does nothing on a CPU showed 1.14 [1.02, 1.74]).
The interval here comes from a two-level (hierarchical) percentile bootstrap: each resample draws
the runs (repeats) of each side with replacement, then the steps within each drawn run, and takes the
ratio of the pooled medians; `NUM_RESAMPLES` times. Drawing runs carries the run-to-run spread into
the interval; drawing steps keeps the within-run spread.

Verdicts: "faster"/"slower" only when both sides have at least `MIN_RUNS` runs and the whole interval
lies beyond ``1 +- margin`` (default `NOISE_MARGIN`, 5%: the drift between back-to-back runs on a
shared CPU, which no resampling of one workflow run can see); otherwise "within noise" (or "too few
runs"). A seeded generator makes the interval a function of the data alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

NUM_RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_SAMPLES = 3  # fewer per-step times than this (over all runs of a side) carry no interval
MIN_RUNS = 2  # fewer runs than this on a side: the interval cannot see run-to-run spread, no verdict
NOISE_MARGIN = 0.05
TOO_FEW_RUNS = "too few runs"


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of medians, with a bootstrap interval ``[low, high]``."""

    value: float
    low: float
    high: float
    num_numerator: int
    num_denominator: int
    runs_numerator: int = 1
    runs_denominator: int = 1
    margin: float = NOISE_MARGIN

    @property
    def verdict(self) -> str:
        """For a time ratio other / cherry: "cherry faster" above 1, "cherry slower" below."""
        return self.verdict_as("cherry faster", "cherry slower")

    def verdict_as(self, above: str, below: str) -> str:
        """``above`` if the whole interval exceeds ``1 + margin``, ``below`` if it lies under
        ``1 / (1 + margin)``, else "within noise"; `TOO_FEW_RUNS` with fewer than `MIN_RUNS` runs a side."""
        if min(self.runs_numerator, self.runs_denominator) < MIN_RUNS:
            return TOO_FEW_RUNS
        if self.low > 1.0 + self.margin:
            return above
        if self.high < 1.0 / (1.0 + self.margin):
            return below
        return "within noise"

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


def _runs(values: Sequence, name: str) -> list[np.ndarray]:
    """``values`` as one array per run: a flat sequence of numbers is one run."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} has type {type(values).__name__}: expected a sequence of times or of runs")
    items = list(values)
    nested = any(isinstance(v, (list, tuple, np.ndarray)) for v in items)
    runs = items if nested else [items]
    out = []
    for run in runs:
        array = np.asarray([float(v) for v in run if v is not None], dtype=float)
        if array.size and not (np.isfinite(array).all() and (array > 0).all()):
            raise ValueError(f"{name}: times must be positive finite numbers")
        if array.size:
            out.append(array)
    return out


def _pooled_medians(runs: list[np.ndarray], rng: np.random.Generator, num_resamples: int) -> np.ndarray:
    """Median of the pooled steps of runs drawn with replacement, steps drawn with replacement in each."""
    sizes = np.array([r.size for r in runs])
    if len(set(sizes.tolist())) == 1:  # equal lengths (the usual case): one vectorised draw
        data = np.stack(runs)  # (R, n)
        chosen = rng.integers(0, len(runs), size=(num_resamples, len(runs)))
        steps = rng.integers(0, data.shape[1], size=(num_resamples, len(runs), data.shape[1]))
        return np.median(data[chosen[..., None], steps].reshape(num_resamples, -1), axis=1)
    out = np.empty(num_resamples)
    for b in range(num_resamples):
        chosen = rng.integers(0, len(runs), size=len(runs))
        out[b] = np.median(np.concatenate([runs[r][rng.integers(0, sizes[r], size=sizes[r])] for r in chosen]))
    return out


def median_ratio(numerator: Sequence, denominator: Sequence, num_resamples: int = NUM_RESAMPLES,
                 confidence: float = CONFIDENCE, seed: int = 0, margin: float = NOISE_MARGIN) -> Optional[Ratio]:
    """The ratio of pooled medians with its hierarchical-bootstrap interval (module docstring).

    Each side is a sequence of runs (each a sequence of per-step seconds) or, for one run, a flat
    sequence of seconds. None if either side has fewer than `MIN_SAMPLES` steps in all.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if isinstance(num_resamples, bool) or not isinstance(num_resamples, int) or num_resamples < 100:
        raise ValueError(f"num_resamples must be an int >= 100, got {num_resamples!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        raise ValueError(f"margin must be a number in [0, 1), got {margin!r}")
    a, b = _runs(numerator, "numerator"), _runs(denominator, "denominator")
    num_a, num_b = sum(r.size for r in a), sum(r.size for r in b)
    if num_a < MIN_SAMPLES or num_b < MIN_SAMPLES:
        return None
    rng = np.random.default_rng(seed)
    ratios = _pooled_medians(a, rng, num_resamples) / _pooled_medians(b, rng, num_resamples)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    value = float(np.median(np.concatenate(a)) / np.median(np.concatenate(b)))
    return Ratio(value, float(low), float(high), int(num_a), int(num_b), len(a), len(b), float(margin))
