"""Graphs of chosen degree laws, generated in memory (for the planner's redundancy benchmark).

Each generator returns an undirected `Graph` (every edge in both directions, no self-loops, no
duplicates) on ``num_nodes`` nodes whose ids are a random permutation, so no generator hands the
planner a locality order for free. Deterministic in ``seed``.

- ``"geometric"``: random geometric graph: points uniform in the unit square, an edge between points
  closer than the radius that gives ``avg_degree`` (low degree variance, strong locality).
- ``"barabasi-albert"``: preferential attachment, each new node linking to ``m`` distinct earlier
  nodes chosen proportionally to degree (power-law tail of exponent 3, no communities).
- ``"chung-lu"``: expected degrees ``w_i ~ i^(-1 / (exponent - 1))`` scaled to ``avg_degree``, edge
  ends drawn proportionally to ``w`` (a power law of the given exponent, no communities).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from cherry.data.graph import Graph

DEGREE_LAWS = ("geometric", "barabasi-albert", "chung-lu")


def _undirected(src: np.ndarray, dst: np.ndarray, num_nodes: int, rng: np.random.Generator) -> Graph:
    keep = src != dst
    a, b = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    pairs = np.unique(a.astype(np.int64) * num_nodes + b)
    a, b = pairs // num_nodes, pairs % num_nodes
    relabel = rng.permutation(num_nodes).astype(np.int64)
    a, b = relabel[a], relabel[b]
    s = torch.from_numpy(np.concatenate([a, b]))
    d = torch.from_numpy(np.concatenate([b, a]))
    return Graph.from_edges(s, d, num_nodes)


def geometric_graph(num_nodes: int, avg_degree: float, rng: np.random.Generator) -> Graph:
    from scipy.spatial import cKDTree

    points = rng.random((num_nodes, 2))
    radius = math.sqrt(avg_degree / (math.pi * num_nodes))
    pairs = cKDTree(points).query_pairs(radius, output_type="ndarray")
    return _undirected(pairs[:, 0], pairs[:, 1], num_nodes, rng)


def _first_distinct(draws: np.ndarray, m: int) -> np.ndarray:
    """The first ``m`` distinct values of ``draws`` in draw order (not the smallest: that biases to old nodes)."""
    _, first = np.unique(draws, return_index=True)
    return draws[np.sort(first)][:m]


def barabasi_albert_graph(num_nodes: int, m: int, rng: np.random.Generator) -> Graph:
    if num_nodes <= m:
        raise ValueError(f"num_nodes must exceed m = {m} for preferential attachment, got {num_nodes}")
    # ends[j]: the endpoints of the edges so far; drawing uniformly from it is drawing by degree
    ends = np.empty(2 * m * num_nodes, dtype=np.int64)
    ends[:m] = np.arange(m)  # the first new node links to the m seed nodes
    size = m
    src, dst = [], []
    for t in range(m, num_nodes):
        targets = _first_distinct(ends[rng.integers(0, size, 2 * m)], m) if t > m else np.arange(m)
        while targets.size < m:  # rare: too many repeats among the draws
            targets = _first_distinct(np.concatenate([targets, ends[rng.integers(0, size, 2 * m)]]), m)
        src.append(np.full(m, t, dtype=np.int64))
        dst.append(targets)
        ends[size:size + m] = targets
        ends[size + m:size + 2 * m] = t
        size += 2 * m
    return _undirected(np.concatenate(src), np.concatenate(dst), num_nodes, rng)


def chung_lu_graph(num_nodes: int, avg_degree: float, exponent: float, rng: np.random.Generator) -> Graph:
    if exponent <= 2:
        raise ValueError(f"exponent must be > 2 for a finite mean degree, got {exponent}")
    w = np.arange(1, num_nodes + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0))
    w = np.minimum(w / w.sum() * avg_degree * num_nodes, math.sqrt(avg_degree * num_nodes))  # cap hubs at sqrt(2E)
    cum = np.cumsum(w)
    num_edges = int(avg_degree * num_nodes / 2)
    ends = np.searchsorted(cum, rng.random(2 * num_edges) * cum[-1], side="right").clip(max=num_nodes - 1)
    return _undirected(ends[:num_edges], ends[num_edges:], num_nodes, rng)


def degree_law_graph(law: str, num_nodes: int = 100_000, avg_degree: float = 10.0, seed: int = 0,
                     m: int = 5, exponent: float = 2.1) -> Graph:
    """The graph of degree law ``law`` (one of `DEGREE_LAWS`); ``m`` is for Barabasi-Albert, ``exponent``
    for Chung-Lu, ``avg_degree`` for the other two."""
    if law not in DEGREE_LAWS:
        raise ValueError(f"degree law must be one of {DEGREE_LAWS}, got {law!r}")
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 2:
        raise ValueError(f"num_nodes must be an int >= 2, got {num_nodes!r}")
    if not avg_degree > 0:
        raise ValueError(f"avg_degree must be positive, got {avg_degree!r}")
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m must be an int >= 1, got {m!r}")
    rng = np.random.default_rng(seed)
    if law == "geometric":
        return geometric_graph(num_nodes, avg_degree, rng)
    if law == "barabasi-albert":
        return barabasi_albert_graph(num_nodes, m, rng)
    return chung_lu_graph(num_nodes, avg_degree, exponent, rng)
