"""Orderings without pymetis or scipy (the GPU machine): METIS's input graph built without scipy, and
the breadth-first ordering that `seed_rank` uses, and reports, where "metis" is asked for and pymetis
is absent."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from cherry.data import Graph
from cherry.models import ModelSpec
from cherry.planning import MemoryModel, plan_microbatches, seed_rank
from cherry.planning.ordering import locality_rank, resolve_ordering, symmetric_csr
from cherry.sampling import NeighborSampler
from tests.optional import importable
from tests.unit.graphs import random_dataset


def clustered_graph(n=1200, clusters=12, seed=0) -> Graph:
    """Dense clusters scattered over the node ids (as in test_planning's METIS test), made undirected."""
    g = torch.Generator().manual_seed(seed)
    cluster = torch.randperm(n, generator=g) % clusters
    src = torch.randint(0, n, (n * 8,), generator=g)
    sizes = torch.bincount(cluster, minlength=clusters)
    members = torch.argsort(cluster, stable=True)
    starts = torch.cumsum(sizes, 0) - sizes
    pick = (torch.rand(src.numel(), generator=g) * sizes[cluster[src]]).long()
    dst = members[starts[cluster[src]] + pick]
    return Graph.from_edges(torch.cat([src, dst]), torch.cat([dst, src]), n)


@pytest.mark.skipif(not importable("scipy.sparse"), reason="compares with scipy's result")
def test_metis_input_graph_without_scipy_is_scipys(monkeypatch):
    graph = random_dataset(num_nodes=300, avg_degree=6).graph  # directed, with isolated nodes
    ref_indptr, ref_indices = symmetric_csr(graph)
    monkeypatch.setitem(sys.modules, "scipy.sparse", None)  # `import scipy.sparse` now fails
    indptr, indices = symmetric_csr(graph)
    assert indptr.dtype == indices.dtype == np.int64
    assert np.array_equal(indptr, ref_indptr)
    for v in range(graph.num_nodes):  # the same neighbours; scipy leaves them unsorted
        row = indices[indptr[v]:indptr[v + 1]]
        assert np.array_equal(row, np.sort(ref_indices[ref_indptr[v]:ref_indptr[v + 1]])) and v not in row


def test_bfs_order_is_a_deterministic_permutation_with_isolated_nodes_last():
    ds = random_dataset(num_nodes=400, avg_degree=6, isolated=5)
    rank = locality_rank(ds.graph, "bfs")
    assert torch.equal(torch.sort(rank).values, torch.arange(400))
    assert torch.equal(rank, locality_rank(ds.graph, "bfs", seed=7))
    isolated = torch.nonzero(ds.graph.in_degrees() == 0).squeeze(1)
    assert isolated.numel() >= 5
    assert torch.equal(torch.sort(rank[isolated]).values, torch.arange(400 - isolated.numel(), 400))
    # two components: each is one contiguous range of ranks, the one holding node 0 first
    two = Graph.from_edges(torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([2, 4, 0, 5, 1, 3]), 6)
    order = torch.argsort(locality_rank(two, "bfs")).tolist()
    assert order == [0, 2, 1, 4, 3, 5]


def test_bfs_order_lowers_redundancy_against_random():
    graph = clustered_graph()
    blocks = NeighborSampler(graph, [5, 5]).sample(torch.arange(0, 1200, 2), torch.Generator().manual_seed(1))
    mm = MemoryModel.for_model(ModelSpec("sage", 8, 8, 2, 2))
    red = {m: plan_microbatches(blocks, mm, num_microbatches=8, seed_rank=locality_rank(graph, m),
                                refine=False).redundancy[0] for m in ("bfs", "random")}
    assert red["bfs"] < 0.9 * red["random"], red


def test_without_pymetis_metis_resolves_to_bfs_and_seed_rank_uses_it(monkeypatch):
    ds = random_dataset(num_nodes=200, seed=3)
    assert resolve_ordering("random") == "random" and resolve_ordering("none") == "none"
    with pytest.raises(ValueError, match="ordering"):
        resolve_ordering("spectral")
    monkeypatch.setitem(sys.modules, "pymetis", None)
    assert resolve_ordering("metis") == "bfs"
    assert torch.equal(seed_rank(ds, "metis", 0), locality_rank(ds.graph, "bfs"))
    with pytest.raises(ImportError):  # asked for by name, METIS itself does not fall back
        locality_rank(ds.graph, "metis", nodes_per_part=50)
