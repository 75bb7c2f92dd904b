"""`refine_groups` and `refine_groups_many`: native equals the reference bit for bit, every move lowers
the input count, the weight cap holds, groups stay non-empty, and bad input is refused."""
from __future__ import annotations

import os

import pytest
import torch

from cherry.data.degree_laws import degree_law_graph
from cherry.ops import extension_available, extension_status
from cherry.ops import reference_planning as ref
from cherry.ops.planning import refine_groups, refine_groups_many
from cherry.sampling import NeighborSampler, slice_blocks_many

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]),
]


@pytest.fixture(scope="module")
def blocks():
    graph = degree_law_graph("barabasi-albert", 3000, seed=1)
    gen = torch.Generator().manual_seed(2)
    return NeighborSampler(graph, [4, 6, 8]).sample(torch.randperm(3000, generator=gen)[:400], gen)


def _args(blocks, k, device="cpu", slack=1.1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = blocks.num_seeds
    positions = torch.randperm(n, generator=gen)[: n - 7]  # a subset, as when re-planning
    groups = torch.arange(positions.numel()) % k
    weights = torch.rand(positions.numel(), dtype=torch.float64, generator=gen) + 0.5
    cap = float(torch.bincount(groups, weights=weights, minlength=k).max()) * slack
    layers = blocks.layers
    return ([b.indptr.to(device) for b in layers], [b.indices.to(device) for b in layers], positions.to(device),
            groups.to(device), weights.to(device), k, layers[0].num_src, cap, 4)


def _inputs(blocks, positions, groups, k):
    parts = slice_blocks_many(blocks, [positions[groups == g] for g in range(k)])
    return sum(p.layers[0].num_src for p in parts)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [2, 3, 8])
def test_native_equals_reference(blocks, device, k):
    if os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"):
        pytest.skip("native extension disabled by CHERRY_NO_EXT")
    assert extension_available(), extension_status()
    args = _args(blocks, k, device)
    got = torch.ops.cherry.refine_groups(*args)
    want = ref.refine_groups(*[a.cpu() if isinstance(a, torch.Tensor) else [t.cpu() for t in a] if isinstance(a, list) else a
                               for a in args])
    assert torch.equal(got.cpu(), want)
    assert not torch.equal(want, args[3].cpu()), "the test batch should allow some moves"


def test_reach_is_the_micro_batch_inputs(blocks):
    """The union of a group's reaches is exactly its sliced micro-batch's input nodes."""
    layers = blocks.layers
    positions = torch.tensor([3, 17, 40, 41])
    ptr, pos = ref.reaches([b.indptr for b in layers], [b.indices for b in layers], positions, layers[0].num_src)
    (mb,) = slice_blocks_many(blocks, [positions])
    assert torch.equal(torch.unique(pos), torch.sort(mb.input_positions).values)
    assert ptr.numel() == 5 and int(ptr[-1]) == pos.numel()


@pytest.mark.parametrize("k", [2, 5])
def test_moves_lower_inputs_and_respect_the_cap(blocks, k):
    args = _args(blocks, k)
    positions, groups, weights, cap = args[2], args[3], args[4], args[7]
    new = refine_groups(*args)
    assert _inputs(blocks, positions, new, k) < _inputs(blocks, positions, groups, k)
    assert torch.bincount(new, minlength=k).min() >= 1
    assert float(torch.bincount(new, weights=weights, minlength=k).max()) <= cap
    # no slack and zero passes: nothing may move
    assert torch.equal(refine_groups(*args[:8], 0), groups)


def test_bad_input_is_refused(blocks):
    args = list(_args(blocks, 3))
    bad = [(2, args[2].float(), ValueError, "positions must have dtype"),
           (3, torch.zeros_like(args[3]), ValueError, "every one of the 3 groups"),
           (4, args[4].float(), ValueError, "weights must be a float64"),
           (5, 0, ValueError, "num_groups must be >= 1"),
           (8, -1, ValueError, "num_passes must be >= 0")]
    for index, value, error, message in bad:
        call = list(args)
        call[index] = value
        with pytest.raises(error, match=message):
            refine_groups(*call)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [2, 8, 5, 70])
def test_many_starts_equal_single_refinements_and_count_inputs(blocks, device, k):
    """Every row of `refine_groups_many` is `refine_groups` of that start under its cap (native and
    reference), its input count is the sliced micro-batches', and an impossible cap only counts: in a
    cohort with a refined row (row 2) and alone (row 3: the CPU kernel's bit-mask count for K <= 64,
    its count array above)."""
    args = _args(blocks, k, device)
    ips, inds, positions, groups, weights, _, num_inputs, cap, passes = args
    other = torch.roll(groups, 3)
    starts = torch.stack([groups, other, groups, torch.roll(groups, 5)])
    caps = [cap, cap * 1.3, float("-inf"), float("-inf")]
    got, inputs = refine_groups_many(ips, inds, positions, starts, weights, k, num_inputs, caps, passes)
    for row, start, c in zip(got, starts, caps):
        assert torch.equal(row, refine_groups(ips, inds, positions, start, weights, k, num_inputs, c, passes))
    assert torch.equal(got[2], groups) and torch.equal(got[3], starts[3])
    cpu = lambda t: t.cpu()  # noqa: E731
    want = [_inputs(blocks, cpu(positions), cpu(row), k) for row in got]
    assert inputs.cpu().tolist() == want
    ref_rows, ref_inputs = ref.refine_groups_many([cpu(t) for t in ips], [cpu(t) for t in inds], cpu(positions),
                                                  cpu(starts), cpu(weights), k, num_inputs, caps, passes)
    assert torch.equal(ref_rows, got.cpu()) and ref_inputs.tolist() == want


def test_many_starts_refuse_bad_caps(blocks):
    ips, inds, positions, groups, weights, k, num_inputs, cap, passes = _args(blocks, 3)
    with pytest.raises(ValueError, match="max_group_weights must be a list of 2"):
        refine_groups_many(ips, inds, positions, torch.stack([groups, groups]), weights, k, num_inputs, [cap], passes)
    with pytest.raises(ValueError, match=r"\[C, n\]"):
        refine_groups_many(ips, inds, positions, groups, weights, k, num_inputs, [cap], passes)


@pytest.mark.parametrize("k", [2, 8])
def test_caps_sharing_one_start_equal_their_own_refinements(blocks, k):
    """Caps of one start share its passes until their moves differ (native): each row must still be
    that start refined under its own cap alone, and the caps must lead to different results."""
    ips, inds, positions, groups, weights, _, num_inputs, cap, passes = _args(blocks, k, slack=1.0)
    caps = [cap, cap * 1.02, cap * 1.1, cap * 1.3, cap * 3.0]
    got, _ = refine_groups_many(ips, inds, positions, groups.expand(len(caps), -1), weights, k, num_inputs, caps,
                                passes)
    for row, c in zip(got, caps):
        assert torch.equal(row, ref.refine_groups(ips, inds, positions, groups, weights, k, num_inputs, c, passes))
    assert len({tuple(row.tolist()) for row in got}) >= 3, "the caps should lead to different refinements"
