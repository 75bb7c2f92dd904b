"""Micro-batching baselines: Betty's METIS parts, Buffalo's buckets, gradient equivalence, naive, full."""
from __future__ import annotations

import contextlib

import pytest
import torch

from baselines import system_class
from baselines.betty.reg import coneighbour_graph, lstm_estimate_bytes, partition_seeds, rebuild_blocks
from baselines.buffalo.buckets import bucketize, seed_cost_bytes
from cherry.data import Graph
from cherry.probe import PHASES
from cherry.sampling import LoadedBatch, NeighborSampler, slice_blocks
from cherry.spec import RunSpec, make_spec
from cherry.systems import is_whole_batch
from tests.optional import BETTY, HAS_BETTY_DEPS, needs_betty_deps
from tests.unit.graphs import random_dataset

OWN = ("full", "naive", *(("betty",) if HAS_BETTY_DEPS else ()), "buffalo")  # betty needs pymetis
CPU = torch.device("cpu")


class FakeProbe:
    """Records phase names; measures nothing."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def phase(self, name: str):
        self.names.append(name)
        return contextlib.nullcontext()


def config(system, k=4, aggr="mean", dropout=0.0, lr=0.01, fanouts=(4, 6), **changes) -> RunSpec:
    """The run spec of ``system`` (a whole-batch system takes K = 1: the spec rejects any other K).
    The dataset name only has to be valid: the systems train the dataset object they are given."""
    if is_whole_batch(system):
        k = 1
    values = dict(system=system, dataset="synth-tiny", model="sage", aggr=aggr, num_layers=len(fanouts), hidden=8,
                  heads=1, dropout=dropout, fanouts=tuple(fanouts), batch_size=120, lr=lr, num_microbatches=k,
                  budget_bytes=None, seed=3)
    values.update(changes)
    return make_spec(**values)


def step_batch(seeds, generator) -> LoadedBatch:
    return LoadedBatch(0, seeds, generator)


@pytest.fixture(scope="module")
def dataset():
    return random_dataset(num_nodes=300, avg_degree=6, feature_dim=10)


def batch_seeds(dataset, n=120):
    # Include the isolated (zero in-degree) nodes: Buffalo's artifact would drop them.
    isolated = torch.arange(dataset.graph.num_nodes - 5, dataset.graph.num_nodes)
    others = dataset.train_idx[~torch.isin(dataset.train_idx, isolated)]
    return torch.cat([others[: n - 5], isolated])


def grads_of(name, dataset, cfg, seeds, sample_seed=11):
    if cfg.system != name:
        cfg = config(name, k=cfg.num_microbatches, aggr=cfg.aggr, dropout=cfg.dropout, lr=cfg.lr, fanouts=cfg.fanouts)
    system = system_class(name)(dataset, cfg, CPU, None, FakeProbe())
    outcome = system.accumulate_gradients(seeds, torch.Generator().manual_seed(sample_seed))
    return system, outcome, system.gradients()


# -- Betty ------------------------------------------------------------------------------------------
def two_cliques_block(seed_order: torch.Tensor):
    """Seeds 0..9 all read sources 20..24, seeds 10..19 all read 25..29: two co-neighbour cliques."""
    src, dst = [], []
    for s in range(20):
        for u in (range(20, 25) if s < 10 else range(25, 30)):
            src.append(u)
            dst.append(s)
    graph = Graph.from_edges(torch.tensor(src), torch.tensor(dst), 30)
    return NeighborSampler(graph, (-1,)).sample(seed_order, torch.Generator().manual_seed(0))


@needs_betty_deps
def test_betty_metis_separates_two_cliques_exactly():
    seeds = torch.randperm(20, generator=torch.Generator().manual_seed(5))
    blocks = two_cliques_block(seeds)
    c = coneighbour_graph(blocks.layers[-1]).toarray()
    group = (seeds < 10).numpy()
    same = group[:, None] == group[None, :]
    assert (c.diagonal() == 0).all()
    assert (c[same & ~torch.eye(20, dtype=torch.bool).numpy()] == 5).all() and (c[~same] == 0).all()
    parts = partition_seeds(blocks.layers[-1], 2)
    assert len(parts) == 2
    found = sorted(sorted(seeds[p].tolist()) for p in parts)
    assert found == [list(range(10)), list(range(10, 20))]


@needs_betty_deps
@pytest.mark.parametrize("k", [1, 3, 7])
def test_betty_parts_cover_each_seed_once_and_rebuild_is_exact(dataset, k):
    seeds = batch_seeds(dataset)
    blocks = NeighborSampler(dataset.graph, (4, 6)).sample(seeds, torch.Generator().manual_seed(2))
    parts = partition_seeds(blocks.layers[-1], k)
    assert 1 <= len(parts) <= k
    assert torch.equal(torch.sort(torch.cat(parts)).values, torch.arange(seeds.numel()))
    for p in parts:
        mine, native = rebuild_blocks(blocks, p), slice_blocks(blocks, p)
        assert torch.equal(mine.input_positions, native.input_positions)
        for a, b in zip(mine.layers, native.layers):
            assert a.num_dst == b.num_dst
            for name in ("src_nodes", "indptr", "indices"):
                assert torch.equal(getattr(a, name), getattr(b, name)), name


@needs_betty_deps
def test_betty_reports_lstm_estimate_and_redundancy(dataset):
    seeds = batch_seeds(dataset)
    cfg = config("betty", k=3, aggr="lstm")
    system, outcome, _ = grads_of("betty", dataset, cfg, seeds)
    blocks = NeighborSampler(dataset.graph, cfg.fanouts).sample(seeds, torch.Generator().manual_seed(11))
    mbs = [rebuild_blocks(blocks, p) for p in partition_seeds(blocks.layers[-1], 3)]
    assert system.spec is cfg and system.model_spec == cfg.model_spec(dataset)
    dims = system.model_spec.layer_dims()
    expected = max(sum(b.num_edges * d.aggregate_dim * 18 * 4 for b, d in zip(mb.layers, dims)) for mb in mbs)
    assert outcome.estimated_peak_bytes == expected
    assert expected == max(lstm_estimate_bytes(tuple(b.num_edges for b in mb.layers), system.model_spec) for mb in mbs)
    for l, r in enumerate(outcome.redundancy):
        assert r == pytest.approx(sum(mb.layers[l].num_src for mb in mbs) / blocks.layers[l].num_src)
    assert all(r >= 1.0 for r in outcome.redundancy)
    assert outcome.redundancy[0] > 1.0  # splitting a batch repeats shared inputs
    _, mean_outcome, _ = grads_of("betty", dataset, config("betty", k=3), seeds)
    assert mean_outcome.estimated_peak_bytes is None


# -- Buffalo ----------------------------------------------------------------------------------------
def skewed_degrees(n=1000, fanout=10, share=0.8, seed=0):
    g = torch.Generator().manual_seed(seed)
    low = torch.randint(0, fanout, (n,), generator=g)
    return torch.where(torch.rand(n, generator=g) < share, torch.full((n,), fanout), low)


@pytest.mark.parametrize("k", [1, 4, 7])
def test_buffalo_buckets_by_degree_and_splits_the_big_bucket_contiguously(k):
    deg = skewed_degrees()
    sched = bucketize(deg, k, bytes_per_degree=72 * 16)
    assert sched.big_degree == 10
    assert len(sched.chunks) == len(sched.groups) == len(sched.microbatches) == k
    big = torch.nonzero(deg == 10).flatten()
    assert torch.equal(torch.cat(sched.chunks), big)  # contiguous runs, in seed order
    sizes = [c.numel() for c in sched.chunks]
    assert max(sizes) - min(sizes) <= 1
    for c, g, mb in zip(sched.chunks, sched.groups, sched.microbatches):
        assert bool((deg[c] == 10).all()) and not bool((deg[g] == 10).any())
        assert torch.equal(mb, torch.cat([c, g]))
    # Every seed exactly once, the zero-degree ones included.
    assert torch.equal(torch.sort(torch.cat(sched.microbatches)).values, torch.arange(deg.numel()))
    assert int((deg == 0).sum()) > 0


@pytest.mark.parametrize("k,share", [(2, 0.8), (4, 0.8), (8, 0.5), (5, 0.1)])
def test_buffalo_groups_are_balanced_by_estimated_memory(k, share):
    deg = skewed_degrees(n=2000, share=share, seed=k)
    sched = bucketize(deg, k, bytes_per_degree=5)
    est = torch.tensor(sched.estimated_bytes, dtype=torch.float64)
    assert est.sum() == float(seed_cost_bytes(deg, 5).sum())
    assert float(est.max() / est.mean()) <= 1.05
    # The knapsack packs alone are balanced too (each of the first K - 1 within capacity).
    costs = [float(seed_cost_bytes(deg[g], 5).sum()) for g in sched.groups]
    capacity = sum(costs) / k
    assert all(c <= capacity + 1e-9 for c in costs[:-1])


def test_buffalo_keeps_zero_degree_seeds_in_its_micro_batches(dataset):
    seeds = batch_seeds(dataset)
    system = system_class("buffalo")(dataset, config("buffalo", k=3), CPU, None, FakeProbe())
    blocks = system.sampler.sample(seeds, torch.Generator().manual_seed(4))
    sched = system.schedule(blocks)
    covered = torch.cat(sched.microbatches)
    zero = torch.nonzero(blocks.layers[-1].in_degrees() == 0).flatten()
    assert zero.numel() >= 5 and bool(torch.isin(zero, covered).all())
    assert covered.numel() == seeds.numel()


def test_bucketize_rejects_bad_input():
    with pytest.raises(ValueError, match="num_microbatches"):
        bucketize(torch.tensor([1, 2]), 0)
    with pytest.raises(ValueError, match="degrees"):
        bucketize(torch.tensor([-1, 2]), 2)


# -- gradients, equivalence and the systems --------------------------------------------------------
def relative_error(grads, reference):
    num = sum(float((a - b).double().norm() ** 2) for a, b in zip(grads, reference))
    den = sum(float(b.double().norm() ** 2) for b in reference)
    return (num / den) ** 0.5


@needs_betty_deps
@pytest.mark.parametrize("aggr", ["mean", "lstm"])
def test_betty_and_buffalo_accumulate_the_full_batch_gradient(dataset, aggr):
    seeds = batch_seeds(dataset)
    cfg = config("betty", k=4, aggr=aggr)
    _, full_out, full = grads_of("full", dataset, cfg, seeds)
    assert all(g is not None for g in full)
    for name in ("betty", "buffalo"):
        _, out, grads = grads_of(name, dataset, cfg, seeds)
        assert out.num_microbatches == 4
        for g, ref in zip(grads, full):
            assert float((g - ref).norm()) <= 1e-4 * float(ref.norm()) + 1e-7, name
        assert out.loss == pytest.approx(full_out.loss, rel=1e-5)
    _, naive_out, naive = grads_of("naive", dataset, cfg, seeds)
    assert naive_out.num_microbatches == 4
    assert relative_error(naive, full) > 1e-3  # independent sampling: not the same batch


def test_every_system_starts_from_the_same_weights_and_steps(dataset):
    seeds = batch_seeds(dataset)
    first = None
    for name in OWN:
        probe = FakeProbe()
        system = system_class(name)(dataset, config(name, k=3, dropout=0.5), CPU, None, probe)
        assert system.name == name
        weights = [p.detach().clone() for p in system.model.parameters()]
        if first is None:
            first = weights
        assert all(torch.equal(a, b) for a, b in zip(weights, first)), name
        outcome = system.step(step_batch(seeds, torch.Generator().manual_seed(1)))
        assert outcome.loss > 0 and outcome.num_microbatches == (1 if name == "full" else 3)
        assert len(outcome.redundancy) == 2
        assert any(not torch.equal(p, w) for p, w in zip(system.model.parameters(), weights)), name
        assert set(probe.names) <= set(PHASES)
        assert {"sample", "gather", "forward_backward", "optimizer"} <= set(probe.names)
        if name in ("betty", "buffalo"):
            assert probe.names.count("plan") == 1 and probe.names.count("slice") == 3
        if name == "naive":
            assert probe.names.count("sample") == 3
        accs = system.evaluate()
        assert set(accs) == {"train", "valid", "test"} and all(0.0 <= a <= 1.0 for a in accs.values())


@pytest.mark.parametrize("name", ["naive", BETTY, "buffalo"])
def test_k_is_fixed_or_auto(dataset, name):
    cls = system_class(name)
    assert cls.accepts_auto_microbatches
    assert cls(dataset, config(name, k=None), CPU, None, FakeProbe()).num_microbatches is None
    for bad in (0, True, 2.0):  # the spec rejects them before any system is built
        with pytest.raises(ValueError, match="num_microbatches"):
            config(name, k=bad)


def test_bad_config_and_seeds_are_rejected(dataset):
    # what the systems checked themselves is now checked, once, by the spec (a SpecError is a ValueError)
    with pytest.raises(ValueError, match="fanouts"):
        config("betty", num_layers=3)
    with pytest.raises(ValueError, match="options"):
        config("full", options={"x": 1})
    with pytest.raises(ValueError, match="num_microbatches"):
        make_spec(system="full", dataset="synth-tiny", fanouts=(4, 6), batch_size=120, num_microbatches=4)
    for name in OWN:
        with pytest.raises(TypeError, match="RunSpec"):
            system_class(name)(dataset, config(name).to_dict(), CPU, None, FakeProbe())
    system = system_class("full")(dataset, config("full"), CPU, None, FakeProbe())
    with pytest.raises(ValueError, match="seeds"):
        system.step(step_batch(torch.tensor([0, 10_000]), torch.Generator()))
    with pytest.raises(ValueError, match="unknown baseline"):
        system_class("nope")
