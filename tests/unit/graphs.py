"""Small random datasets for engine tests (no files; built in memory in milliseconds)."""
from __future__ import annotations

import torch

from cherry.data import Dataset, Graph


def random_dataset(num_nodes: int = 400, avg_degree: int = 8, feature_dim: int = 12, num_classes: int = 4,
                   seed: int = 0, isolated: int = 5) -> Dataset:
    """A clustered random graph with heavy-ish tails; the last ``isolated`` nodes have no in-edges."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (num_nodes,), generator=g)
    num_edges = num_nodes * avg_degree
    weights = torch.rand(num_nodes, generator=g) ** 3 + 0.05  # skewed: hubs
    src = torch.multinomial(weights, num_edges, replacement=True, generator=g)
    dst = torch.randint(0, num_nodes - isolated, (num_edges,), generator=g)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    graph = Graph.from_edges(src, dst, num_nodes)
    centers = torch.randn(num_classes, feature_dim, generator=g)
    features = (centers[labels] + torch.randn(num_nodes, feature_dim, generator=g)).float()
    perm = torch.randperm(num_nodes, generator=g)
    n_train, n_valid = num_nodes // 2, num_nodes // 4
    return Dataset(
        name="random", graph=graph, features=features, labels=labels,
        train_idx=perm[:n_train], valid_idx=perm[n_train:n_train + n_valid], test_idx=perm[n_train + n_valid:],
        num_classes=num_classes,
    )
