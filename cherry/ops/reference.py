"""Pure-PyTorch reference of every native op: the fallback when the extension is not in use and
the oracle of every op test. Clarity over speed: these may use O(edges x features) memory.
"""
from __future__ import annotations

import torch

REDUCTIONS = ("sum", "mean", "max")


def csr_aggregate(indptr: torch.Tensor, indices: torch.Tensor, x_src: torch.Tensor, reduce: str) -> torch.Tensor:
    """``out[i] = reduce(x_src[indices[indptr[i]:indptr[i+1]]])``; empty segments give zeros.

    Shapes: indptr [D+1] int64, indices [E] int64 in [0, len(x_src)), x_src [S, F] -> [D, F].
    Differentiable through autograd. For max, scatter_reduce's backward splits a gradient element evenly
    among exactly tied maxima (the native op gives it to the first in segment order; they agree when
    no two distinct sources tie, and repeated edges to one source sum to the same gradient).
    """
    num_dst = indptr.numel() - 1
    deg = indptr[1:] - indptr[:-1]
    # output_size: the number of edges is known on the host, so no device read-back is needed
    dst = torch.repeat_interleave(torch.arange(num_dst, device=indptr.device), deg, output_size=indices.numel())
    msgs = x_src.index_select(0, indices)
    out_shape = (num_dst,) + tuple(x_src.shape[1:])
    if reduce == "sum":
        return torch.zeros(out_shape, dtype=x_src.dtype, device=x_src.device).index_add(0, dst, msgs)
    if reduce == "mean":
        total = torch.zeros(out_shape, dtype=x_src.dtype, device=x_src.device).index_add(0, dst, msgs)
        denom = deg.clamp(min=1).to(x_src.dtype).view((-1,) + (1,) * (x_src.dim() - 1))
        return total / denom
    if reduce == "max":
        idx = dst.view((-1,) + (1,) * (x_src.dim() - 1)).expand_as(msgs)
        out = torch.zeros(out_shape, dtype=x_src.dtype, device=x_src.device)
        return out.scatter_reduce(0, idx, msgs, reduce="amax", include_self=False)
    raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")


def edge_softmax(indptr: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of edge ``scores`` ([E] or [E, H]) within each destination's CSC segment."""
    num_dst = indptr.numel() - 1
    deg = indptr[1:] - indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(num_dst, device=indptr.device), deg, output_size=scores.shape[0])
    shape = (num_dst,) + tuple(scores.shape[1:])
    idx = dst.view((-1,) + (1,) * (scores.dim() - 1)).expand_as(scores)
    seg_max = torch.full(shape, float("-inf"), dtype=scores.dtype, device=scores.device)
    seg_max = seg_max.scatter_reduce(0, idx, scores.detach(), reduce="amax", include_self=True)
    exp = torch.exp(scores - seg_max.index_select(0, dst))
    seg_sum = torch.zeros(shape, dtype=scores.dtype, device=scores.device).index_add(0, dst, exp)
    return exp / seg_sum.index_select(0, dst)


# Edges per chunk of the attention reference: bounds its transient [chunk, H, F] messages, so the
# reference too never holds an [E, H, F] tensor (only [E, H] weights and [E] destination ids).
ATTENTION_EDGE_CHUNK = 4096


def _edge_dst(indptr: torch.Tensor, num_edges: int) -> torch.Tensor:
    deg = indptr[1:] - indptr[:-1]
    return torch.repeat_interleave(torch.arange(indptr.numel() - 1, device=indptr.device), deg, output_size=num_edges)


def attention_aggregate_forward(indptr: torch.Tensor, indices: torch.Tensor, z: torch.Tensor,
                                alpha: torch.Tensor) -> torch.Tensor:
    """``out[d, h] = sum_{e in d's segment} alpha[e, h] * z[indices[e], h]``: z [S, H, F], alpha [E, H]
    -> [D, H, F]; empty segments give 0. Chunks of `ATTENTION_EDGE_CHUNK` edges, added in edge order."""
    dst = _edge_dst(indptr, indices.numel())
    out = z.new_zeros((indptr.numel() - 1,) + tuple(z.shape[1:]))
    for first in range(0, indices.numel(), ATTENTION_EDGE_CHUNK):
        edges = slice(first, first + ATTENTION_EDGE_CHUNK)
        out.index_add_(0, dst[edges], z.index_select(0, indices[edges]) * alpha[edges].unsqueeze(-1))
    return out


def attention_aggregate_backward(indptr: torch.Tensor, indices: torch.Tensor, grad_out: torch.Tensor,
                                 z: torch.Tensor, alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The adjoint of `attention_aggregate_forward`: ``(grad_z [S, H, F], grad_alpha [E, H])`` with
    ``grad_z[s, h] = sum_{e: indices[e] = s} alpha[e, h] * grad_out[dst(e), h]`` and
    ``grad_alpha[e, h] = grad_out[dst(e), h] . z[indices[e], h]``, chunked like the forward."""
    dst = _edge_dst(indptr, indices.numel())
    grad_z = torch.zeros_like(z)
    grad_alpha = torch.empty_like(alpha)
    for first in range(0, indices.numel(), ATTENTION_EDGE_CHUNK):
        edges = slice(first, first + ATTENTION_EDGE_CHUNK)
        grad_dst = grad_out.index_select(0, dst[edges])  # [chunk, H, F]
        grad_alpha[edges] = (grad_dst * z.index_select(0, indices[edges])).sum(-1)
        grad_z.index_add_(0, indices[edges], grad_dst * alpha[edges].unsqueeze(-1))
    return grad_z, grad_alpha


class _AttentionAggregate(torch.autograd.Function):
    """Autograd of the reference through its explicit backward (autograd of the chunked forward would
    keep every chunk's gathered rows for backward: an [E, H, F] total)."""

    @staticmethod
    def forward(ctx, indptr, indices, z, alpha):
        ctx.save_for_backward(indptr, indices, z, alpha)
        return attention_aggregate_forward(indptr, indices, z, alpha)

    @staticmethod
    def backward(ctx, grad_out):
        indptr, indices, z, alpha = ctx.saved_tensors
        grad_z, grad_alpha = attention_aggregate_backward(indptr, indices, grad_out, z, alpha)
        return None, None, grad_z, grad_alpha


def attention_aggregate(indptr: torch.Tensor, indices: torch.Tensor, z: torch.Tensor,
                        alpha: torch.Tensor) -> torch.Tensor:
    """Differentiable `attention_aggregate_forward` (gradients to ``z`` and ``alpha``), first order only."""
    return _AttentionAggregate.apply(indptr, indices, z, alpha)
