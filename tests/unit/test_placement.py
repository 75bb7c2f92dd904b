"""Device-resident vs pinned-host construction: the choice follows graph bytes and free memory."""
from __future__ import annotations

import pytest
import torch

from cherry.sampling.placement import choose_construction, place_graph
from tests.unit.graphs import random_dataset


@pytest.fixture(scope="module")
def graph():
    return random_dataset(num_nodes=200, avg_degree=4).graph


def test_choice_follows_bytes_and_free_memory(graph):
    nbytes = graph.nbytes
    assert nbytes == (graph.indptr.numel() + graph.indices.numel()) * 8
    assert choose_construction(graph, "cuda", free_bytes=4 * nbytes).where == "device"
    assert choose_construction(graph, "cuda", free_bytes=nbytes).where == "pinned-host"  # headroom 0.5
    assert choose_construction(graph, "cuda", free_bytes=nbytes, headroom=0.0).where == "device"
    cpu = choose_construction(graph, "cpu")
    assert cpu.where == "host" and place_graph(graph, cpu) is graph
    assert set(cpu.as_dict()) >= {"where", "graph_bytes", "free_bytes", "reason"}


@pytest.mark.parametrize("kwargs,match", [(dict(headroom=1.0), "headroom"), (dict(free_bytes=-1), "free_bytes"),
                                          (dict(device="meta"), "device")])
def test_bad_input_is_refused(graph, kwargs, match):
    args = dict(device="cuda", free_bytes=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        choose_construction(graph, **args)


def test_graph_and_dataset_move():
    ds = random_dataset(num_nodes=50, avg_degree=3)
    moved = ds.to("cpu", features=False)
    assert torch.equal(moved.graph.indices, ds.graph.indices) and moved.features is ds.features


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_placed_graph_samples_like_the_host_graph(graph):
    from cherry.sampling import NeighborSampler

    choice = choose_construction(graph, "cuda")
    placed = place_graph(graph, choice)
    assert choice.where == "device" and placed.indptr.is_cuda
    seeds = torch.arange(20)
    host = NeighborSampler(graph, [3, 3]).sample(seeds, torch.Generator().manual_seed(1))
    dev = NeighborSampler(placed, [3, 3]).sample(seeds.cuda(), torch.Generator().manual_seed(1))
    for a, b in zip(host.layers, dev.layers):
        assert torch.equal(a.indices, b.indices.cpu()) and torch.equal(a.src_nodes, b.src_nodes.cpu())
    pinned = place_graph(graph, choose_construction(graph, "cuda", free_bytes=0))
    assert pinned.indptr.is_pinned()
