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


def _gradients_at(k, model, memory_model, blocks, features, labels, seed_rank, device) -> list[torch.Tensor]:
    options = ExecutorOptions.for_k(k, stage_features=False, safety=0.0)
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), memory_model, options,
                            device, seed_rank=seed_rank)
    try:
        ex.accumulate(blocks, features, labels)
        return [g.detach().clone() for g in ex.gradients()]
    finally:
        ex.close()


@dataclass(frozen=True)
class ParameterDifference:
    name: str
    max_abs_diff: float
    max_rel_diff: float  # max |g_K - g_1| / max |g_1|


def compare_gradients(model: torch.nn.Module, memory_model: MemoryModel, blocks: Blocks,
                      features: torch.Tensor, labels: torch.Tensor, num_microbatches: int,
                      seed_rank: Optional[torch.Tensor] = None,
                      device: torch.device | str = "cpu") -> list[ParameterDifference]:
    """Per-parameter difference between the gradients at K = ``num_microbatches`` and K = 1."""
    if not 1 <= num_microbatches <= blocks.num_seeds:
        raise ValueError(f"--microbatches must be in [1, {blocks.num_seeds}] for this batch, got {num_microbatches}")
    grads = []
    with _exact_float32():
        for k in (1, num_microbatches):
            grads.append(_gradients_at(k, model, memory_model, blocks, features, labels, seed_rank, device))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    out = []
    for name, g1, gk in zip(names, *grads):
        diff = float((gk - g1).abs().max()) if g1.numel() else 0.0
        ref = float(g1.abs().max()) if g1.numel() else 0.0
        out.append(ParameterDifference(name, diff, diff / ref if ref > 0 else diff))
    return out


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
                batch_size: int = 256, seed: int = 0, tolerance: float = 1e-4,
                device: torch.device | str = "cpu", memory_model: Optional[MemoryModel] = None) -> ExactnessReport:
    """Does ``model`` (``model(blocks, x) -> logits``) train exactly under micro-batching on ``dataset``?

    First the guard (`cherry.execution.exactness`): BatchNorm in training mode or a functional dropout
    is an `ExactnessError` (one line naming the module); ``nn.Dropout`` is replaced in place by its exact
    equivalent. Then the gradient of one sampled batch of ``batch_size`` training seeds (``fanouts``,
    one per layer) at K = ``num_microbatches`` is compared with K = 1, dropout included.
    """
    from cherry.execution.exactness import check_functional, guard_model
    from cherry.models.spec import ModelSpec
    from cherry.sampling import NeighborSampler, sampling_generator

    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise ValueError(f"num_microbatches must be an int >= 1, got {num_microbatches!r}")
    guard_model(model)
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
    diffs = compare_gradients(model, memory_model, blocks, dataset.features, dataset.labels, k, device=device)
    worst = max((d.max_rel_diff for d in diffs), default=0.0)
    return ExactnessReport(k, blocks.num_seeds, tuple(diffs), worst, tolerance)
