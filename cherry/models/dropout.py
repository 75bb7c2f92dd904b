"""Dropout whose mask is a function of (node, layer, feature, step): exact under micro-batching.

`NodeDropout` replaces ``nn.Dropout`` between layers. In training mode with a step seed set
(`set_dropout_step`), element ``(v, j)`` of the layer-``l`` output row of global node ``v`` is kept iff
``mix32(h_v ^ j) >= p * 2**32`` (then scaled by ``1 / (1 - p)``), where ``h_v`` is the sampler's
counter-based node state (`cherry.ops.reference_sampling.node_states`) under a seed derived from
the step seed and ``l``. Every micro-batch that holds ``v`` therefore applies the same mask, and the
K-micro-batch gradient equals the K = 1 gradient with dropout. Different steps (or layers) give
independent-looking masks; each element is kept with probability ``1 - p`` up to ``2**-32``.

Where the step seed comes from: `cherry.execution.MicrobatchExecutor` sets it once per optimizer step
(before the first micro-batch, from ``ExecutorOptions.dropout_seed`` and its step count), so all
micro-batches of a step, including those re-planned after an out-of-memory, share it. Without a step
seed (a model trained outside the executor, e.g. by the baselines) the layer is ``F.dropout``.

The mask is never stored: `cherry.ops.node_dropout` hashes each element's keep bit where it is used
(a native CPU/CUDA kernel, or a chunked PyTorch reference) and recomputes it in backward from the rows'
``[R]`` node states, so a dropout costs its output only. `dropout_keep` materialises the same mask
(tests and diagnostics). No host synchronisation. Covers feature dropout between layers and on the input
features (every model here); models have no attention dropout and no BatchNorm.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from cherry.ops.dropout import dropout_threshold, node_dropout
from cherry.ops.reference_dropout import keep_mask
from cherry.ops.reference_sampling import node_states

_GOLDEN64 = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def layer_seed(step_seed: int, layer: int) -> int:
    """The 64-bit hash seed of ``layer``'s masks at the step with ``step_seed``."""
    return (int(step_seed) + _GOLDEN64 * (int(layer) + 1)) & _MASK64


def dropout_states(nodes: torch.Tensor, step_seed: int, layer: int) -> torch.Tensor:
    """``[len(nodes)]`` int64 hash states of the rows of global ``nodes`` for ``layer``'s masks at the
    step with ``step_seed``: what `cherry.ops.node_dropout` hashes with the column index."""
    if not isinstance(nodes, torch.Tensor) or nodes.dtype != torch.int64 or nodes.dim() != 1:
        raise ValueError("nodes must be a 1-D int64 tensor of global node ids")
    return node_states(layer_seed(step_seed, layer), nodes)


def dropout_keep(nodes: torch.Tensor, width: int, p: float, step_seed: int, layer: int) -> torch.Tensor:
    """``[len(nodes), width]`` bool: which elements of the rows of global ``nodes`` are kept.

    Materialises the mask with ``[len(nodes), width]`` int64 temporaries: for tests and diagnostics;
    the layers apply it through `cherry.ops.node_dropout`, which stores no mask."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    return keep_mask(dropout_states(nodes, step_seed, layer), width, dropout_threshold(p))


def apply_dropout(h: torch.Tensor, nodes: torch.Tensor, p: float, step_seed: int, layer: int) -> torch.Tensor:
    """``h [R, F]`` with the exact mask of the rows of global ``nodes`` applied and scaled by 1 / (1 - p):
    bit for bit ``h * dropout_keep(...) * (1 / (1 - p))``, at the memory of the output."""
    return node_dropout(h, dropout_states(nodes.to(h.device), step_seed, layer), p)


class NodeDropout(nn.Module):
    """``nn.Dropout(p)`` with per-(node, layer, feature, step) masks when a step seed is set."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = float(p)
        self.step_seed: Optional[int] = None

    def forward(self, h: torch.Tensor, nodes: Optional[torch.Tensor] = None, layer: int = 0) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return h
        if self.step_seed is None or nodes is None:
            return F.dropout(h, self.p, True)
        if nodes.numel() != h.shape[0]:
            raise ValueError(f"dropout needs one node id per row: {nodes.numel()} ids for {h.shape[0]} rows")
        return apply_dropout(h, nodes, self.p, self.step_seed, layer)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def set_dropout_step(model: nn.Module, step_seed: Optional[int]) -> None:
    """Set (or clear, with None) the step seed of every `NodeDropout` in ``model``."""
    if step_seed is not None and (isinstance(step_seed, bool) or not isinstance(step_seed, int)):
        raise TypeError(f"step_seed must be an int or None, got {step_seed!r}")
    for module in model.modules():
        if isinstance(module, NodeDropout):
            module.step_seed = step_seed


def step_seed(base_seed: int, step: int) -> int:
    """The step seed of optimizer step ``step`` of a run seeded ``base_seed`` (distinct per step)."""
    return (int(base_seed) * _GOLDEN64 + int(step) * 0xBF58476D1CE4E5B9) & _MASK64
