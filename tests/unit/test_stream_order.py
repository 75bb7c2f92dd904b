"""The executor's stream order, checked on the CPU with fake streams: the side stream waits for the
compute stream before it first reads a step's inputs, also without feature staging (the labels and
device-built blocks are written on the compute stream), and after an out-of-memory the compute
stream waits for the side stream before anything is freed. The GPU test of the same fault is in
tests/unit/test_gpu_faults.py (labels with staging off under TORCH_CUDA_SANITIZER=1)."""
from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from cherry.execution import ExecutorOptions, MicrobatchExecutor
from cherry.execution import staging as staging_mod
from cherry.models import ModelSpec, build_model
from cherry.models.base import BlockModel
from cherry.planning import BatchShape, MemoryModel
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset
from tests.unit.test_executor import _CapacityOnly


class FakeStream:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: "FakeStream") -> None:
        self.log.append(f"{self.name} waits {other.name}")

    def wait_event(self, event) -> None:
        self.log.append(f"{self.name} waits event")

    def record_event(self):
        return object()


@pytest.fixture()
def streams(monkeypatch):
    """A log of stream operations, and an executor factory whose side stream is fake (on the CPU)."""
    log: list = []
    main = FakeStream("main", log)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: main)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: nullcontext())
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)

    def to_device(parts, device):
        log.append("side reads inputs")
        return [p.to(device) for p in parts]

    monkeypatch.setattr(staging_mod, "blocks_to_device", to_device)
    ds = random_dataset(num_nodes=400, avg_degree=6)
    blocks = NeighborSampler(ds.graph, [4, 6]).sample(ds.train_idx[:64], torch.Generator().manual_seed(3))
    spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, 2, aggr="mean")

    def make(options: ExecutorOptions, memory=None) -> MicrobatchExecutor:
        torch.manual_seed(0)
        model = build_model(spec)
        ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.1), MemoryModel.for_model(spec),
                                options, memory=memory)
        ex.staging.side_stream = FakeStream("side", log)
        real_free, real_prepare = ex.free, ex.staging.prepare
        ex.free = lambda: (log.append("free"), real_free())[1]
        ex.staging.prepare = lambda *a: (log.append("prepare"), real_prepare(*a))[1]
        return ex

    return log, make, ds, blocks, spec


def test_side_stream_waits_for_the_labels_without_staging(streams):
    log, make, ds, blocks, _ = streams
    ex = make(ExecutorOptions.for_k(2, pipeline=True, stage_features=False))
    stats = ex.accumulate(blocks, ds.features, ds.labels)
    ex.close()
    assert stats.num_microbatches == 2 and not stats.staged_features
    assert "side waits main" in log, log
    first_read = min(log.index("side reads inputs"), log.index("prepare"))
    assert log.index("side waits main") < first_read, log


def test_compute_stream_waits_for_a_cancelled_preparation_before_freeing(streams, monkeypatch):
    log, make, ds, blocks, spec = streams
    budget = MemoryModel.for_model(spec).estimate_bytes(BatchShape.of(blocks)) // 2
    calls = {"n": 0}
    original = BlockModel.forward

    def failing_forward(self, b, x):
        calls["n"] += 1
        if calls["n"] == 2:  # micro-batch 2 fails while micro-batch 3 is being prepared
            log.append("oom")
            raise torch.OutOfMemoryError("emulated: out of memory")
        return original(self, b, x)

    monkeypatch.setattr(BlockModel, "forward", failing_forward)
    options = ExecutorOptions.for_k(3, budget, pipeline=True, stage_features=False, recover_oom=True)
    ex = make(options, memory=_CapacityOnly(budget))
    stats = ex.accumulate(blocks, ds.features, ds.labels)
    ex.close()
    assert stats.num_oom_recoveries == 1
    after = log[log.index("oom"):]
    assert "main waits side" in after and "free" in after, after
    assert after.index("main waits side") < after.index("free"), after
    # the re-plan's inputs are read on the side stream after the compute stream made them
    reads = [i for i, e in enumerate(after) if e == "side reads inputs"]
    assert reads and "side waits main" in after[:reads[0]], after
