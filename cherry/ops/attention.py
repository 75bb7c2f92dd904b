"""Fused attention aggregation on CSC segments: `attention_aggregate` and `attention_aggregate_block`.

``out[d, h, :] = sum over d's in-edges e of alpha[e, h] * z[indices[e], h, :]``: GAT's aggregation
(DGL's ``u_mul_e_sum``) with per-head edge weights ``alpha`` (typically an `edge_softmax`). Neither
direction holds an [E, H, F] message tensor: the native kernels write [D, H, F] and read back
[S, H, F] and [E, H]; the pure-PyTorch fallback (`cherry.ops.reference`) works in edge chunks.
Gradients flow to ``z`` and ``alpha``; the native autograd is registered in
`cherry.ops.registrations` (first order only).

As in `cherry.ops.aggregate`, the tensor entry point checks values (a host sync) and the block entry
point checks host metadata only, so models call it inside a micro-batch without synchronising.
"""
from __future__ import annotations

import torch

from cherry.ops import reference
from cherry.ops.aggregate import _check_block_rows, _check_index_range, _check_indptr, _describe, _native_ok


def _check_attention_types(indptr: torch.Tensor, indices: torch.Tensor, z: torch.Tensor, alpha: torch.Tensor) -> None:
    """Host-only checks (no tensor value is read)."""
    if not isinstance(indptr, torch.Tensor) or indptr.dtype != torch.int64 or indptr.dim() != 1:
        raise TypeError(f"indptr must be a 1-D int64 tensor, got {_describe(indptr)}")
    if not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or indices.dim() != 1:
        raise TypeError(f"indices must be a 1-D int64 tensor, got {_describe(indices)}")
    if not isinstance(z, torch.Tensor) or not z.is_floating_point() or z.dim() != 3:
        raise TypeError(f"z must be a floating tensor [num_src, heads, features], got {_describe(z)}")
    if not isinstance(alpha, torch.Tensor) or alpha.dtype != z.dtype or alpha.dim() != 2:
        raise TypeError(f"alpha must be a [num_edges, heads] tensor of z's dtype {z.dtype}, got {_describe(alpha)}")
    if tuple(alpha.shape) != (indices.numel(), z.shape[1]):
        raise ValueError(
            f"alpha must be [num_edges, heads] = [{indices.numel()}, {z.shape[1]}], got {list(alpha.shape)}"
        )
    if not (indptr.device == indices.device == z.device == alpha.device):
        raise ValueError(f"indptr, indices, z and alpha must be on one device, got {indptr.device}, "
                         f"{indices.device}, {z.device}, {alpha.device}")


def attention_aggregate(indptr: torch.Tensor, indices: torch.Tensor, z: torch.Tensor,
                        alpha: torch.Tensor) -> torch.Tensor:
    """``out[d, h] = sum_{e in [indptr[d], indptr[d+1])} alpha[e, h] * z[indices[e], h]``.

    Shapes: indptr [D+1] int64 (0 first, E last, non-decreasing), indices [E] int64 in [0, S),
    z [S, H, F] floating, alpha [E, H] of z's dtype -> [D, H, F]; an empty segment gives zeros.
    """
    _check_attention_types(indptr, indices, z, alpha)
    _check_indptr(indptr, indices.numel(), "indices")
    _check_index_range(indices, z.shape[0], "z")
    return _attend(indptr, indices, z, alpha)


def attention_aggregate_block(block, z: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """`attention_aggregate` over a `Block` (validated when made): ``z`` is ``[block.num_src, H, F]``,
    ``alpha`` ``[block.num_edges, H]`` in the block's CSC edge order -> ``[block.num_dst, H, F]``.

    Checks shapes, dtypes and devices only, so it forces no host sync."""
    if not all(hasattr(block, name) for name in ("indptr", "indices", "src_nodes")):
        raise TypeError(f"block must be a cherry.sampling.Block, got {type(block).__name__}")
    _check_attention_types(block.indptr, block.indices, z, alpha)
    _check_block_rows(block, z.shape[0], block.src_nodes.numel(), "z")
    return _attend(block.indptr, block.indices, z, alpha)


def _attend(indptr: torch.Tensor, indices: torch.Tensor, z: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    if not _native_ok("attention_aggregate_forward", z):
        return reference.attention_aggregate(indptr, indices, z, alpha)
    return torch.ops.cherry.attention_aggregate_forward(indptr.contiguous(), indices.contiguous(), z.contiguous(),
                                                        alpha.contiguous())
