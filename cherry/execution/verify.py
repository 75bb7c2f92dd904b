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
