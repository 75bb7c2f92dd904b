"""Recomputation for a user's own model on a real graph: a DGL GAT (``dgl.nn.GATConv``, 4 heads of 32,
exact feature dropout inside each layer) through `from_dgl`, 4 layers over all neighbours on
Amazon-Computers, trains on an emulated device of 0.97 of its own one-seed peak (budget 0.9 of that:
no K fits without recomputation): the plain probes run out of memory there, the recomputed probes
fit and correct the analytic recomputed price, the planner chooses recomputation, every step runs
with it (no out-of-memory re-plan), its measured peak stays within the budget, and the losses equal
K = 1 without recomputation (relative 1e-5). Skips in one line where ../shared/graphs or DGL is absent.

A PyG GAT (``torch_geometric.nn.GATConv``) is not here: its peak is in the input layer's backward (its
``[edges, heads, width]`` messages and their gradients), which per-layer recomputation barely lowers,
so no budget below its one-seed peak fits it."""
from __future__ import annotations

import pytest
import torch

from benchmarks.recompute_units import dgl_gat
from cherry.compat import dgl_available
from cherry.data import load_dataset
from cherry.execution import Trainer
from cherry.memory import DeviceMemory
from cherry.spec import make_spec
from tests.real_graphs import needs_graph

NAME = "amazon_computers.npz?split=random:20,30"
SAFETY = 0.05
CAPACITY = 0.97  # of the one-seed peak
LAYERS, HEADS, HEAD_DIM, SEEDS = 4, 4, 32, 4


def _run(dataset, data_root, capacity_bytes, k, recompute="auto"):
    spec = make_spec(dataset=NAME, root=str(data_root), model="gat", hidden=HEADS * HEAD_DIM, heads=HEADS,
                     num_layers=LAYERS, fanouts=(-1,) * LAYERS, batch_size=SEEDS, epochs=1, max_steps_per_epoch=2,
                     dropout=0.5, lr=0.01, evaluate=False, num_microbatches=k, device_memory_bytes=capacity_bytes,
                     options={"recompute": recompute, "exactness_check": "off", "safety": SAFETY}, seed=0)
    torch.manual_seed(0)
    model = dgl_gat(dataset.feature_dim, dataset.num_classes, LAYERS, HEADS, HEAD_DIM)
    with DeviceMemory("cpu", capacity_bytes) as memory:
        trainer = Trainer(dataset, spec, memory=memory, model=model)
        steps: list = []
        try:
            list(trainer.fit(on_step=steps.append))  # one record per epoch; the steps are what is compared
        finally:
            trainer.close()
    return steps, trainer.budget_bytes


@pytest.mark.slow
@needs_graph("amazon_computers.npz")
def test_a_dgl_gat_below_its_one_seed_peak_trains_recomputed_and_exact(data_root):
    ok, reason = dgl_available()
    if not ok:
        pytest.skip(reason)
    dataset = load_dataset(NAME, root=str(data_root))
    reference, _ = _run(dataset, data_root, None, 1, "off")
    one_seed, _ = _run(dataset, data_root, None, SEEDS, "off")  # one seed per micro-batch
    one_seed_peak = max(s.measured_peak_bytes for s in one_seed)
    capacity = int(CAPACITY * one_seed_peak)
    steps, budget = _run(dataset, data_root, capacity, None)
    mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731  (the figures docs/memory.md quotes, with -s)
    print(f"\nDGL GAT, {LAYERS} layers all-neighbour, {SEEDS} seeds a step: K=1 peak "
          f"{mib(max(s.measured_peak_bytes for s in reference))}, one seed per micro-batch {mib(one_seed_peak)}; "
          f"capacity {mib(capacity)}, budget {mib(budget)}: " + ", ".join(f"K={s.num_microbatches}{' recomputed' if s.recompute else ''} "
                                                f"peak {mib(s.measured_peak_bytes)}" for s in steps))
    assert budget < one_seed_peak
    assert all(s.recompute and s.num_oom_recoveries == 0 for s in steps), steps
    assert max(s.measured_peak_bytes for s in steps) <= budget
    for a, b in zip(reference, steps, strict=True):
        assert abs(a.loss - b.loss) <= 1e-5 * abs(a.loss), ([s.loss for s in reference], [s.loss for s in steps])
