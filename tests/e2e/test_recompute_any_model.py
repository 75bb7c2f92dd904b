"""Recomputation for users' own models on a real graph: a DGL GAT (``dgl.nn.GATConv``, 4 heads) through
`from_dgl` and a PyG GAT through `from_pyg`, 3 layers over all neighbours on Amazon-Computers, train
under a budget below their own one-seed peak (so no K fits without recomputation): the planner
chooses recomputation from the measured price of the probes, every step runs with it, its measured peak
stays within the budget, and the losses equal K = 1 without recomputation (relative 1e-5). Skips in one
line where ../shared/graphs (or DGL / PyG) is absent."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from cherry.compat import dgl_available, pyg_available
from cherry.data import load_dataset
from cherry.execution import Trainer
from cherry.memory import DeviceMemory
from cherry.spec import BUDGET_RESERVE_FRACTION, make_spec
from tests.real_graphs import needs_graph

NAME = "amazon_computers.npz?split=random:20,30"
LAYERS, HEADS, HEAD_DIM, SEEDS = 3, 4, 64, 4


def dgl_gat(in_dim: int, num_classes: int) -> nn.Module:
    from cherry.compat import import_dgl
    from cherry.interop import from_dgl

    dglnn = import_dgl().nn

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            dims = [in_dim] + [HEADS * HEAD_DIM] * (LAYERS - 1)
            self.convs = nn.ModuleList(
                [dglnn.GATConv(dims[i], HEAD_DIM, HEADS, feat_drop=0.2, allow_zero_in_degree=True)
                 for i in range(LAYERS - 1)] + [dglnn.GATConv(dims[-1], num_classes, 1, allow_zero_in_degree=True)])
            self.drop = nn.Dropout(0.5)

        def forward(self, blocks, x):
            h = x
            for i, (conv, block) in enumerate(zip(self.convs, blocks)):
                h = conv(block, h)
                h = self.drop(h.flatten(1).relu()) if i < LAYERS - 1 else h.mean(1)
            return h

    return from_dgl(GAT())


def pyg_gat(in_dim: int, num_classes: int) -> nn.Module:
    from torch_geometric.nn import GATConv

    from cherry.interop import from_pyg

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            dims = [in_dim] + [HEADS * HEAD_DIM] * (LAYERS - 1)
            self.convs = nn.ModuleList([GATConv(dims[i], HEAD_DIM, heads=HEADS, add_self_loops=False)
                                        for i in range(LAYERS - 1)]
                                       + [GATConv(dims[-1], num_classes, heads=1, add_self_loops=False)])
            self.drop = nn.Dropout(0.5)

        def forward(self, x, adjs):
            for i, (edge_index, _, size) in enumerate(adjs):
                x = self.convs[i]((x, x[: size[1]]), edge_index)
                if i < LAYERS - 1:
                    x = self.drop(x.relu())
            return x

    return from_pyg(GAT())


def _run(dataset, data_root, build, capacity_bytes, k, recompute="auto"):
    spec = make_spec(dataset=NAME, root=str(data_root), model="gat", hidden=HEADS * HEAD_DIM, heads=HEADS,
                     num_layers=LAYERS, fanouts=(-1,) * LAYERS, batch_size=SEEDS, epochs=1, max_steps_per_epoch=2,
                     dropout=0.5, lr=0.01, evaluate=False, num_microbatches=k, device_memory_bytes=capacity_bytes,
                     options={"recompute": recompute, "exactness_check": "off"}, seed=0)
    torch.manual_seed(0)
    model = build(dataset.feature_dim, dataset.num_classes)
    with DeviceMemory("cpu", capacity_bytes) as memory:
        trainer = Trainer(dataset, spec, memory=memory, model=model)
        steps: list = []
        try:
            losses = [e.loss for e in trainer.fit(on_step=steps.append)]
        finally:
            trainer.close()
    return losses, steps, trainer.budget_bytes


@pytest.mark.slow
@needs_graph("amazon_computers.npz")
@pytest.mark.parametrize("kind", ["dgl", "pyg"])
def test_a_users_gat_below_its_one_seed_peak_trains_recomputed_and_exact(data_root, kind):
    ok, reason = dgl_available() if kind == "dgl" else pyg_available()
    if not ok:
        pytest.skip(reason)
    build = dgl_gat if kind == "dgl" else pyg_gat
    dataset = load_dataset(NAME, root=str(data_root))
    reference, ref_steps, _ = _run(dataset, data_root, build, None, 1, "off")
    _, seed_steps, _ = _run(dataset, data_root, build, None, SEEDS, "off")  # one seed per micro-batch
    one_seed_peak = max(s.measured_peak_bytes for s in seed_steps)
    capacity = int(0.95 * one_seed_peak / (1 - BUDGET_RESERVE_FRACTION))  # the budget: 0.95 of one seed's peak
    losses, steps, budget = _run(dataset, data_root, build, capacity, None)
    print(kind, "K=1 peak", max(s.measured_peak_bytes for s in ref_steps), "one seed", one_seed_peak,
          "budget", budget, [(s.num_microbatches, s.recompute, s.measured_peak_bytes, s.estimated_peak_bytes,
                              s.num_oom_recoveries) for s in steps])
    assert budget < one_seed_peak
    assert all(s.recompute and s.num_oom_recoveries == 0 for s in steps), steps
    assert max(s.measured_peak_bytes for s in steps) <= budget
    for a, b in zip(reference, losses, strict=True):
        assert abs(a - b) <= 1e-5 * abs(a), (reference, losses)
