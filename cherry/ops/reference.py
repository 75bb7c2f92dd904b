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
