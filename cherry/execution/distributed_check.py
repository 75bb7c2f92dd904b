"""Checks of data-parallel training against one process: the first step's gradient and equal parameters.

"Equal" compares the gradient of the first step of an N-rank job (each rank: its share of the
batch, its own K, micro-batched; then the scaled all-reduce) with the gradient one process computes
with K = 1 on the whole logical batch. Both start from the same initial weights and the same sampled
neighbours. The sampling draws depend on (layer seed, node) only, so splitting the batch across ranks
does not change any node's neighbours (see `cherry.execution.distributed`). Only the float summation order differs,
so the relative difference (max |g_N - g_1| / max |g_1| per parameter) is a few float32 ulps.
Dropout must be 0 (masks differ per rank).

`rank_check` runs inside one rank (launched by `cherry.launch.launch`); `compare_distributed` launches
the ranks, computes the single-process reference here and returns per-parameter differences.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from cherry.execution.verify import ParameterDifference, _exact_float32


@dataclass(frozen=True)
class DistributedCheck:
    """What `compare_distributed` found: per-parameter differences of the first step's gradient,
    whether every rank held bit-identical parameters after ``num_steps`` steps, and per rank (index =
    rank) the micro-batch count and out-of-memory recoveries of each step."""

    differences: tuple[ParameterDifference, ...]
    parameters_identical: bool
    losses: tuple[float, ...]
    rank_microbatches: tuple[tuple[int, ...], ...]
    rank_oom_recoveries: tuple[tuple[int, ...], ...]

    @property
    def max_rel_diff(self) -> float:
        return max(d.max_rel_diff for d in self.differences)


def _first_batch(spec, dataset) -> torch.Tensor:
    from cherry.sampling import spec_seed_batches

    return spec_seed_batches(spec, dataset.train_idx, epoch=0)[0]


def rank_check(spec_dict: dict, num_steps: int = 1, rank_device_memory_bytes: Optional[dict] = None,
               fail_on_rank: Optional[int] = None) -> dict:
    """One rank's part of a check: join the world, train ``num_steps`` steps of epoch 0, return numpy
    values (they pickle without shared memory): the first step's reduced gradient, the parameters,
    per-step losses and per-rank stats. ``rank_device_memory_bytes`` ({rank: bytes}) gives a rank its
    own emulated capacity; ``fail_on_rank`` makes that rank raise after its first step (a crash test)."""
    from cherry.data import load_dataset
    from cherry.execution.distributed import DistributedTrainer
    from cherry.launch import process_group, world_from_env
    from cherry.memory import DeviceMemory
    from cherry.spec import spec_from_dict

    spec = spec_from_dict(spec_dict)
    world = world_from_env()
    if world is None:
        raise ValueError("rank_check runs inside a launched rank (cherry.launch.launch, torchrun or srun)")
    capacity = (rank_device_memory_bytes or {}).get(world.rank, spec.device_memory_bytes)
    out: dict = {"rank": world.rank, "losses": [], "microbatches": [], "recoveries": []}
    with process_group(world, spec.device), _exact_float32():
        dataset = load_dataset(spec.dataset, spec.root)
        with DeviceMemory(spec.device, capacity) as memory:
            trainer = DistributedTrainer(dataset, spec, memory=memory)
            try:
                with trainer.loader(trainer.epoch_batches(0)[:num_steps]) as loader:
                    for i, batch in enumerate(loader):
                        stats = trainer.step(batch.prepared)
                        if i == 0:
                            out["gradients"] = [g.detach().cpu().numpy().copy() for g in trainer.executor.gradients()]
                            if fail_on_rank == world.rank:
                                raise RuntimeError(f"rank {world.rank} crashed on purpose after its first step")
                        out["losses"].append(stats.loss)
                        out["microbatches"].append(trainer.last_rank_stats.num_microbatches)
                        out["recoveries"].append(trainer.last_rank_stats.num_oom_recoveries)
            finally:
                trainer.close()
            out["parameters"] = [p.detach().cpu().numpy().copy() for p in trainer.model.parameters()]
    return out


def reference_gradients(spec, dataset) -> list[torch.Tensor]:
    """The single-process K = 1 gradient of the first logical batch of ``spec`` at the initial weights."""
    from cherry.execution.trainer import Trainer

    one = spec.replace(nproc=1, num_microbatches=1, budget_bytes=None, device_memory_bytes=None)
    trainer = Trainer(dataset, one)
    try:
        with _exact_float32():
            planned = trainer.prepare(_first_batch(one, dataset), trainer.generator)
            trainer.model.train()
            trainer.executor.accumulate(planned, dataset.features, dataset.labels)
        return [g.detach().cpu().clone() for g in trainer.executor.gradients()]
    finally:
        trainer.close()


def compare_distributed(spec, num_steps: int = 1, rank_device_memory_bytes: Optional[dict] = None,
                        timeout_s: Optional[float] = None) -> DistributedCheck:
    """Launch ``spec.nproc`` ranks on this machine and compare with one process (module docstring)."""
    from cherry.data import load_dataset
    from cherry.launch import launch

    if spec.nproc < 2:
        raise ValueError(f"nproc must be >= 2 to compare ranks with one process, got {spec.nproc}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be an int >= 1, got {num_steps!r}")
    dataset = load_dataset(spec.dataset, spec.root)
    from cherry.planning import seed_rank

    seed_rank(dataset, spec.ordering, spec.seed)  # computed once here, read by the ranks
    results = launch(rank_check, (spec.to_dict(), num_steps, rank_device_memory_bytes), spec.nproc,
                     timeout_s=timeout_s)
    reference = reference_gradients(spec, dataset)
    names = [n for n, p in _named_trainable(spec, dataset)]
    diffs = []
    for name, g1, gn in zip(names, reference, (torch.from_numpy(g) for g in results[0]["gradients"])):
        diff = float((gn - g1).abs().max()) if g1.numel() else 0.0
        ref = float(g1.abs().max()) if g1.numel() else 0.0
        diffs.append(ParameterDifference(name, diff, diff / ref if ref > 0 else diff))
    identical = all(all(np.array_equal(a, b) for a, b in zip(results[0]["parameters"], r["parameters"]))
                    for r in results[1:])
    return DistributedCheck(
        differences=tuple(diffs), parameters_identical=identical, losses=tuple(results[0]["losses"]),
        rank_microbatches=tuple(zip(*results[0]["microbatches"])),
        rank_oom_recoveries=tuple(zip(*results[0]["recoveries"])),
    )


def _named_trainable(spec, dataset):
    from cherry.models import build_model

    model = build_model(spec.model_spec(dataset))
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


__all__ = ["DistributedCheck", "compare_distributed", "rank_check", "reference_gradients"]
