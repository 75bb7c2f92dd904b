"""Public sampling ops: `sample_neighbors` (one layer of neighbour sampling), `slice_layer` (restrict
one block to some of its destinations, the per-layer step of ``slice_blocks``) and `slice_layer_many`
(the same for K groups of destinations in one call, the per-layer step of ``slice_blocks_many``).

All three validate their inputs here, before any kernel, then run ``torch.ops.cherry.*`` when the native
extension is in use and the pure-PyTorch reference (`cherry.ops.reference_sampling`) otherwise; the two
give identical results (the randomness is a counter-based hash, see that module). The underscored
variants skip validation for callers that produced their inputs themselves (the sampler's inner
layers, the slicer's lower layers), where a duplicate check would cost a sort per layer.
"""
from __future__ import annotations

from typing import Any

import torch

from cherry.ops import reference_sampling as ref
from cherry.ops.extension import extension_available
from cherry.ops.reference_sampling import SliceManyOutputs

_SEED_RANGE = (-(2**63), 2**63 - 1)
_FANOUT_MAX = 2**63 - 1  # the native op's int64 argument


def check_index_vector(name: str, t: Any, device: torch.device | None = None,
                       dtype_error: type[Exception] = ValueError) -> None:
    """Raise unless ``t`` is a 1-D int64 tensor (on ``device`` when given); a wrong dtype raises
    ``dtype_error`` (`cherry.data.Graph` raises TypeError, the ops ValueError)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int64:
        raise dtype_error(f"{name} must have dtype torch.int64, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on device {device}, got {t.device}")


def check_positions(name: str, t: torch.Tensor, upper: int) -> None:
    """Raise unless ``t`` is non-empty, with distinct values in ``[0, upper)``."""
    if t.numel() == 0:
        raise ValueError(f"{name} must not be empty")
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= upper:
        raise ValueError(f"{name} must lie in [0, {upper}), found values in [{lo}, {hi}]")
    if torch.unique(t).numel() != t.numel():
        raise ValueError(f"{name} must not contain duplicates ({t.numel() - torch.unique(t).numel()} repeated)")


def check_fanout(fanout: Any) -> None:
    if isinstance(fanout, bool) or not isinstance(fanout, int):
        raise TypeError(f"fanout must be an int (positive, or -1 for all neighbours), got {fanout!r}")
    if fanout != -1 and not 1 <= fanout <= _FANOUT_MAX:
        raise ValueError(f"fanout must be positive or -1 (all neighbours), and at most 2**63 - 1, got {fanout}")


def _native(t: torch.Tensor) -> bool:
    return t.device.type in ("cpu", "cuda") and extension_available()


def sample_neighbors(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, random_seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer of uniform neighbour sampling without replacement over a CSC graph.

    ``indices[indptr[v]:indptr[v+1]]`` are the in-neighbours of ``v``. Each seed keeps
    ``min(fanout, degree)`` of them (all for ``fanout == -1``), in adjacency order. Returns
    ``(block_indptr [S+1], block_indices, src_nodes)``: ``src_nodes`` are the seeds in the given order
    followed by newly seen sources in first-appearance order, ``block_indices`` local positions into it.
    Deterministic in ``random_seed`` and identical across implementations and devices.
    """
    check_index_vector("indptr", indptr)
    check_index_vector("indices", indices, indptr.device)
    check_index_vector("seeds", seeds, indptr.device)
    check_fanout(fanout)
    if isinstance(random_seed, bool) or not isinstance(random_seed, int):
        raise TypeError(f"random_seed must be an int, got {random_seed!r}")
    if not _SEED_RANGE[0] <= random_seed <= _SEED_RANGE[1]:
        raise ValueError(f"random_seed must fit in a signed 64-bit int, got {random_seed}")
    check_positions("seeds", seeds, indptr.numel() - 1)
    return _sample_neighbors(indptr, indices, seeds, fanout, random_seed)


def _sample_neighbors(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, random_seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if _native(seeds):
        return tuple(torch.ops.cherry.sample_neighbors(indptr, indices, seeds, fanout, random_seed))
    return ref.sample_neighbors(indptr, indices, seeds, fanout, random_seed)


def slice_layer(
    indptr: torch.Tensor, indices: torch.Tensor, dst_positions: torch.Tensor, num_parent_src: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Restrict a block (CSC ``indptr``/``indices`` over local source positions) to some destinations.

    ``dst_positions`` are distinct positions among the block's ``len(indptr) - 1`` destinations.
    Returns ``(sub_indptr, sub_indices, src_positions)``: sub-destination ``i`` keeps exactly the
    in-edges of ``dst_positions[i]`` in their order; ``src_positions`` (positions among the block's
    ``num_parent_src`` sources) are ``dst_positions`` then newly reached sources in first-appearance
    order; ``sub_indices`` are local positions into ``src_positions``.
    """
    _check_slice_parent(indptr, indices, num_parent_src)
    check_index_vector("dst_positions", dst_positions, indptr.device)
    check_positions("dst_positions", dst_positions, indptr.numel() - 1)
    return _slice_layer(indptr, indices, dst_positions, num_parent_src)


def _check_slice_parent(indptr: torch.Tensor, indices: torch.Tensor, num_parent_src: Any) -> None:
    check_index_vector("indptr", indptr)
    check_index_vector("indices", indices, indptr.device)
    num_parent_dst = indptr.numel() - 1
    if isinstance(num_parent_src, bool) or not isinstance(num_parent_src, int):
        raise TypeError(f"num_parent_src must be an int, got {num_parent_src!r}")
    if num_parent_src < num_parent_dst:
        raise ValueError(f"num_parent_src must be >= the block's {num_parent_dst} destinations, got {num_parent_src}")
    if indices.numel() > 0 and (int(indices.min()) < 0 or int(indices.max()) >= num_parent_src):
        raise ValueError(f"indices must lie in [0, {num_parent_src})")


def _slice_layer(
    indptr: torch.Tensor, indices: torch.Tensor, dst_positions: torch.Tensor, num_parent_src: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if _native(dst_positions):
        return tuple(torch.ops.cherry.slice_layer(indptr, indices, dst_positions, num_parent_src))
    return ref.slice_layer(indptr, indices, dst_positions, num_parent_src)


def slice_layer_many(indptr: torch.Tensor, indices: torch.Tensor, dst_positions: torch.Tensor,
                     group_offsets: list[int], parent_src_nodes: torch.Tensor) -> SliceManyOutputs:
    """`slice_layer` of K >= 1 non-empty groups of destinations in one call.

    The parent block (CSC ``indptr``/``indices``) has the global source ids ``parent_src_nodes``.
    Group ``g`` is ``dst_positions[group_offsets[g]:group_offsets[g + 1]]`` (``group_offsets``: a list
    of K + 1 strictly increasing ints from 0 to ``len(dst_positions)``); positions are distinct within
    a group and may repeat across groups. Returns ``(sub_indptr, sub_indices, src_positions,
    src_nodes, src_offsets, edge_offsets)``, each group's `slice_layer` outputs concatenated: group
    ``g`` owns ``sub_indptr[group_offsets[g] + g : group_offsets[g + 1] + g + 1]``,
    ``sub_indices[edge_offsets[g]:edge_offsets[g + 1]]`` and
    ``src_positions[src_offsets[g]:src_offsets[g + 1]]``; ``src_nodes`` is
    ``parent_src_nodes[src_positions]`` (the offsets: lists of K + 1 ints).
    """
    check_index_vector("parent_src_nodes", parent_src_nodes, indptr.device)
    _check_slice_parent(indptr, indices, parent_src_nodes.numel())
    check_index_vector("dst_positions", dst_positions, indptr.device)
    if not isinstance(group_offsets, (list, tuple)) or not all(
        isinstance(o, int) and not isinstance(o, bool) for o in group_offsets
    ):
        raise TypeError(f"group_offsets must be a list of ints, got {group_offsets!r}")
    n, k = dst_positions.numel(), len(group_offsets) - 1
    if k < 1:
        raise ValueError(f"group_offsets must hold K + 1 >= 2 entries, got {k + 1}")
    lengths = [b - a for a, b in zip(group_offsets, group_offsets[1:])]
    if group_offsets[0] != 0 or group_offsets[-1] != n or min(lengths) <= 0:
        raise ValueError(f"group_offsets must rise strictly from 0 to {n} (every group non-empty), got {list(group_offsets)}")
    num_parent_dst = indptr.numel() - 1
    lo, hi = int(dst_positions.min()), int(dst_positions.max())
    if lo < 0 or hi >= num_parent_dst:
        raise ValueError(f"dst_positions must lie in [0, {num_parent_dst}), found values in [{lo}, {hi}]")
    group = torch.repeat_interleave(
        torch.arange(k, device=dst_positions.device), torch.tensor(lengths, device=dst_positions.device)
    )
    if torch.unique(group * num_parent_dst + dst_positions).numel() != n:
        raise ValueError("dst_positions must not contain duplicates within a group")
    return _slice_layer_many(indptr, indices, dst_positions, list(group_offsets), parent_src_nodes)


def _slice_layer_many(indptr: torch.Tensor, indices: torch.Tensor, dst_positions: torch.Tensor,
                      group_offsets: list[int], parent_src_nodes: torch.Tensor) -> SliceManyOutputs:
    if _native(dst_positions):
        return tuple(torch.ops.cherry.slice_layer_many(indptr, indices, dst_positions, group_offsets, parent_src_nodes))
    return ref.slice_layer_many(indptr, indices, dst_positions, group_offsets, parent_src_nodes)
