"""`tree_costs`: native equals the reference bit for bit, both equal the per-seed tree walk they
summarise, the planner's `seed_costs` is the memory model's tree cost, and bad input is refused."""
from __future__ import annotations

import os

import pytest
import torch

from cherry.data.degree_laws import degree_law_graph
from cherry.models import ModelSpec
from cherry.ops import csr_aggregate, extension_available, extension_status
from cherry.ops import reference_planning as ref
from cherry.ops.planning import tree_costs
from cherry.planning import MemoryModel, seed_costs
from cherry.sampling import NeighborSampler

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]),
]
PER_DST, PER_EDGE = [768.0, 516.0, 48.0], [132.0, 4.0, 20.0]


@pytest.fixture(scope="module")
def blocks():
    graph = degree_law_graph("barabasi-albert", 3000, seed=1)
    gen = torch.Generator().manual_seed(2)
    return NeighborSampler(graph, [4, 6, 8]).sample(torch.randperm(3000, generator=gen)[:400], gen)


def _csc(blocks, device="cpu"):
    return [b.indptr.to(device) for b in blocks.layers], [b.indices.to(device) for b in blocks.layers]


def _walk(blocks, l, d):
    """The cost of node ``d`` at layer ``l``'s destinations and of its subtree, by recursion."""
    b = blocks.layers[l]
    first, last = int(b.indptr[d]), int(b.indptr[d + 1])
    own = PER_DST[l] + PER_EDGE[l] * (last - first)
    return own + (sum(_walk(blocks, l - 1, int(u)) for u in b.indices[first:last]) if l > 0 else 0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_native_equals_reference_and_the_tree_walk(blocks, device):
    if os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"):
        pytest.skip("native extension disabled by CHERRY_NO_EXT")
    assert extension_available(), extension_status()
    ips, inds = _csc(blocks, device)
    got = torch.ops.cherry.tree_costs(ips, inds, PER_DST, PER_EDGE)
    want = ref.tree_costs(*_csc(blocks), PER_DST, PER_EDGE)
    assert got.dtype == torch.float64 and got.device.type == device and got.shape == (blocks.num_seeds,)
    assert torch.equal(got.cpu(), want)
    assert [float(v) for v in want[:25]] == [_walk(blocks, 2, d) for d in range(25)]
    # one layer: no children, only the seeds' own costs
    one = torch.ops.cherry.tree_costs(ips[-1:], inds[-1:], PER_DST[-1:], PER_EDGE[-1:])
    assert torch.equal(one.cpu(), PER_DST[-1] + PER_EDGE[-1] * blocks.layers[-1].in_degrees().to(torch.float64))


def test_seed_costs_are_the_memory_models_tree_costs(blocks):
    # what the planner balanced on before tree_costs: per layer per_dst + (per_edge + per_src) * degree
    # plus the children's costs, as tensor ops; the splits depend on these values, so they must not move
    model = MemoryModel.for_model(ModelSpec("gat", 32, 16, 5, 3, heads=2))
    below = None
    for block, cost in zip(blocks.layers, model.costs):
        own = cost.per_dst + (cost.per_edge + cost.per_src) * block.in_degrees().to(torch.float64)
        if below is not None:
            own = own + csr_aggregate(block.indptr, block.indices, below.unsqueeze(1), "sum").squeeze(1)
        below = own
    assert torch.equal(seed_costs(blocks, model), below)


def test_bad_input_is_refused(blocks):
    ips, inds = _csc(blocks)
    with pytest.raises(ValueError, match="per_dst must hold one number per layer"):
        tree_costs(ips, inds, PER_DST[:2], PER_EDGE)
    with pytest.raises(ValueError, match="per_edge must hold finite numbers"):
        tree_costs(ips, inds, PER_DST, [1.0, float("nan"), 2.0])
    bad = inds[1].clone()
    bad[3] = blocks.layers[0].num_dst  # one past the destinations one layer down
    with pytest.raises(ValueError, match=r"indices\[1\] must hold"):
        tree_costs(ips, [inds[0], bad, inds[2]], PER_DST, PER_EDGE)
    if extension_available():
        with pytest.raises(RuntimeError, match="outside the"):
            torch.ops.cherry.tree_costs(ips, [inds[0], bad, inds[2]], PER_DST, PER_EDGE)
    assert torch.equal(tree_costs(ips, inds, PER_DST, PER_EDGE), ref.tree_costs(ips, inds, PER_DST, PER_EDGE))
