"""Gradient equivalence: the K-micro-batch gradient against the whole mini-batch's (K = 1).

Both gradients come from the same executor code path (`MicrobatchExecutor.accumulate`) on the same
sampled blocks and the same weights; only the split differs. Dropout is allowed: both runs are the
first step of a fresh executor, so they share the step seed, and `NodeDropout` gives every node the
same mask in every micro-batch (`cherry.models.dropout`).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional

import torch

from cherry.execution.executor import ExecutorOptions, MicrobatchExecutor
from cherry.execution.partition_check import TOLERANCE, ParameterDifference, compare
from cherry.execution.recompute import can_recompute, no_units_error
from cherry.planning import MemoryModel
from cherry.sampling import Blocks


@contextmanager
def _exact_float32():
    """TF32 off while comparing: on Ampere+ GPUs cuDNN/cuBLAS would otherwise round float32 products
    to 10-bit mantissas, and differently for differently shaped micro-batches."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _gradients_at(k, model, memory_model, blocks, features, labels, seed_rank, device,
                  recompute: str = "off") -> list[torch.Tensor]:
    options = ExecutorOptions.for_k(k, stage_features=False, safety=0.0, recompute=recompute)
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), memory_model, options,
                            device, seed_rank=seed_rank)
    try:
        ex.accumulate(blocks, features, labels)
        return [g.detach().clone() for g in ex.gradients()]
    finally:
        ex.close()


def compare_gradients(model: torch.nn.Module, memory_model: MemoryModel, blocks: Blocks,
                      features: torch.Tensor, labels: torch.Tensor, num_microbatches: int,
                      seed_rank: Optional[torch.Tensor] = None,
                      device: torch.device | str = "cpu", recompute: str = "off") -> list[ParameterDifference]:
    """Per-parameter difference between the gradients at K = ``num_microbatches`` and K = 1 (the
    partition check's comparison, `cherry.execution.partition_check.compare`). ``recompute``: the
    K-micro-batch run's recomputation setting ("on" runs it recomputed; K = 1 never is)."""
    if not 1 <= num_microbatches <= blocks.num_seeds:
        raise ValueError(f"--microbatches must be in [1, {blocks.num_seeds}] for this batch, got {num_microbatches}")
    if recompute not in ("on", "off"):
        raise ValueError(f"recompute must be 'on' or 'off', got {recompute!r}")
    grads = []
    with _exact_float32():
        for k, mode in ((1, "off"), (num_microbatches, recompute)):
            grads.append(_gradients_at(k, model, memory_model, blocks, features, labels, seed_rank, device, mode))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return list(compare(names, *grads))


@dataclass(frozen=True)
class ExactnessReport:
    """What `check_exact` found: the per-parameter differences and the verdict under ``tolerance``."""

    num_microbatches: int
    num_seeds: int
    differences: tuple[ParameterDifference, ...]
    max_rel_diff: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_rel_diff <= self.tolerance


def check_exact(model: torch.nn.Module, dataset, num_microbatches: int = 4, fanouts=(5, 5),
                batch_size: int = 256, seed: int = 0, tolerance: float = TOLERANCE,
                device: torch.device | str = "cpu", memory_model: Optional[MemoryModel] = None,
                recompute: str = "off") -> ExactnessReport:
    """Does ``model`` (``model(blocks, x) -> logits``) train exactly under micro-batching on ``dataset``?

    First the guard (`cherry.execution.exactness`): BatchNorm in training mode or a functional dropout
    is an `ExactnessError` (one line naming the module); ``nn.Dropout`` is replaced in place by its exact
    equivalent. Then the gradient of one sampled batch of ``batch_size`` training seeds (``fanouts``,
    one per layer) at K = ``num_microbatches`` (recomputed where ``recompute`` is "on") is compared with
    K = 1, dropout included, by the comparison the run's own partition check uses.
    """
    from cherry.execution.exactness import check_functional, guard_model
    from cherry.models.spec import ModelSpec
    from cherry.sampling import NeighborSampler, sampling_generator

    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise ValueError(f"num_microbatches must be an int >= 1, got {num_microbatches!r}")
    guard_model(model)
    if recompute == "on" and not can_recompute(model):
        raise no_units_error(model)
    model = model.to(device)
    gen = torch.Generator().manual_seed(seed)
    train = dataset.train_idx
    seeds = train[torch.randperm(train.numel(), generator=gen)[:batch_size]]
    blocks = NeighborSampler(dataset.graph, list(fanouts)).sample(seeds, sampling_generator(seed))
    check_functional(model, blocks.to(device), dataset.features.index_select(0, blocks.input_nodes).to(device))
    if memory_model is None:  # a fixed K: the estimates only balance the split
        spec = ModelSpec("sage", dataset.feature_dim, 16, dataset.num_classes, len(tuple(fanouts)))
        memory_model = MemoryModel.for_model(spec)
    k = min(num_microbatches, blocks.num_seeds)
    diffs = compare_gradients(model, memory_model, blocks, dataset.features, dataset.labels, k, device=device,
                              recompute=recompute)
    worst = max((d.max_rel_diff for d in diffs), default=0.0)
    return ExactnessReport(k, blocks.num_seeds, tuple(diffs), worst, tolerance)
