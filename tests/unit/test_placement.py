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


def test_features_and_labels_count_towards_the_choice(graph):
    nbytes = graph.nbytes
    assert choose_construction(graph, "cuda", free_bytes=4 * nbytes, extra_bytes=nbytes).where == "device"
    crowded = choose_construction(graph, "cuda", free_bytes=4 * nbytes, extra_bytes=2 * nbytes)
    assert crowded.where == "pinned-host" and crowded.extra_bytes == 2 * nbytes and "features" in crowded.reason
    with pytest.raises(ValueError, match="extra_bytes"):
        choose_construction(graph, "cuda", free_bytes=10, extra_bytes=-1)


def test_place_dataset_on_the_cpu_is_a_no_op():
    from cherry.sampling.placement import place_dataset, resident_bytes

    ds = random_dataset(num_nodes=50, avg_degree=3)
    graph_bytes, extra = resident_bytes(ds)
    assert graph_bytes == ds.graph.nbytes
    assert extra == ds.features.numel() * ds.features.element_size() + ds.labels.numel() * ds.labels.element_size()
    assert place_dataset(ds, choose_construction(ds.graph, "cpu")) is ds
    with pytest.raises(TypeError, match="choice"):
        place_dataset(ds, "device")


class _Capped:
    def __init__(self, capacity_bytes):
        self.capacity_bytes = capacity_bytes


def test_trainer_choice_follows_free_memory_and_a_cap(monkeypatch, synth_tiny):
    """The Trainer's choice on CUDA, with the driver's answers faked (no GPU needed)."""
    from cherry.execution.trainer import _choose
    from cherry.sampling.placement import resident_bytes

    need = sum(resident_bytes(synth_tiny))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100 * need, 200 * need))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: need // 2)
    cuda = torch.device("cuda")
    auto = _choose(synth_tiny, cuda, None, "auto")
    assert auto.where == "device" and auto.free_bytes == 100 * need and auto.extra_bytes > 0
    capped = _choose(synth_tiny, cuda, _Capped(2 * need), "auto")  # the cap leaves 1.5x: under 2x needed
    assert capped.where == "pinned-host" and capped.free_bytes == 2 * need - need // 2
    assert _choose(synth_tiny, cuda, _Capped(2 * need), "device").where == "device"
    assert _choose(synth_tiny, cuda, None, "host").where == "host"
    assert _choose(synth_tiny, torch.device("cpu"), None, "device").where == "host"  # nothing moves


def test_trainer_on_the_cpu_records_host_and_moves_nothing(synth_tiny):
    from cherry.execution import Trainer
    from cherry.spec import make_spec

    spec = make_spec(dataset="synth-tiny", hidden=16, fanouts=(3, 3), batch_size=64, evaluate=False)
    trainer = Trainer(synth_tiny, spec)
    try:
        assert trainer.construction.where == "host" and trainer.data is synth_tiny
        assert trainer.sampler.graph is synth_tiny.graph
    finally:
        trainer.close()
    with pytest.raises(ValueError, match="construction must be"):
        Trainer(synth_tiny, spec, construction="gpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("aggr", ["mean", "lstm"])
def test_device_construction_trains_like_host_construction(synth_tiny, aggr):
    """Graph, features and labels on the device (CUDA sampling and slicing) give the host-built
    batches' losses: the kernels are bit-identical, so only float order can differ."""
    from cherry.execution import Trainer
    from cherry.spec import make_spec

    spec = make_spec(dataset="synth-tiny", aggr=aggr, hidden=16, fanouts=(5, 10), batch_size=256,
                     num_microbatches=3, max_steps_per_epoch=3, evaluate=False, device="cuda")
    losses = {}
    for where in ("host", "device"):
        trainer = Trainer(synth_tiny, spec, construction=where)
        try:
            assert trainer.construction.where == where
            assert trainer.sampler.graph.indptr.is_cuda == (where == "device")
            losses[where] = [s.loss for s in trainer.train_epoch(0)]
        finally:
            trainer.close()
    assert losses["device"] == pytest.approx(losses["host"], rel=1e-4)
