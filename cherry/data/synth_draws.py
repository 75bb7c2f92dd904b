"""The draws `cherry.data.synthetic` and `cherry.data.synthetic_chunked` share: node weights, weighted
draws inside node segments, and the features' quantisation (exact in decimal CSV)."""
from __future__ import annotations

import numpy as np

FEATURE_STEP = 1.0 / 16.0  # dyadic, with a 4-digit decimal expansion
FEATURE_LIMIT = 159 * FEATURE_STEP  # 9.9375: one integer digit in CSV


def _node_weights(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    # Pareto weights with tail exponent `exponent`, capped at 2 sqrt(n) times the mean so a single hub
    # cannot absorb a large share of all draws (most would be duplicates); max degree stays >> median.
    w = (1.0 - rng.random(n)) ** (-1.0 / (exponent - 1.0))
    return np.minimum(w, w.mean() * np.sqrt(n) * 2.0)


def _sample_from_segments(rng, cumw: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each i, a position j in [lo_i, hi_i) drawn with probability proportional to weight j.

    ``cumw`` is the inclusive cumulative weight over the ordered nodes (weights > 0).
    """
    base = np.where(lo > 0, cumw[np.maximum(lo - 1, 0)], 0.0)
    target = base + rng.random(lo.size) * (cumw[hi - 1] - base)
    pos = np.searchsorted(cumw, target, side="right")
    return np.clip(pos, lo, hi - 1)


def quantized_features(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to multiples of `FEATURE_STEP` within +-`FEATURE_LIMIT`, as float32."""
    q = np.clip(np.rint(x / FEATURE_STEP), -159, 159)
    return (q * FEATURE_STEP).astype(np.float32)
