"""Public aggregation ops on CSC segments: `csr_aggregate` and `edge_softmax`.

Destination ``d`` owns the edge positions ``indptr[d]:indptr[d+1]``; ``indices[e]`` is the source row
of edge ``e``. Inputs are validated here, before any kernel, for both implementations.

Two entry points per op: the tensor ones (`csr_aggregate`, `edge_softmax`) check values too (indptr
endpoints and order, index range), which reads scalars back from the device: a host sync. The block
ones (`aggregate_block`, `segment_reduce`, `edge_softmax_block`) take a `cherry.sampling.Block`,
which was validated when it was made, so they check only shapes, dtypes and devices (host metadata)
and never synchronise: these are what the models call inside a micro-batch.

Native path (``torch.ops.cherry.*``, when the extension is built, the device has a kernel and the dtype
is float32/float64): `csr_aggregate` never materialises an [E, F] message tensor. Its forward writes
[D, F] directly; "max" also keeps an int64 [D, F] arg-max (edge positions) for the backward; the CPU
backward builds an O(S + E) int64 transposed adjacency. Everything else falls back to the reference in
`cherry.ops.reference` (O(E x F) memory), which is also the tests' oracle.
Gradients flow to ``x_src``/``scores`` only (the graph is integer data): the native ops' autograd is
registered with `torch.library.register_autograd` (`cherry.ops.registrations`) and is first-order only
(no double backward).
"""
from __future__ import annotations

import math

import torch

from cherry.ops import reference
from cherry.ops.extension import extension_available

NATIVE_DTYPES = (torch.float32, torch.float64)


def _check_indptr(indptr: torch.Tensor, num_edges: int, edges_name: str) -> None:
    if not isinstance(indptr, torch.Tensor) or indptr.dtype != torch.int64 or indptr.dim() != 1:
        raise TypeError(f"indptr must be a 1-D int64 tensor, got {_describe(indptr)}")
    if indptr.numel() < 1:
        raise ValueError("indptr must have at least one entry (num_dst + 1), got an empty tensor")
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0 or last != num_edges:
        raise ValueError(
            f"indptr must start at 0 and end at len({edges_name}) = {num_edges}, got {first} and {last}"
        )
    if indptr.numel() > 1 and bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError("indptr must be non-decreasing (a CSC segmentation), but it decreases somewhere")


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D {value.dtype} tensor on {value.device}"
    return f"{type(value).__name__}"


def _validate_aggregate(indptr: torch.Tensor, indices: torch.Tensor, x_src: torch.Tensor, reduce: str) -> None:
    _check_aggregate_types(indptr, indices, x_src, reduce)
    _check_indptr(indptr, indices.numel(), "indices")
    _check_index_range(indices, x_src.shape[0], "x_src")


def _check_index_range(indices: torch.Tensor, num_rows: int, rows_name: str) -> None:
    """Every index in ``[0, num_rows)``; reads the extremes back from the device (a host sync)."""
    if indices.numel() > 0:
        lo, hi = (int(v) for v in torch.aminmax(indices))
        if lo < 0 or hi >= num_rows:
            raise ValueError(f"indices must lie in [0, {num_rows}) (rows of {rows_name}), got values in [{lo}, {hi}]")


def _check_aggregate_types(indptr: torch.Tensor, indices: torch.Tensor, x_src: torch.Tensor, reduce: str) -> None:
    """Host-only checks (no tensor value is read)."""
    if reduce not in reference.REDUCTIONS:
        raise ValueError(f"reduce must be one of {reference.REDUCTIONS}, got {reduce!r}")
    if not isinstance(x_src, torch.Tensor) or not x_src.is_floating_point() or x_src.dim() < 2:
        raise TypeError(f"x_src must be a floating tensor [num_src, features, ...], got {_describe(x_src)}")
    if not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or indices.dim() != 1:
        raise TypeError(f"indices must be a 1-D int64 tensor, got {_describe(indices)}")
    if isinstance(indptr, torch.Tensor) and not (indptr.device == indices.device == x_src.device):
        raise ValueError(
            f"indptr, indices and x_src must be on one device, got {indptr.device}, {indices.device}, {x_src.device}"
        )
    if not isinstance(indptr, torch.Tensor) or indptr.dtype != torch.int64 or indptr.dim() != 1:
        raise TypeError(f"indptr must be a 1-D int64 tensor, got {_describe(indptr)}")


def _validate_softmax(indptr: torch.Tensor, scores: torch.Tensor) -> None:
    _check_softmax_types(indptr, scores)
    _check_indptr(indptr, scores.shape[0], "scores")


def _check_softmax_types(indptr: torch.Tensor, scores: torch.Tensor) -> None:
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point() or scores.dim() not in (1, 2):
        raise TypeError(f"scores must be a floating tensor [E] or [E, H], got {_describe(scores)}")
    if isinstance(indptr, torch.Tensor) and indptr.device != scores.device:
        raise ValueError(f"indptr and scores must be on one device, got {indptr.device} and {scores.device}")


def _native_ok(op: str, tensor: torch.Tensor) -> bool:
    """True when ``torch.ops.cherry.<op>`` can run on this tensor's device and dtype."""
    if tensor.dtype not in NATIVE_DTYPES or not extension_available():
        return False
    if tensor.device.type == "cpu":
        return True
    try:  # a CUDA kernel exists only when the extension was built with CUDA
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"cherry::{op}", tensor.device.type.upper())
    except (AttributeError, RuntimeError):
        return False


def csr_aggregate(indptr: torch.Tensor, indices: torch.Tensor, x_src: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    """Aggregate source rows into destination rows: ``out[d] = reduce(x_src[indices[indptr[d]:indptr[d+1]]])``.

    Shapes: indptr [D+1] int64 (0 first, E last, non-decreasing), indices [E] int64 in [0, S),
    x_src [S, F, ...] floating -> [D, F, ...]. ``reduce`` is "sum", "mean" or "max"; empty segments
    give zeros. Max sends each gradient element to the first maximum of its segment (the reference
    splits it among exactly tied maxima; both agree when no distinct sources tie).
    """
    _validate_aggregate(indptr, indices, x_src, reduce)
    return _aggregate(indptr, indices, x_src, reduce)


def _aggregate(indptr: torch.Tensor, indices: torch.Tensor, x_src: torch.Tensor, reduce: str) -> torch.Tensor:
    if not _native_ok("csr_aggregate_forward", x_src):
        return reference.csr_aggregate(indptr, indices, x_src, reduce)
    trailing = tuple(x_src.shape[1:])
    flat = x_src.reshape(x_src.shape[0], math.prod(trailing)).contiguous()
    out, _ = torch.ops.cherry.csr_aggregate_forward(indptr.contiguous(), indices.contiguous(), flat, reduce)
    return out.view((out.shape[0],) + trailing)


def edge_softmax(indptr: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of per-edge ``scores`` ([E] or [E, H], floating) over each destination's in-edges.

    Returns a tensor shaped like ``scores`` whose entries sum to 1 over every non-empty segment (per head).
    """
    _validate_softmax(indptr, scores)
    return _softmax(indptr, scores)


def _softmax(indptr: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    if not _native_ok("edge_softmax_forward", scores):
        return reference.edge_softmax(indptr, scores)
    return torch.ops.cherry.edge_softmax_forward(indptr.contiguous(), scores.contiguous())


def _check_block_rows(block, rows: int, what: str, name: str) -> None:
    if not hasattr(block, "indptr") or not hasattr(block, "indices"):
        raise TypeError(f"block must be a cherry.sampling.Block, got {type(block).__name__}")
    if rows != what:
        raise ValueError(f"{name} has {rows} rows but the block has {what}; they must be equal")


def aggregate_block(block, x_src: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    """`csr_aggregate` over a `Block` (validated when made): ``x_src`` is ``[block.num_src, F, ...]``.

    Checks shapes, dtypes and devices only, so it forces no host sync."""
    _check_aggregate_types(block.indptr, block.indices, x_src, reduce)
    _check_block_rows(block, x_src.shape[0], block.src_nodes.numel(), "x_src")
    return _aggregate(block.indptr, block.indices, x_src, reduce)


def segment_reduce(block, values: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """Reduce per-edge ``values`` (``[block.num_edges, F]``, in the block's CSC edge order) over each
    destination's segment -> ``[block.num_dst, F]``. No host sync."""
    edge_ids = torch.arange(block.indices.numel(), device=block.indices.device)
    _check_aggregate_types(block.indptr, edge_ids, values, reduce)
    _check_block_rows(block, values.shape[0], block.indices.numel(), "values")
    return _aggregate(block.indptr, edge_ids, values, reduce)


def edge_softmax_block(block, scores: torch.Tensor) -> torch.Tensor:
    """`edge_softmax` over a `Block` (``scores``: ``[block.num_edges]`` or ``[block.num_edges, H]``).
    No host sync."""
    _check_softmax_types(block.indptr, scores)
    _check_block_rows(block, scores.shape[0], block.indices.numel(), "scores")
    return _softmax(block.indptr, scores)
