"""Betty and Buffalo as released and as published: Buffalo's chunked bucket, Betty's weighted REG and
its re-split of the largest micro-batch, each keeping the full batch's gradient."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from baselines import system_class
from baselines.betty import reg
from baselines.betty.reg import coneighbour_graph, partition_seeds, rebuild_blocks, resplit_largest
from baselines.buffalo.buckets import bucketize
from cherry.spec import RunSpec, make_spec
from cherry.data import Dataset, Graph
from cherry.sampling import NeighborSampler
from tests.optional import needs_betty_deps
from tests.unit.graphs import random_dataset
from tests.unit.test_baselines_micro import CPU, FakeProbe, batch_seeds, config, grads_of


def assert_same_gradient(grads, reference, what):
    assert all(g is not None for g in reference)
    for g, ref in zip(grads, reference):
        assert float((g - ref).norm()) <= 1e-4 * float(ref.norm()) + 1e-7, what


def dataset_of(src, dst, num_nodes, seed=0):
    g = torch.Generator().manual_seed(seed)
    graph = Graph.from_edges(torch.tensor(src), torch.tensor(dst), num_nodes)
    labels = torch.randint(0, 3, (num_nodes,), generator=g)
    idx = torch.arange(num_nodes)
    return Dataset(name="toy", graph=graph, features=torch.randn(num_nodes, 6, generator=g), labels=labels,
                   train_idx=idx, valid_idx=idx[:0], test_idx=idx[:0], num_classes=3)


def cfg(k, fanouts, options=None, aggr="mean", budget_bytes=None, system="betty") -> RunSpec:
    return make_spec(system=system, dataset="synth-tiny", model="sage", aggr=aggr, num_layers=len(fanouts), hidden=8,
                     heads=1, dropout=0.0, fanouts=tuple(fanouts), batch_size=80, lr=0.01, num_microbatches=k,
                     budget_bytes=budget_bytes, seed=3, options=dict(options or {}))


# -- Buffalo: which bucket is chunked ---------------------------------------------------------------
@pytest.fixture(scope="module")
def degree_one_heavy():
    """Seeds 0..59 have one in-neighbour, seeds 60..79 eight: at fanout 4 the most populous output
    bucket is degree 1 (60 seeds), the fanout bucket degree 4 (20 seeds)."""
    src, dst = [], []
    for s in range(80):
        for j in range(1 if s < 60 else 8):
            src.append(80 + (s * 7 + j * 13) % 40)
            dst.append(s)
    for u in range(80, 120):  # the sources read two seeds each, so the lower layer has edges too
        src += [u % 80, (u * 3) % 80]
        dst += [u, u]
    return dataset_of(src, dst, 120)


def test_bucketize_chunks_the_given_degree_even_when_another_bucket_is_larger():
    degrees = torch.tensor([1] * 50 + [5] * 20 + [3] * 10)[torch.randperm(80, generator=torch.Generator().manual_seed(1))]
    fanout = bucketize(degrees, 4, chunk_degree=5)
    largest = bucketize(degrees, 4)
    assert fanout.big_degree == 5 and largest.big_degree == 1
    assert torch.equal(torch.cat(fanout.chunks), torch.nonzero(degrees == 5).flatten())
    assert torch.equal(torch.cat(largest.chunks), torch.nonzero(degrees == 1).flatten())
    for sched in (fanout, largest):
        assert torch.equal(torch.sort(torch.cat(sched.microbatches)).values, torch.arange(80))
        assert not any(bool((degrees[g] == sched.big_degree).any()) for g in sched.groups)
    # A degree nobody has: empty chunks, the knapsack groups carry every seed.
    none = bucketize(degrees, 3, chunk_degree=7)
    assert all(c.numel() == 0 for c in none.chunks)
    assert torch.equal(torch.sort(torch.cat(none.microbatches)).values, torch.arange(80))
    with pytest.raises(ValueError, match="chunk_degree"):
        bucketize(degrees, 2, chunk_degree=-1)


def test_buffalo_chunks_the_fanout_bucket_by_default_and_the_largest_as_an_option(degree_one_heavy):
    ds = degree_one_heavy
    seeds = torch.arange(80)
    blocks = NeighborSampler(ds.graph, (2, 4)).sample(seeds, torch.Generator().manual_seed(0))
    degrees = blocks.layers[-1].in_degrees()
    assert int((degrees == 1).sum()) == 60 and int((degrees == 4).sum()) == 20
    released = system_class("buffalo")(ds, cfg(3, (2, 4), system="buffalo"), CPU, None, FakeProbe())
    largest = system_class("buffalo")(ds, cfg(3, (2, 4), {"chunk_bucket": "largest"}, system="buffalo"), CPU, None, FakeProbe())
    assert released.schedule(blocks).big_degree == 4
    assert largest.schedule(blocks).big_degree == 1
    _, _, full = grads_of("full", ds, cfg(1, (2, 4), system="full"), seeds)
    for options in ({}, {"chunk_bucket": "largest"}):
        system, out, grads = grads_of("buffalo", ds, cfg(3, (2, 4), options, system="buffalo"), seeds)
        assert out.num_microbatches == 3
        assert_same_gradient(grads, full, options)
    with pytest.raises(ValueError, match="chunk_bucket"):
        system_class("buffalo")(ds, cfg(3, (2, 4), {"chunk_bucket": "smallest"}, system="buffalo"), CPU, None, FakeProbe())


def test_buffalo_all_neighbour_fanout_chunks_the_highest_degree(degree_one_heavy):
    blocks = NeighborSampler(degree_one_heavy.graph, (-1,)).sample(torch.arange(80), torch.Generator())
    system = system_class("buffalo")(degree_one_heavy, cfg(2, (-1,), system="buffalo"), CPU, None, FakeProbe())
    assert system.schedule(blocks).big_degree == 8


# -- Betty: weighted REG ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dataset():
    return random_dataset(num_nodes=300, avg_degree=6, feature_dim=10)


@needs_betty_deps
@pytest.mark.parametrize("weighted", [False, True])
def test_betty_edge_weights_reach_metis_only_when_weighted(dataset, monkeypatch, weighted):
    calls = []
    pymetis, _ = reg.metis_modules()  # imported on first use: the module reg's partition_seeds imports
    real = pymetis.part_graph

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", spy)
    seeds = batch_seeds(dataset)
    blocks = NeighborSampler(dataset.graph, (4, 6)).sample(seeds, torch.Generator().manual_seed(2))
    parts = partition_seeds(blocks.layers[-1], 4, weighted=weighted)
    assert len(calls) == 1
    c = coneighbour_graph(blocks.layers[-1])
    if weighted:
        assert np.array_equal(np.asarray(calls[0]["eweights"]), c.data) and int(c.data.max()) > 1
    else:
        assert calls[0].get("eweights") is None
    assert torch.equal(torch.sort(torch.cat(parts)).values, torch.arange(seeds.numel()))
    # Through the system: the option turns the weights on, off by default (as released).
    calls.clear()
    options = {"weighted_reg": True} if weighted else {}
    system_class("betty")(dataset, cfg(3, (4, 6), options, system="betty"), CPU, None, FakeProbe()).accumulate_gradients(
        seeds, torch.Generator().manual_seed(11))
    assert (calls[0].get("eweights") is not None) == weighted


@needs_betty_deps
def test_weighted_reg_keeps_heavily_sharing_seeds_together_where_unweighted_does_not():
    """Each group of ten seeds (0..9, 10..19) shares one input (45 co-neighbour edges of weight 1 per
    group); each pair (i, i + 10) shares ten (10 edges of weight 10). Fewest cut edges: split the pairs
    (cut 10 edges, weight 100), what unweighted METIS does; least cut weight: keep every pair together
    and halve each group (50 edges, weight 50), what the weighted REG must do."""
    src, dst = [], []
    for s in range(20):
        src.append(20 + s // 10)
        dst.append(s)
        for j in range(10):
            src.append(22 + 10 * (s % 10) + j)
            dst.append(s)
    graph = Graph.from_edges(torch.tensor(src), torch.tensor(dst), 122)
    block = NeighborSampler(graph, (-1,)).sample(torch.arange(20), torch.Generator()).layers[-1]
    unweighted = partition_seeds(block, 2)
    assert sorted(sorted(p.tolist()) for p in unweighted) == [list(range(10)), list(range(10, 20))]
    weighted = partition_seeds(block, 2, weighted=True)
    part_of = {int(s): i for i, p in enumerate(weighted) for s in p}
    assert all(part_of[i] == part_of[i + 10] for i in range(10))
    assert sorted(p.numel() for p in weighted) == [10, 10]


# -- Betty: the re-split of the largest micro-batch -------------------------------------------------
@pytest.fixture(scope="module")
def imbalanced():
    """Seeds 0..9 read 6 private inputs each, seeds 10..19 all read the same 2: splitting by those
    groups gives first-layer inputs of 70 against 12."""
    src, dst = [], []
    for s in range(20):
        inputs = range(20 + 6 * s, 26 + 6 * s) if s < 10 else (80, 81)
        for u in inputs:
            src.append(u)
            dst.append(s)
    return dataset_of(src, dst, 82)


@needs_betty_deps
def test_resplit_splits_the_largest_micro_batch_when_inputs_are_imbalanced(imbalanced):
    blocks = NeighborSampler(imbalanced.graph, (-1,)).sample(torch.arange(20), torch.Generator())
    parts = [torch.arange(10), torch.arange(10, 20)]
    inputs = [rebuild_blocks(blocks, p).layers[0].num_src for p in parts]
    assert inputs == [70, 12]
    assert resplit_largest(blocks, parts, 0) == parts
    once = resplit_largest(blocks, parts, 1)
    assert len(once) == 3 and torch.equal(once[0], parts[1])
    assert torch.equal(torch.sort(torch.cat(once[1:])).values, torch.arange(10))
    assert all(p.numel() in (5,) for p in once[1:])
    assert torch.equal(torch.sort(torch.cat(once)).values, torch.arange(20))
    # Each round halves the largest again while the 1.1x imbalance remains.
    assert len(resplit_largest(blocks, parts, 3)) == 5
    # Balanced micro-batches are left alone (the released code would still split micro-batch 0).
    balanced = [torch.arange(0, 10, 2), torch.arange(1, 10, 2)]
    assert resplit_largest(blocks, balanced, 2) == balanced
    with pytest.raises(ValueError, match="rounds"):
        resplit_largest(blocks, parts, -1)


@needs_betty_deps
def test_betty_resplit_and_weights_keep_the_full_batch_gradient(imbalanced, dataset):
    seeds = torch.arange(20)
    _, _, full = grads_of("full", imbalanced, cfg(1, (-1,), system="full"), seeds)
    _, plain, _ = grads_of("betty", imbalanced, cfg(2, (-1,), system="betty"), seeds)
    _, out, grads = grads_of("betty", imbalanced, cfg(2, (-1,), {"num_re_partition": 1}, system="betty"), seeds)
    assert plain.num_microbatches == 2 and out.num_microbatches == 3
    assert_same_gradient(grads, full, "re-split")
    seeds = batch_seeds(dataset)
    options = {"weighted_reg": True, "num_re_partition": 2}
    _, _, full = grads_of("full", dataset, config("full", k=1, aggr="lstm"), seeds)
    _, out, grads = grads_of("betty", dataset, cfg(4, (4, 6), options, aggr="lstm", system="betty"), seeds)
    assert 4 <= out.num_microbatches <= 6
    assert_same_gradient(grads, full, options)
    for bad in ({"weighted_reg": 1}, {"num_re_partition": -1}, {"num_re_partition": True}, {"resplit": 1}):
        with pytest.raises(ValueError):
            system_class("betty")(dataset, cfg(2, (4, 6), bad, system="betty"), CPU, None, FakeProbe())
