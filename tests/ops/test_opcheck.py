"""`torch.library.opcheck` on every native op (``torch.ops.cherry.*``), on every available device.

Each op's arguments are the ones Cherry's own public functions pass it: a recording proxy stands in
for ``torch.ops.cherry`` while they run on small generated graphs, so the checked calls are real ones.
Every op gets opcheck's schema test (declared mutation and aliasing match what the kernel does) and
its autograd-registration test; the ops with a fake kernel (`cherry.ops.registrations`: aggregation,
edge softmax, attention aggregation, the LSTM cell's backward) also get the fake-tensor and
AOT-dispatch tests, which is what ``torch.compile`` needs. The sampling and planning ops have
data-dependent output sizes and no fake kernel; they run eagerly only.
"""
from __future__ import annotations

import os

import pytest
import torch

from cherry.data.degree_laws import degree_law_graph
from cherry.ops import aggregate, attention, extension_available, extension_status, feature_cache, lstm, planning, sampling
from cherry.ops.dropout import node_dropout
from cherry.ops.registrations import FAKE_OPS
from cherry.sampling import NeighborSampler, slice_blocks_many

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]),
]
EAGER_TESTS = ("test_schema", "test_autograd_registration")
ALL_TESTS = EAGER_TESTS + ("test_faketensor", "test_aot_dispatch_dynamic")


def native_ops() -> list[str]:
    """Every op the extension registers under ``cherry::`` (read from the dispatcher)."""
    names = {name.split("::", 1)[1].split(".")[0] for name in torch._C._dispatch_get_all_op_names()
             if name.startswith("cherry::")}
    return sorted(names)


class Recorder:
    """Stands in for ``torch.ops.cherry``: runs each op and keeps its first call's arguments."""

    def __init__(self, real) -> None:
        self.real, self.calls = real, {}

    def __getattr__(self, name):
        op = getattr(self.real, name)

        def call(*args):
            self.calls.setdefault(name, (op, args))
            return op(*args)
        return call


def _clone(value, grad: bool):
    """A fresh copy of an op argument; ``grad`` keeps its requires_grad (a backward op runs without)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(grad and value.requires_grad)
    if isinstance(value, list):
        return [_clone(v, grad) for v in value]
    return value


def _exercise(device: str) -> None:
    """Call every public function that reaches a native op, on ``device``."""
    gen = torch.Generator().manual_seed(0)
    graph = degree_law_graph("barabasi-albert", 800, seed=1)
    seeds = torch.randperm(800, generator=gen)[:96]
    sampling.sample_neighbors(graph.indptr.to(device), graph.indices.to(device), seeds.to(device), 3, 7)
    blocks = NeighborSampler(graph, [3, 4]).sample(seeds, gen).to(device)  # the planner's inputs, on device
    top, layers = blocks.layers[-1], blocks.layers
    for reduce in ("max", "mean"):  # max first: its argmax output is the non-empty one
        x = torch.randn(top.src_nodes.numel(), 5, device=device, dtype=torch.float64, requires_grad=True)
        aggregate.aggregate_block(top, x, reduce).sum().backward()
    scores = torch.randn(top.indices.numel(), 2, device=device, dtype=torch.float64, requires_grad=True)
    (aggregate.edge_softmax_block(top, scores) * torch.rand_like(scores)).sum().backward()
    rows = torch.randn(top.src_nodes.numel(), 7, device=device, dtype=torch.float64, requires_grad=True)
    states = torch.randint(0, 2**32, (rows.shape[0],), generator=gen).to(device)
    (node_dropout(rows, states, 0.5) * torch.rand_like(rows)).sum().backward()
    z = torch.randn(top.src_nodes.numel(), 2, 3, device=device, dtype=torch.float64, requires_grad=True)
    (attention.attention_aggregate_block(top, z, scores.detach().clone().requires_grad_(True))
     * torch.rand(top.num_dst, 2, 3, device=device, dtype=torch.float64)).sum().backward()
    if device == "cpu":  # the LSTM cell's backward has a CPU kernel only
        n, hidden = 6, 3
        act, c_prev, tanh_c, dh, dc = (torch.randn(n, h) for h in (4 * hidden, hidden, hidden, hidden, hidden))
        lstm.lstm_cell_backward_(act, c_prev, tanh_c.tanh(), dh, dc)
    sampling.slice_layer(top.indptr, top.indices, torch.arange(10, device=device), top.src_nodes.numel())
    slice_blocks_many(blocks, [torch.arange(0, 40, device=device), torch.arange(40, 96, device=device)])
    indptrs, indices = [b.indptr for b in layers], [b.indices for b in layers]
    positions = torch.randperm(blocks.num_seeds, generator=gen)[:-5].to(device)
    groups = (torch.arange(positions.numel()) % 3).to(device)
    weights = (torch.rand(positions.numel(), dtype=torch.float64, generator=gen) + 0.5).to(device)
    cap = float(torch.bincount(groups.cpu(), weights=weights.cpu(), minlength=3).max()) * 1.1
    planning.refine_groups(indptrs, indices, positions, groups, weights, 3, layers[0].num_src, cap, 2)
    planning.refine_groups_many(indptrs, indices, positions, torch.stack([groups, groups.flip(0)]), weights, 3,
                                layers[0].num_src, [cap, cap * 2], 2)
    planning.grow_groups(top.indptr, top.indices, positions, weights, 3)
    planning.group_shapes(indptrs, indices, positions, groups, 3)
    planning.group_shapes_many(indptrs, indices, positions, torch.stack([groups, groups.flip(0)]), 3, layers[0].num_src)
    planning.tree_costs(indptrs, indices, [1.0, 2.0], [0.5, 0.25])
    # the feature cache's gather; the table is on the device here (opcheck's clones are not pinned:
    # the pinned, zero-copy path has its own GPU test in test_cache_gather.py)
    table = torch.randn(800, 6, generator=gen)
    slot_of = torch.full((800,), -1, dtype=torch.int64)
    slot_of[::3] = torch.arange(slot_of[::3].numel())
    feature_cache.cache_gather(slot_of.to(device), table[::3].contiguous().to(device), table.to(device),
                               top.src_nodes.to(device))


@pytest.fixture(scope="module")
def native():
    if os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"):
        pytest.skip("CHERRY_NO_EXT set: the native ops are disabled on purpose")
    assert extension_available(), extension_status()


@pytest.fixture(scope="module", params=DEVICES)
def recorded(native, request):
    real = torch.ops.cherry
    recorder = Recorder(real)
    mp = pytest.MonkeyPatch()
    mp.setattr(torch.ops, "cherry", recorder)
    try:
        _exercise(request.param)
    finally:
        mp.undo()
    return request.param, recorder.calls


def test_every_op_is_exercised(recorded):
    device, calls = recorded
    expected = set(native_ops()) - ({"lstm_cell_backward_"} if device != "cpu" else set())
    assert expected - set(calls) == set(), f"ops no public function reached on {device}"


@pytest.mark.parametrize("name", sorted(set(native_ops()) if extension_available() else []))
def test_opcheck(recorded, name):
    device, calls = recorded
    if name not in calls:
        pytest.skip(f"{name} has no kernel on {device}")
    op, args = calls[name]
    tests = ALL_TESTS if name in FAKE_OPS else EAGER_TESTS
    grad = "_backward" not in name  # autograd calls the backward ops with grad mode off
    torch.library.opcheck(op, tuple(_clone(a, grad) for a in args), test_utils=tests)
