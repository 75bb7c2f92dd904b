"""Graphs the benchmarks generate in memory: the same on every machine, no file needed."""
from __future__ import annotations

import torch

NUM_CLASSES = 8


def degree_law_dataset(law: str, num_nodes: int, seed: int, features: int, name: str = "", **law_options):
    """A `Dataset` on ``degree_law_graph(law, num_nodes, seed=seed, **law_options)``: ``features``-wide
    random features, `NUM_CLASSES` random labels, a 50/25/25 random split, all drawn from ``seed``.
    Its name is ``name``, or the law's."""
    from cherry.data import Dataset
    from cherry.data.degree_laws import degree_law_graph

    graph = degree_law_graph(law, num_nodes, seed=seed, **law_options)
    gen = torch.Generator().manual_seed(seed)
    n = graph.num_nodes
    perm = torch.randperm(n, generator=gen)
    return Dataset(name=name or law, graph=graph, features=torch.randn(n, features, generator=gen),
                   labels=torch.randint(0, NUM_CLASSES, (n,), generator=gen), train_idx=perm[: n // 2],
                   valid_idx=perm[n // 2: 3 * n // 4], test_idx=perm[3 * n // 4:], num_classes=NUM_CLASSES)
