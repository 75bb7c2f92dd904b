"""What an emulated device counts of a step's index buffers: as a GPU holds them, nothing of the host's.

Re-planning after an out-of-memory slices the step's host blocks: host work, which an emulated device
must not count (a GPU holds none of it). Counted, the slices of a fine re-plan could fill a small
emulated device and refuse a step that fits ("slicing it ran out of memory"). And the step's copy of
the index buffers is counted while the step holds it, not while the host blocks live (a planned batch
holds them over the optimizer step, whose temporaries then found no room)."""
from __future__ import annotations

import torch

from cherry.execution import ExecutorOptions, MicrobatchExecutor
from cherry.memory import DeviceMemory
from cherry.models import ModelSpec, build_model
from cherry.models.base import BlockModel
from cherry.planning import BatchShape, MemoryModel
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset


def _accumulate(ds, blocks, spec, budget=None, memory=None):
    torch.manual_seed(0)
    model = build_model(spec)
    options = ExecutorOptions.for_k(None if budget else 1, budget, safety=0.1, exactness_check="off")
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.1), MemoryModel.for_model(spec),
                            options, memory=memory)
    try:
        stats = ex.accumulate(blocks, ds.features, ds.labels)
        return stats, [g.clone() for g in ex.gradients()]
    finally:
        ex.close()


def test_replanning_after_an_oom_adds_nothing_to_the_emulated_device(monkeypatch):
    ds = random_dataset(num_nodes=500, avg_degree=8)
    blocks = NeighborSampler(ds.graph, [4, 6]).sample(ds.train_idx[:64], torch.Generator().manual_seed(3))
    spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, 2, aggr="mean")
    _, want = _accumulate(ds, blocks, spec)
    budget = int(MemoryModel.for_model(spec).estimate_bytes(BatchShape.of(blocks)) * 0.8)  # K > 1
    forward, plan, calls, grown = BlockModel.forward, MicrobatchExecutor.plan, [0], []

    def failing_forward(self, b, x):
        calls[0] += 1
        if calls[0] == 2:  # the second micro-batch fails, after the first was accumulated
            raise torch.OutOfMemoryError("emulated: out of memory")
        return forward(self, b, x)

    def watched_plan(self, blocks, positions=None, **kwargs):
        before = memory.live_bytes()
        out = plan(self, blocks, positions=positions, **kwargs)  # its slices are alive in ``out``
        if positions is not None:  # a re-plan of the seeds left
            grown.append(memory.live_bytes() - before)
        return out

    monkeypatch.setattr(BlockModel, "forward", failing_forward)
    monkeypatch.setattr(MicrobatchExecutor, "plan", watched_plan)
    with DeviceMemory("cpu", "1GiB") as memory:
        stats, got = _accumulate(ds, blocks, spec, budget=budget, memory=memory)
    assert stats.num_oom_recoveries == 1 and grown and grown == [0] * len(grown)
    for a, b in zip(want, got):
        assert float((a - b).abs().max()) <= 1e-4 * float(a.abs().max()) + 1e-7


def test_the_steps_index_buffers_are_counted_while_the_step_holds_them():
    from cherry.execution.staging import Staging
    from cherry.execution.transfer import index_tensors

    ds = random_dataset(num_nodes=500, avg_degree=8)
    blocks = NeighborSampler(ds.graph, [4, 6]).sample(ds.train_idx[:64], torch.Generator().manual_seed(3))
    parts = [blocks, blocks]
    index_bytes = sum(t.numel() * t.element_size() for t in index_tensors(parts))
    with DeviceMemory("cpu", "1GiB") as memory:
        staging = Staging(torch.device("cpu"), stage_features=False, budget_bytes=None, memory=memory)
        before = memory.live_bytes()
        moved = staging.to_device(parts, 64)
        assert memory.live_bytes() - before == index_bytes
        assert all(torch.equal(a, b) for a, b in zip(index_tensors(moved), index_tensors(parts)))
        del moved  # the step ends; the host blocks (``parts``) live on
        assert memory.live_bytes() == before
