"""Generated node-classification graphs: a degree-corrected stochastic block model in numpy.

Contract of `generate`: pure and vectorised; one seeded ``np.random.Generator`` drives everything, so
the same `SynthSpec` gives bit-identical arrays. The result has exactly ``spec.num_edges`` distinct
undirected edges (no self-loops, stored once as ``src < dst``), labels in ``[0, num_classes)``,
float32 features that are multiples of 1/16 in [-9.9375, 9.9375] (exact in decimal CSV and in
float32, so they survive the OGB CSV round trip bit for bit) and a random disjoint split.

Why this model: node weights drawn from a power law give a heavy-tailed degree distribution
(Chung-Lu). An edge's far end is drawn inside its source's class with a per-node probability (Beta
distributed, mean ``homophily``) and otherwise inside the node's "partner" class. That makes labels
homophilous yet leaves some nodes with misleading neighbourhoods. Features are a weak class centroid
plus noise, so a features-only classifier is mediocre and averaging over (mostly same-class)
neighbours lifts it, as on ogbn-arxiv and -products.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cherry.data.registry import SynthSpec
from cherry.data.synth_draws import (FEATURE_LIMIT, FEATURE_STEP, _node_weights,  # noqa: F401 (re-exported)
                                     _sample_from_segments, quantized_features)


@dataclass(frozen=True)
class SynthArrays:
    """Generated arrays in OGB's shapes: ``edges`` is ``[E, 2]`` int64 (undirected, ``src < dst``)."""

    edges: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    valid_idx: np.ndarray
    test_idx: np.ndarray


def _sample_edges(rng, spec: SynthSpec, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    n = spec.num_nodes
    order = np.argsort(labels, kind="stable")  # nodes grouped by class
    cumw = np.cumsum(weights[order])
    class_start = np.searchsorted(labels[order], np.arange(spec.num_classes), side="left")
    class_end = np.searchsorted(labels[order], np.arange(spec.num_classes), side="right")
    concentration = 1.0  # Beta(h, 1 - h): many nodes near 0 or 1, as in real graphs
    node_homophily = rng.beta(concentration * spec.homophily, concentration * (1 - spec.homophily), n)
    nonempty = np.flatnonzero(class_end > class_start)
    partner = nonempty[rng.integers(0, nonempty.size, n)]
    keys = np.empty(0, dtype=np.int64)
    oversample = 1.2  # draws per missing edge; grows to the observed duplicate rate
    for _ in range(20):
        missing = spec.num_edges - keys.size
        if missing <= 0:
            break
        draw = int(missing * oversample) + 64
        src = order[_sample_from_segments(rng, cumw, np.zeros(draw, np.int64), np.full(draw, n, np.int64))]
        # An edge stays in its source's class with the source's own homophily; otherwise it goes to
        # the source's partner class, so low-homophily neighbourhoods look like another class.
        cls = np.where(rng.random(draw) < node_homophily[src], labels[src], partner[src])
        lo, hi = class_start[cls], class_end[cls]
        dst = order[_sample_from_segments(rng, cumw, lo, hi)]
        keep = src != dst
        a, b = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
        merged = np.sort(np.concatenate([keys, a * n + b]))  # sort-based: faster than np.unique here
        gained = -keys.size
        keys = merged[np.concatenate([[True], merged[1:] != merged[:-1]])]
        gained += keys.size
        oversample = min(max(oversample, 1.1 * draw / max(gained, 1)), 50.0)
    if keys.size < spec.num_edges:
        raise ValueError(f"{spec.name}: could not draw {spec.num_edges} distinct edges; graph too dense")
    if keys.size > spec.num_edges:
        keys = np.sort(rng.choice(keys, size=spec.num_edges, replace=False))
    # Shuffle edge order so the CSV is not sorted by source (as in real edge lists).
    keys = keys[rng.permutation(keys.size)]
    return np.stack([keys // n, keys % n], axis=1)


def _features(rng, spec: SynthSpec, labels: np.ndarray) -> np.ndarray:
    f = spec.feature_dim
    centroids = rng.standard_normal((spec.num_classes, f)) * spec.feature_signal
    return quantized_features(centroids[labels] + rng.standard_normal((spec.num_nodes, f)))


def generate(spec: SynthSpec) -> SynthArrays:
    """Generate the dataset described by ``spec`` (see module docstring for the guarantees), all in
    memory; a ``chunked`` spec gives the arrays of `cherry.data.synthetic_chunked` (its own stream),
    which `cherry data prepare` streams without ever holding them whole."""
    if not isinstance(spec, SynthSpec):
        raise TypeError(f"spec must be a SynthSpec, got {type(spec).__name__}")
    if spec.chunked:
        from cherry.data.synthetic_chunked import ChunkedSynth

        with ChunkedSynth(spec) as chunks:
            return SynthArrays(edges=np.concatenate(list(chunks.edge_blocks())),
                               features=np.concatenate(list(chunks.feature_blocks())), labels=chunks.labels,
                               train_idx=chunks.train_idx, valid_idx=chunks.valid_idx, test_idx=chunks.test_idx)
    rng = np.random.default_rng(spec.seed)
    n, c = spec.num_nodes, spec.num_classes
    class_p = 1.0 / np.arange(1, c + 1) ** spec.class_skew
    labels = rng.choice(c, size=n, p=class_p / class_p.sum()).astype(np.int64)
    weights = _node_weights(rng, n, spec.degree_exponent)
    edges = _sample_edges(rng, spec, labels, weights)
    features = _features(rng, spec, labels)
    perm = rng.permutation(n)
    if spec.split_by_degree:
        # Like ogbn-products' sales-rank split: train on the best-connected nodes, test on the tail.
        perm = perm[np.argsort(-weights[perm], kind="stable")]
    n_train, n_valid, n_test = spec.split_sizes
    splits = np.split(perm[: n_train + n_valid + n_test], [n_train, n_train + n_valid])
    train_idx, valid_idx, test_idx = (np.sort(s).astype(np.int64) for s in splits)
    return SynthArrays(edges=edges, features=features, labels=labels,
                       train_idx=train_idx, valid_idx=valid_idx, test_idx=test_idx)
