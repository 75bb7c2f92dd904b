"""Public aggregation ops on CSC segments: `csr_aggregate` and `edge_softmax`.

Input validation happens here, before any kernel. (The native, O(destinations x features) memory
path is added by the native-ops work; until then both run the reference.)
"""
from __future__ import annotations

import torch

from cherry.ops import reference


def csr_aggregate(indptr: torch.Tensor, indices: torch.Tensor, x_src: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    """Aggregate source rows into destination rows: ``out[i] = reduce(x_src[indices[seg(i)]])``."""
    if reduce not in reference.REDUCTIONS:
        raise ValueError(f"reduce must be one of {reference.REDUCTIONS}, got {reduce!r}")
    return reference.csr_aggregate(indptr, indices, x_src, reduce)


def edge_softmax(indptr: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of per-edge scores ([E] or [E, H]) over each destination's in-edges."""
    return reference.edge_softmax(indptr, scores)
