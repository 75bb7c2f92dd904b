"""Public planning ops (contract: `cherry.ops.reference_planning`): `refine_groups` lowers a split's
input-layer redundancy by moving seeds between groups; `grow_groups` grows groups over the top layer's
shared neighbours; `group_shapes` counts each group's micro-batch without slicing it, and
`group_shapes_many` does so for several labellings at once; `tree_costs` gives each seed's cost over
its sampled tree.

Each validates its inputs, then runs ``torch.ops.cherry.<op>`` when the native extension is in use
and the pure-PyTorch reference otherwise (both return the same result). The underscored variants
skip validation for the planner, which built its inputs itself.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from cherry.ops import reference_planning as ref
from cherry.ops.extension import extension_available
from cherry.ops.sampling import check_index_vector, check_positions


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def refine_groups(indptrs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor], positions: torch.Tensor,
                  groups: torch.Tensor, weights: torch.Tensor, num_groups: int, num_inputs: int,
                  max_group_weight: float, num_passes: int = 3) -> torch.Tensor:
    """Refine the assignment ``groups[i]`` (in ``[0, num_groups)``, every group non-empty) of the seed
    at top-layer destination position ``positions[i]``; returns the new assignment (int64, ``[n]``).

    ``indptrs``/``indices``: the batch's blocks as CSC, input layer first; ``num_inputs``: the input
    layer's source count. ``weights`` (float64, ``[n]``): each seed's cost; no group's summed weight
    grows above ``max_group_weight`` (one already above it only shrinks). At most ``num_passes``
    greedy passes; the input-layer redundancy never rises.
    """
    if not isinstance(indptrs, (list, tuple)) or not isinstance(indices, (list, tuple)):
        raise TypeError("indptrs and indices must be lists of tensors (one per layer)")
    if len(indptrs) == 0 or len(indptrs) != len(indices):
        raise ValueError(f"indptrs and indices must be equally long and non-empty, got {len(indptrs)} and {len(indices)}")
    check_index_vector("positions", positions)
    device = positions.device
    _check_int("num_groups", num_groups, 1)
    _check_int("num_inputs", num_inputs, 1)
    _check_int("num_passes", num_passes, 0)
    num_src = num_inputs
    for l, (ip, ind) in enumerate(zip(indptrs, indices)):
        check_index_vector(f"indptrs[{l}]", ip, device)
        check_index_vector(f"indices[{l}]", ind, device)
        num_dst = ip.numel() - 1
        if num_dst < 0 or num_dst > num_src:
            raise ValueError(f"layer {l} has {num_dst} destinations, more than its {num_src} sources")
        if ind.numel() != int(ip[-1]) or (ind.numel() and (int(ind.min()) < 0 or int(ind.max()) >= num_src)):
            raise ValueError(f"indices[{l}] must hold indptrs[{l}][-1] entries in [0, {num_src})")
        num_src = num_dst
    check_positions("positions", positions, num_src)
    check_index_vector("groups", groups, device)
    if groups.numel() != positions.numel():
        raise ValueError(f"groups must have one entry per position ({positions.numel()}), got {groups.numel()}")
    if int(groups.min()) < 0 or int(groups.max()) >= num_groups:
        raise ValueError(f"groups must lie in [0, {num_groups})")
    if int((torch.bincount(groups, minlength=num_groups) == 0).sum()) > 0:
        raise ValueError(f"every one of the {num_groups} groups must hold a seed")
    if not isinstance(weights, torch.Tensor) or weights.dtype != torch.float64 or weights.shape != positions.shape:
        raise ValueError(f"weights must be a float64 tensor of shape {tuple(positions.shape)}")
    if isinstance(max_group_weight, bool) or not isinstance(max_group_weight, (int, float)):
        raise TypeError(f"max_group_weight must be a number, got {max_group_weight!r}")
    return _refine_groups(list(indptrs), list(indices), positions, groups, weights, num_groups, num_inputs,
                          float(max_group_weight), num_passes)


def refine_groups_many(indptrs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor], positions: torch.Tensor,
                       groups: torch.Tensor, weights: torch.Tensor, num_groups: int, num_inputs: int,
                       max_group_weights: Sequence[float], num_passes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """`refine_groups` of every row of ``groups`` (``[C, n]``) under its own cap ``max_group_weights[c]``,
    building the reaches once; returns ``(refined [C, n], summed distinct inputs [C])``."""
    if not isinstance(groups, torch.Tensor) or groups.dim() != 2 or groups.shape[0] < 1:
        raise ValueError("groups must be a [C, n] tensor with C >= 1")
    caps = list(max_group_weights) if isinstance(max_group_weights, (list, tuple)) else None
    if caps is None or len(caps) != groups.shape[0] or any(isinstance(c, bool) or not isinstance(c, (int, float)) for c in caps):
        raise ValueError(f"max_group_weights must be a list of {groups.shape[0]} numbers (one per row of groups)")
    for row in groups:  # each row validated as refine_groups validates its groups
        refine_groups(indptrs, indices, positions, row, weights, num_groups, num_inputs, float(caps[0]), 0)
    return _refine_groups_many(list(indptrs), list(indices), positions, groups, weights, num_groups, num_inputs,
                               [float(c) for c in caps], num_passes)


def _refine_groups_many(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                        groups: torch.Tensor, weights: torch.Tensor, num_groups: int, num_inputs: int,
                        max_group_weights: list[float], num_passes: int) -> tuple[torch.Tensor, torch.Tensor]:
    if positions.device.type in ("cpu", "cuda") and extension_available():
        return torch.ops.cherry.refine_groups_many(indptrs, indices, positions, groups, weights, num_groups,
                                                   num_inputs, max_group_weights, num_passes)
    return ref.refine_groups_many(indptrs, indices, positions, groups, weights, num_groups, num_inputs,
                                  max_group_weights, num_passes)


def _refine_groups(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                   groups: torch.Tensor, weights: torch.Tensor, num_groups: int, num_inputs: int,
                   max_group_weight: float, num_passes: int) -> torch.Tensor:
    if positions.device.type in ("cpu", "cuda") and extension_available():
        return torch.ops.cherry.refine_groups(indptrs, indices, positions, groups, weights, num_groups, num_inputs,
                                              max_group_weight, num_passes)
    return ref.refine_groups(indptrs, indices, positions, groups, weights, num_groups, num_inputs,
                             max_group_weight, num_passes)


def _check_layers(indptrs, indices, device) -> int:
    """Validate per-layer CSC lists (input layer first); return the top layer's destination count."""
    if not isinstance(indptrs, (list, tuple)) or not isinstance(indices, (list, tuple)):
        raise TypeError("indptrs and indices must be lists of tensors (one per layer)")
    if len(indptrs) == 0 or len(indptrs) != len(indices):
        raise ValueError(f"indptrs and indices must be equally long and non-empty, got {len(indptrs)} and {len(indices)}")
    num_src = None
    for l, (ip, ind) in enumerate(zip(indptrs, indices)):
        check_index_vector(f"indptrs[{l}]", ip, device)
        check_index_vector(f"indices[{l}]", ind, device)
        num_dst = ip.numel() - 1
        if num_dst < 0 or (num_src is not None and num_dst > num_src):
            raise ValueError(f"layer {l} has {num_dst} destinations, more than its {num_src} sources")
        limit = max(num_dst, int(ind.max()) + 1 if ind.numel() else 0) if num_src is None else num_src
        if ind.numel() != int(ip[-1]) or (ind.numel() and (int(ind.min()) < 0 or int(ind.max()) >= limit)):
            raise ValueError(f"indices[{l}] must hold indptrs[{l}][-1] entries in [0, {limit})")
        num_src = num_dst
    return num_src


def _check_groups(groups: torch.Tensor, n: int, num_groups: int, device) -> None:
    check_index_vector("groups", groups, device)
    if groups.numel() != n:
        raise ValueError(f"groups must have one entry per position ({n}), got {groups.numel()}")
    if n and (int(groups.min()) < 0 or int(groups.max()) >= num_groups):
        raise ValueError(f"groups must lie in [0, {num_groups})")


def grow_groups(indptr: torch.Tensor, indices: torch.Tensor, order: torch.Tensor, weights: torch.Tensor,
                num_groups: int) -> torch.Tensor:
    """Grow ``num_groups`` weight-balanced groups of the seeds at top-layer destination positions
    ``order`` (locality order) over the shared sources of the top block ``indptr``/``indices``;
    returns each seed's group (int64, ``[n]``, every group non-empty). ``weights`` (float64, ``[n]``)."""
    check_index_vector("order", order)
    device = order.device
    num_dst = _check_layers([indptr], [indices], device)
    check_positions("order", order, num_dst)
    _check_int("num_groups", num_groups, 1)
    if num_groups > order.numel():
        raise ValueError(f"num_groups must be in [1, {order.numel()}] for {order.numel()} seeds, got {num_groups}")
    if order.numel() >= 2**32:
        raise ValueError(f"grow_groups takes fewer than 2**32 seeds, got {order.numel()}")
    if not isinstance(weights, torch.Tensor) or weights.dtype != torch.float64 or weights.shape != order.shape:
        raise ValueError(f"weights must be a float64 tensor of shape {tuple(order.shape)}")
    return _grow_groups(indptr, indices, order, weights, num_groups)


def _grow_groups(indptr: torch.Tensor, indices: torch.Tensor, order: torch.Tensor, weights: torch.Tensor,
                 num_groups: int) -> torch.Tensor:
    if order.device.type in ("cpu", "cuda") and extension_available():
        return torch.ops.cherry.grow_groups(indptr, indices, order, weights, num_groups)
    return ref.grow_groups(indptr, indices, order, weights, num_groups)


def group_shapes(indptrs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor], positions: torch.Tensor,
                 groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """``[num_groups, L, 3]`` int64: per group (the seeds ``positions[groups == g]``) and layer (input
    layer first) the source, destination and edge counts of its sliced micro-batch."""
    check_index_vector("positions", positions)
    device = positions.device
    num_seeds = _check_layers(indptrs, indices, device)
    check_positions("positions", positions, num_seeds)
    _check_int("num_groups", num_groups, 1)
    _check_groups(groups, positions.numel(), num_groups, device)
    return _group_shapes(list(indptrs), list(indices), positions, groups, num_groups)


def _group_shapes(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                  groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    if positions.device.type in ("cpu", "cuda") and extension_available():
        return torch.ops.cherry.group_shapes(indptrs, indices, positions, groups, num_groups)
    return ref.group_shapes(indptrs, indices, positions, groups, num_groups)


def group_shapes_many(indptrs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor], positions: torch.Tensor,
                      groups: torch.Tensor, num_groups: int, num_inputs: int) -> torch.Tensor:
    """``[C, num_groups, L, 3]`` int64: `group_shapes` of every row of ``groups`` (``[C, n]``, a group
    in ``[0, num_groups)`` per position), in one walk of the batch's edges (for ``num_groups <= 64``);
    ``num_inputs``: the input layer's source count."""
    check_index_vector("positions", positions)
    device = positions.device
    num_seeds = _check_layers(indptrs, indices, device)
    check_positions("positions", positions, num_seeds)
    _check_int("num_groups", num_groups, 1)
    _check_int("num_inputs", num_inputs, 1)
    if indptrs[0].numel() - 1 > num_inputs or (indices[0].numel() and int(indices[0].max()) >= num_inputs):
        raise ValueError(f"num_inputs ({num_inputs}) must exceed every input-layer position")
    if not isinstance(groups, torch.Tensor) or groups.dim() != 2 or groups.shape[0] < 1:
        raise ValueError(f"groups must be a [C, {positions.numel()}] tensor with C >= 1")
    for row in groups:
        _check_groups(row, positions.numel(), num_groups, device)
    return _group_shapes_many(list(indptrs), list(indices), positions, groups, num_groups, num_inputs)


def _group_shapes_many(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                       groups: torch.Tensor, num_groups: int, num_inputs: int) -> torch.Tensor:
    if positions.device.type in ("cpu", "cuda") and extension_available():
        return torch.ops.cherry.group_shapes_many(indptrs, indices, positions, groups, num_groups, num_inputs)
    return ref.group_shapes_many(indptrs, indices, positions, groups, num_groups, num_inputs)


def tree_costs(indptrs: Sequence[torch.Tensor], indices: Sequence[torch.Tensor], per_dst: Sequence[float],
               per_edge: Sequence[float]) -> torch.Tensor:
    """``[num_seeds]`` float64: each top-layer destination's cost over its whole sampled tree, counted
    with multiplicity: per layer (input first) ``per_dst[l] + per_edge[l] * in-degree`` of every node
    of the tree at that layer, summed (see `cherry.ops.reference_planning`). ``indptrs``/``indices``:
    the batch's blocks as CSC, input layer first; one ``per_dst`` and ``per_edge`` number per layer."""
    device = indptrs[0].device if isinstance(indptrs, (list, tuple)) and indptrs else None
    _check_layers(indptrs, indices, device)
    for name, values in (("per_dst", per_dst), ("per_edge", per_edge)):
        if not isinstance(values, (list, tuple)) or len(values) != len(indptrs):
            raise ValueError(f"{name} must hold one number per layer ({len(indptrs)}), got {values!r}")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise ValueError(f"{name} must hold finite numbers, got {values!r}")
    return _tree_costs(list(indptrs), list(indices), [float(v) for v in per_dst], [float(v) for v in per_edge])


def _tree_costs(indptrs: list[torch.Tensor], indices: list[torch.Tensor], per_dst: list[float],
                per_edge: list[float]) -> torch.Tensor:
    if indptrs[0].device.type in ("cpu", "cuda") and extension_available():
        return torch.ops.cherry.tree_costs(indptrs, indices, per_dst, per_edge)
    return ref.tree_costs(indptrs, indices, per_dst, per_edge)
