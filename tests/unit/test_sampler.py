"""NeighborSampler and slice_blocks: the Blocks contract, determinism under a generator, native ==
reference, and the central claim that sliced sub-blocks compute exactly the full batch's rows."""
from __future__ import annotations

import pytest
import torch

from cherry.data.graph import Graph
from cherry.ops import reference
from cherry.ops import sampling as ops_sampling
from cherry.sampling import Blocks, NeighborSampler, check_blocks, slice_blocks, slice_blocks_many


def random_graph(seed: int, num_nodes: int = 400, num_edges: int = 5000) -> Graph:
    """Skewed random multigraph with isolated nodes (ids >= 90% of num_nodes get no edges)."""
    gen = torch.Generator().manual_seed(seed)
    active = int(num_nodes * 0.9)
    weights = torch.rand(active, generator=gen) ** 3 + 0.01  # heavy-ish tail of in-degrees
    dst = torch.multinomial(weights, num_edges, replacement=True, generator=gen)
    src = torch.randint(0, active, (num_edges,), generator=gen)
    return Graph.from_edges(src, dst, num_nodes)


def batch(graph: Graph, seed: int, num_seeds: int, fanouts=(4, 3), gen_seed: int = 0) -> Blocks:
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(seed))[:num_seeds]
    return NeighborSampler(graph, fanouts).sample(seeds, torch.Generator().manual_seed(gen_seed))


def blocks_equal(a: Blocks, b: Blocks) -> bool:
    if a.num_layers != b.num_layers:
        return False
    for x, y in zip(a.layers, b.layers):
        if x.num_dst != y.num_dst or not all(
            torch.equal(getattr(x, f), getattr(y, f)) for f in ("src_nodes", "indptr", "indices")
        ):
            return False
    return True


def forward(blocks: Blocks, x_input: torch.Tensor, weights) -> torch.Tensor:
    """Two-plus layers of mean aggregation with random per-feature weights (row-wise exact)."""
    h = x_input
    for block, (w_self, w_neigh) in zip(blocks.layers, weights):
        agg = reference.csr_aggregate(block.indptr, block.indices, h, "mean")
        h = torch.tanh(h[: block.num_dst] * w_self + agg * w_neigh)
    return h


def test_sampler_blocks_contract():
    g = random_graph(0)
    fanouts = (5, 3, -1)
    seeds = torch.tensor([7, 3, 350, 11, 399])  # 399 is isolated
    blocks = NeighborSampler(g, fanouts).sample(seeds, torch.Generator().manual_seed(1))
    check_blocks(blocks)
    assert blocks.num_layers == 3 and torch.equal(blocks.seeds, seeds)
    # a sequence of its layers, as DGL's list of blocks
    assert list(blocks) == list(blocks.layers) and len(blocks) == 3 and blocks[-1] is blocks.layers[-1]
    deg = g.in_degrees()
    for block, fanout in zip(blocks.layers, fanouts):
        want = deg[block.dst_nodes] if fanout < 0 else deg[block.dst_nodes].clamp(max=fanout)
        assert torch.equal(block.in_degrees(), want)
        # Every sampled edge exists: src is among the destination's in-neighbours.
        for i in range(block.num_dst):
            v = int(block.dst_nodes[i])
            nbrs = set(g.indices[g.indptr[v] : g.indptr[v + 1]].tolist())
            assert set(block.src_nodes[block.indices[block.indptr[i] : block.indptr[i + 1]]].tolist()) <= nbrs


def test_same_generator_state_same_blocks():
    g = random_graph(1)
    seeds = torch.arange(0, 300, 7)
    sampler = NeighborSampler(g, [4, 4])
    a = sampler.sample(seeds, torch.Generator().manual_seed(42))
    b = sampler.sample(seeds, torch.Generator().manual_seed(42))
    c = sampler.sample(seeds, torch.Generator().manual_seed(43))
    assert blocks_equal(a, b) and not blocks_equal(a, c)
    gen = torch.Generator().manual_seed(42)
    first, second = sampler.sample(seeds, gen), sampler.sample(seeds, gen)
    assert blocks_equal(first, a) and not blocks_equal(first, second)  # the generator advances


def test_sampler_native_equals_reference(monkeypatch):
    g = random_graph(2)
    seeds = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(0))[:64]
    sampler = NeighborSampler(g, (10, 25))
    native = sampler.sample(seeds, torch.Generator().manual_seed(5))
    full = slice_blocks(native, torch.arange(20, 40))
    monkeypatch.setattr(ops_sampling, "extension_available", lambda: False)
    assert blocks_equal(native, sampler.sample(seeds, torch.Generator().manual_seed(5)))
    ref_slice = slice_blocks(native, torch.arange(20, 40))
    assert blocks_equal(full, ref_slice) and torch.equal(full.input_positions, ref_slice.input_positions)


def test_slice_of_all_seeds_is_the_batch():
    g = random_graph(3)
    blocks = batch(g, seed=0, num_seeds=50, fanouts=(3, 5, 2))
    whole = slice_blocks(blocks, torch.arange(50))
    assert blocks_equal(whole, blocks)
    assert torch.equal(whole.input_positions, torch.arange(blocks.input_nodes.numel()))


@pytest.mark.parametrize("fanouts", [(4, 3), (2, 6, -1), (-1,)])
@pytest.mark.parametrize("parts", [1, 3, 7])
def test_slices_partition_and_reproduce_full_computation(fanouts, parts):
    g = random_graph(4)
    gen = torch.Generator().manual_seed(parts)
    blocks = batch(g, seed=parts, num_seeds=60, fanouts=fanouts)
    x = torch.randn(g.num_nodes, 16, generator=gen, dtype=torch.float64)
    weights = [(torch.randn(16, generator=gen, dtype=torch.float64), torch.randn(16, generator=gen, dtype=torch.float64)) for _ in fanouts]
    full_out = forward(blocks, x[blocks.input_nodes], weights)
    covered = torch.zeros(blocks.num_seeds, dtype=torch.int64)
    for positions in torch.randperm(blocks.num_seeds, generator=gen).tensor_split(parts):
        sub = slice_blocks(blocks, positions)
        check_blocks(sub)
        covered[positions] += 1
        assert torch.equal(sub.seeds, blocks.seeds[positions])
        assert torch.equal(blocks.input_nodes[sub.input_positions], sub.input_nodes)
        out = forward(sub, x[sub.input_nodes], weights)
        assert torch.equal(out, full_out[positions])
        # The features staged once per batch give the same inputs.
        assert torch.equal(forward(sub, x[blocks.input_nodes][sub.input_positions], weights), out)
    assert torch.equal(covered, torch.ones_like(covered))


def test_slice_keeps_parent_edges_in_order():
    g = random_graph(5)
    blocks = batch(g, seed=1, num_seeds=30, fanouts=(3, 3))
    positions = torch.tensor([5, 0, 29])
    sub = slice_blocks(blocks, positions)
    # A destination's global in-neighbour list is identical in the slice and the parent.
    for parent, child in zip(blocks.layers, sub.layers):
        lookup = {int(v): i for i, v in enumerate(parent.dst_nodes)}
        for i, v in enumerate(child.dst_nodes.tolist()):
            j = lookup[v]
            want = parent.src_nodes[parent.indices[parent.indptr[j] : parent.indptr[j + 1]]]
            got = child.src_nodes[child.indices[child.indptr[i] : child.indptr[i + 1]]]
            assert torch.equal(got, want)


def test_sampler_rejects_bad_input():
    g = random_graph(6, num_nodes=50, num_edges=200)
    sampler = NeighborSampler(g, (2, 2))
    gen = torch.Generator()
    with pytest.raises(ValueError, match="seeds must have dtype torch.int64"):
        sampler.sample(torch.tensor([1, 2], dtype=torch.int32), gen)
    with pytest.raises(ValueError, match="seeds must be one-dimensional"):
        sampler.sample(torch.tensor([[1, 2]]), gen)
    with pytest.raises(ValueError, match="seeds must be on device cpu"):
        sampler.sample(torch.tensor([1], device="meta"), gen)
    with pytest.raises(ValueError, match=r"seeds must lie in \[0, 50\)"):
        sampler.sample(torch.tensor([1, 50]), gen)
    with pytest.raises(ValueError, match="seeds must not contain duplicates"):
        sampler.sample(torch.tensor([4, 1, 4]), gen)
    with pytest.raises(ValueError, match="seeds must not be empty"):
        sampler.sample(torch.tensor([], dtype=torch.int64), gen)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        sampler.sample(torch.tensor([1]), 3)
    with pytest.raises(ValueError, match="fanout must be positive or -1"):
        NeighborSampler(g, (2, 0))
    with pytest.raises(ValueError, match="fanout must be positive or -1"):
        NeighborSampler(g, (-2,))
    with pytest.raises(TypeError, match="fanout must be an int"):
        NeighborSampler(g, (2, "5"))
    with pytest.raises(ValueError, match="at least one layer"):
        NeighborSampler(g, ())
    with pytest.raises(TypeError, match="graph must be a cherry.data.Graph"):
        NeighborSampler("graph", (2,))


def test_slice_blocks_rejects_bad_input():
    g = random_graph(7, num_nodes=50, num_edges=200)
    blocks = batch(g, seed=0, num_seeds=10, fanouts=(2, 2))
    with pytest.raises(ValueError, match=r"seed_positions must lie in \[0, 10\)"):
        slice_blocks(blocks, torch.tensor([10]))
    with pytest.raises(ValueError, match="seed_positions must not contain duplicates"):
        slice_blocks(blocks, torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="seed_positions must not be empty"):
        slice_blocks(blocks, torch.tensor([], dtype=torch.int64))
    with pytest.raises(ValueError, match="seed_positions must have dtype torch.int64"):
        slice_blocks(blocks, torch.tensor([1], dtype=torch.int32))
    with pytest.raises(TypeError, match="blocks must be a cherry.sampling.Blocks"):
        slice_blocks(blocks.layers, torch.tensor([1]))


def slices_equal(a: Blocks, b: Blocks) -> bool:
    return blocks_equal(a, b) and torch.equal(a.input_positions, b.input_positions)


@pytest.mark.parametrize("fanouts", [(4, 3), (2, 6, -1)])
def test_slice_blocks_many_equals_one_slice_per_group(fanouts, monkeypatch):
    g = random_graph(9)
    blocks = batch(g, seed=3, num_seeds=40, fanouts=fanouts)
    gen = torch.Generator().manual_seed(4)
    order = torch.randperm(40, generator=gen)
    cases = [
        [order],  # one group: the whole batch, shuffled
        list(order.tensor_split(3)),
        list(order.tensor_split(40)),  # K = number of seeds: single-seed groups
        [order[:5], order[30:31], order[10:20]],  # disjoint, not covering every seed
    ]
    for groups in cases:
        many = slice_blocks_many(blocks, groups)
        assert len(many) == len(groups)
        for grp, sub, unchecked in zip(groups, many, slice_blocks_many(blocks, groups, check=False)):
            check_blocks(sub)
            assert slices_equal(sub, slice_blocks(blocks, grp))
            assert torch.equal(sub.seeds, blocks.seeds[grp])
            assert slices_equal(unchecked, sub)  # the planner's path: the same slices without the checks
    monkeypatch.setattr(ops_sampling, "extension_available", lambda: False)  # the reference op
    for groups in cases:
        for grp, sub, ref_sub in zip(groups, slice_blocks_many(blocks, groups), slice_blocks_many(blocks, tuple(groups))):
            assert slices_equal(sub, ref_sub)


def test_slice_blocks_many_reproduces_full_computation():
    g = random_graph(10)
    gen = torch.Generator().manual_seed(5)
    blocks = batch(g, seed=4, num_seeds=64, fanouts=(3, 4, 2))
    x = torch.randn(g.num_nodes, 8, generator=gen, dtype=torch.float64)
    weights = [(torch.randn(8, generator=gen, dtype=torch.float64), torch.randn(8, generator=gen, dtype=torch.float64)) for _ in range(3)]
    full_out = forward(blocks, x[blocks.input_nodes], weights)
    groups = list(torch.randperm(64, generator=gen).tensor_split(5))
    for positions, sub in zip(groups, slice_blocks_many(blocks, groups)):
        assert torch.equal(forward(sub, x[blocks.input_nodes][sub.input_positions], weights), full_out[positions])


def test_slice_blocks_many_rejects_bad_input():
    g = random_graph(7, num_nodes=50, num_edges=200)
    blocks = batch(g, seed=0, num_seeds=10, fanouts=(2, 2))
    ok = torch.tensor([0, 1])
    cases = [
        ([torch.tensor([0, 1]), torch.tensor([2, 1])], ValueError, "groups must be disjoint: seed position 1 appears 2 times"),
        ([torch.tensor([3, 3])], ValueError, "groups must be disjoint: seed position 3 appears 2 times"),
        ([ok, torch.tensor([], dtype=torch.int64)], ValueError, r"groups\[1\] must not be empty"),
        ([ok, torch.tensor([10])], ValueError, r"seed positions in \[0, 10\), found values in \[0, 10\]"),
        ([torch.tensor([-1])], ValueError, r"seed positions in \[0, 10\)"),
        ([], ValueError, "at least one group"),
        ([ok, torch.tensor([2], dtype=torch.int32)], ValueError, r"groups\[1\] must have dtype torch.int64"),
        ([ok, torch.tensor([[2]])], ValueError, r"groups\[1\] must be one-dimensional"),
        ([ok, [2]], TypeError, r"groups\[1\] must be a torch.Tensor"),
        (torch.tensor([0, 1]), TypeError, "groups must be a list or tuple"),
    ]
    for groups, error, message in cases:
        with pytest.raises(error, match=message) as info:
            slice_blocks_many(blocks, groups)
        assert "\n" not in str(info.value)  # one line
    with pytest.raises(TypeError, match="blocks must be a cherry.sampling.Blocks"):
        slice_blocks_many(blocks.layers, [ok])
    # unchecked, a position out of range is still refused (by the op), never read out of bounds
    with pytest.raises((RuntimeError, IndexError, ValueError)):
        slice_blocks_many(blocks, [ok, torch.tensor([10])], check=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sampler_and_slices_same_on_cuda():
    g = random_graph(8)
    g_cuda = Graph(indptr=g.indptr.cuda(), indices=g.indices.cuda(), num_nodes=g.num_nodes)
    seeds = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(0))[:100]
    cpu = NeighborSampler(g, (5, 10)).sample(seeds, torch.Generator().manual_seed(3))
    gpu = NeighborSampler(g_cuda, (5, 10)).sample(seeds.cuda(), torch.Generator().manual_seed(3))
    assert blocks_equal(cpu, gpu.to("cpu"))
    positions = torch.randperm(100, generator=torch.Generator().manual_seed(1))[:37]
    sub_cpu, sub_gpu = slice_blocks(cpu, positions), slice_blocks(gpu, positions.cuda()).to("cpu")
    assert blocks_equal(sub_cpu, sub_gpu) and torch.equal(sub_cpu.input_positions, sub_gpu.input_positions)
    groups = list(torch.randperm(100, generator=torch.Generator().manual_seed(2)).tensor_split(6))
    for cpu_sub, gpu_sub in zip(slice_blocks_many(cpu, groups), slice_blocks_many(gpu, [p.cuda() for p in groups])):
        assert slices_equal(cpu_sub, gpu_sub.to("cpu"))
