"""Gradient equivalence: the K-micro-batch gradient against the whole mini-batch's (K = 1).

Both gradients come from the same executor code path (`MicrobatchExecutor.accumulate`) on the same
sampled blocks and the same weights; only the split differs. Dropout must be 0 (different masks are
different functions), so `compare_gradients` refuses a model in training mode with dropout.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from cherry.execution.executor import ExecutorOptions, MicrobatchExecutor
from cherry.planning import MemoryModel
from cherry.sampling import Blocks


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
    if getattr(getattr(model, "spec", None), "dropout", 0.0) > 0 and model.training:
        raise ValueError("gradient equivalence needs dropout 0 (masks differ between runs); got "
                         f"dropout={model.spec.dropout}")
    if not 1 <= num_microbatches <= blocks.num_seeds:
        raise ValueError(f"--microbatches must be in [1, {blocks.num_seeds}] for this batch, got {num_microbatches}")
    grads = []
    for k in (1, num_microbatches):
        options = ExecutorOptions(num_microbatches=k, recover_oom=False)
        ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), memory_model, options,
                                device, seed_rank=seed_rank)
        ex.accumulate(blocks, features, labels)
        grads.append([g.detach().clone() for g in ex.gradients()])
        ex.close()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    out = []
    for name, g1, gk in zip(names, *grads):
        diff = float((gk - g1).abs().max()) if g1.numel() else 0.0
        ref = float(g1.abs().max()) if g1.numel() else 0.0
        out.append(ParameterDifference(name, diff, diff / ref if ref > 0 else diff))
    return out
