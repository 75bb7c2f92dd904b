"""`grow_groups`, `group_shapes` and `group_shapes_many`: native equals the reference, groups partition
the seeds and are non-empty and weight-balanced, shapes equal the sliced micro-batches', and bad input
is refused."""
from __future__ import annotations

import os

import pytest
import torch

from cherry.data.degree_laws import degree_law_graph
from cherry.ops import extension_available, extension_status
from cherry.ops import reference_planning as ref
from cherry.ops.planning import grow_groups, group_shapes, group_shapes_many
from cherry.sampling import NeighborSampler, slice_blocks_many

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]),
]
native_only = pytest.mark.skipif(os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"),
                                 reason="native extension disabled by CHERRY_NO_EXT")


@pytest.fixture(scope="module")
def blocks():
    graph = degree_law_graph("chung-lu", 3000, seed=3)
    gen = torch.Generator().manual_seed(4)
    return NeighborSampler(graph, [5, 8]).sample(torch.randperm(3000, generator=gen)[:500], gen)


def _grow_args(blocks, k, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = blocks.num_seeds
    order = torch.randperm(n, generator=gen)[: n - 9]  # a subset, as when re-planning
    weights = torch.rand(order.numel(), dtype=torch.float64, generator=gen) + 0.5
    top = blocks.layers[-1]
    return top.indptr.to(device), top.indices.to(device), order.to(device), weights.to(device), k


@native_only
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_grow_native_equals_reference(blocks, device, k):
    assert extension_available(), extension_status()
    args = _grow_args(blocks, k, device)
    got = torch.ops.cherry.grow_groups(*args)
    want = ref.grow_groups(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("k", [2, 7, 16])
def test_grown_groups_are_nonempty_and_balanced(blocks, k):
    indptr, indices, order, weights, _ = _grow_args(blocks, k)
    labels = grow_groups(indptr, indices, order, weights, k)
    assert labels.shape == order.shape and int(labels.min()) == 0 and int(labels.max()) == k - 1
    assert int(torch.bincount(labels, minlength=k).min()) >= 1
    loads = torch.bincount(labels, weights=weights, minlength=k)
    # every group but the last stops at the first seed that reaches the target
    assert float(loads[:-1].max()) <= float(weights.sum()) / k + float(weights.max()) + 1e-9


def test_grow_beats_contiguous_on_heavy_tailed_batch():
    """On a heavy-tailed graph (node ids random: the given order carries no locality), the grown groups
    hold fewer summed input nodes than contiguous chunks of the same order."""
    graph = degree_law_graph("barabasi-albert", 20000, seed=5)
    gen = torch.Generator().manual_seed(6)
    b = NeighborSampler(graph, [10, 25]).sample(torch.randperm(20000, generator=gen)[:1024], gen)
    n, k = b.num_seeds, 8
    order = torch.arange(n)
    weights = torch.ones(n, dtype=torch.float64)
    grown = grow_groups(b.layers[-1].indptr, b.layers[-1].indices, order, weights, k)
    contiguous = torch.arange(n) * k // n
    inputs = lambda lab: sum(p.layers[0].num_src for p in slice_blocks_many(b, [order[lab == g] for g in range(k)]))  # noqa: E731
    assert inputs(grown) < 0.97 * inputs(contiguous)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_group_shapes_equal_sliced_and_reference(blocks, device, k):
    gen = torch.Generator().manual_seed(k)
    positions = torch.randperm(blocks.num_seeds, generator=gen)[:-5]
    groups = torch.randint(0, k, (positions.numel(),), generator=gen)
    groups[:k] = torch.arange(k)
    parts = slice_blocks_many(blocks, [positions[groups == g] for g in range(k)])
    want = torch.tensor([[[b.num_src, b.num_dst, b.num_edges] for b in p.layers] for p in parts])
    layers = blocks.layers
    args = ([b.indptr.to(device) for b in layers], [b.indices.to(device) for b in layers], positions.to(device),
            groups.to(device), k)
    assert torch.equal(group_shapes(*args).cpu(), want)
    cpu_args = ([b.indptr for b in layers], [b.indices for b in layers], positions, groups, k)
    assert torch.equal(ref.group_shapes(*cpu_args), want)


def _sliced_shapes(blocks, positions, groups, k):
    """[K, L, 3] counts of each group's slices (zeros for an empty group)."""
    held = [g for g in range(k) if bool((groups == g).any())]
    parts = dict(zip(held, slice_blocks_many(blocks, [positions[groups == g] for g in held])))
    return torch.tensor([[[b.num_src, b.num_dst, b.num_edges] for b in parts[g].layers] if g in parts
                         else [[0, 0, 0]] * len(blocks.layers) for g in range(k)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [1, 3, 8, 9, 16, 21, 33, 64, 65, 130])
def test_group_shapes_many_equal_every_row_sliced(device, k):
    """Every row of a [C, n] labelling counts what its slices hold, for K in every mask width of the
    CPU kernel (several labellings per 8-, 16-, 32- and 64-bit word, one per pass, and the stamp walk
    above 64 groups), on three layers, with a group left empty and positions a subset of the seeds."""
    graph = degree_law_graph("barabasi-albert", 2000, seed=5)
    gen = torch.Generator().manual_seed(k)
    blocks = NeighborSampler(graph, [3, 4, 5]).sample(torch.randperm(2000, generator=gen)[:300], gen)
    positions = torch.randperm(blocks.num_seeds, generator=gen)[:-7]
    rows = torch.randint(0, k, (5, positions.numel()), generator=gen)
    rows[:, :k] = torch.arange(k)[: positions.numel()]
    if k > 1:
        rows[1][rows[1] == k - 1] = 0  # group k - 1 empty in row 1
    want = torch.stack([_sliced_shapes(blocks, positions, row, k) for row in rows])
    layers = blocks.layers
    args = ([b.indptr.to(device) for b in layers], [b.indices.to(device) for b in layers], positions.to(device),
            rows.to(device), k, layers[0].num_src)
    assert torch.equal(group_shapes_many(*args).cpu(), want)
    cpu_args = ([b.indptr for b in layers], [b.indices for b in layers], positions, rows, k, layers[0].num_src)
    assert torch.equal(ref.group_shapes_many(*cpu_args), want)
    assert torch.equal(group_shapes(*cpu_args[:3], rows[0], k), want[0])


def test_bad_input_is_refused(blocks):
    indptr, indices, order, weights, _ = _grow_args(blocks, 2)
    with pytest.raises(ValueError, match="num_groups"):
        grow_groups(indptr, indices, order, weights, order.numel() + 1)
    with pytest.raises(ValueError, match="weights"):
        grow_groups(indptr, indices, order, weights.float(), 2)
    with pytest.raises(ValueError, match="duplicates"):
        grow_groups(indptr, indices, torch.cat([order[:1], order[:-1]]), weights, 2)
    with pytest.raises(TypeError, match="num_groups"):
        grow_groups(indptr, indices, order, weights, 2.0)
    layers = blocks.layers
    ips, inds = [b.indptr for b in layers], [b.indices for b in layers]
    with pytest.raises(ValueError, match="groups must lie"):
        group_shapes(ips, inds, order, torch.full_like(order, 3), 2)
    with pytest.raises(ValueError, match="one entry per position"):
        group_shapes(ips, inds, order, order[:-1] * 0, 2)
    num_inputs = layers[0].num_src
    with pytest.raises(ValueError, match="num_inputs"):
        group_shapes_many(ips, inds, order, (order * 0).unsqueeze(0), 2, num_inputs - 1)
    with pytest.raises(ValueError, match=r"\[C, "):
        group_shapes_many(ips, inds, order, order * 0, 2, num_inputs)
    with pytest.raises(ValueError, match="groups must lie"):
        group_shapes_many(ips, inds, order, torch.stack([order * 0, torch.full_like(order, 2)]), 2, num_inputs)
