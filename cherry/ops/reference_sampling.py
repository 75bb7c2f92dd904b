"""Pure-PyTorch references of the sampling ops `sample_neighbors`, `slice_layer` and `slice_layer_many`.

They are the fallback without the native extension and the oracle of the op tests. The native
kernels (csrc/cpu, csrc/cuda) must give bit-identical results, so the random choice is made by a
counter-based hash that all three implement the same way:

- ``mix32`` is Chris Wellons' "lowbias32" integer hash, a bijection of 32-bit words;
- every seed node ``v`` gets a state ``h = mix32(mix32(mix32(mix32(s_lo ^ GOLDEN) ^ s_hi) ^ v_lo) ^ v_hi)``
  from the layer's ``random_seed`` (``s_lo``/``s_hi`` its low/high 32 bits, two's complement);
- a node of degree ``d`` with more than ``k = fanout`` in-neighbours picks ``k`` adjacency offsets by
  Robert Floyd's algorithm: for ``j`` in ``d-k, ..., d-1``, draw ``t = floor(mix32(h ^ (j mod 2**32))
  * (j+1) / 2**32)`` (multiply-shift: a value in ``[0, j]`` without a division); pick ``t`` unless it
  is already picked, else pick ``j``. The picks are kept in adjacency order.
- a node with at most ``fanout`` in-neighbours (or ``fanout == -1``) keeps all of them, no randomness.

Floyd's algorithm yields every ``k``-subset with equal probability when each ``t`` is uniform on
``[0, j]``; the hash outputs are i.i.d.-looking and the draw's bias is below ``(j+1) / 2**32`` (degrees
below ``2**32`` are assumed for uniformity; larger ones still give distinct, deterministic picks). Its cost
is ``O(fanout)`` hashes per seed whatever the degree, which is what makes hubs cheap.
Tensors here hold 32-bit words in int64 and multiply in two 16-bit halves, so no step overflows.
"""
from __future__ import annotations

from itertools import accumulate

import torch

MASK32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9
_MUL1 = 0x7FEB352D
_MUL2 = 0x846CA68B


def mix32_int(x: int) -> int:
    """`mix32` on a Python int (the scalar steps of the key derivation)."""
    x &= MASK32
    x ^= x >> 16
    x = (x * _MUL1) & MASK32
    x ^= x >> 15
    x = (x * _MUL2) & MASK32
    x ^= x >> 16
    return x


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # (x * c) mod 2**32 for x in [0, 2**32): split c so every partial product stays below 2**49.
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on int64 tensors holding 32-bit words (values in ``[0, 2**32)``)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _MUL1)
    x = x ^ (x >> 15)
    x = _mul32(x, _MUL2)
    return x ^ (x >> 16)


def node_states(random_seed: int, nodes: torch.Tensor) -> torch.Tensor:
    """Per-node hash state ``h`` (int64 holding a 32-bit word) for int64 node ids."""
    s = random_seed & 0xFFFFFFFFFFFFFFFF
    base = mix32_int(mix32_int((s & MASK32) ^ GOLDEN) ^ (s >> 32))
    h = mix32((nodes & MASK32) ^ base)
    return mix32(h ^ ((nodes >> 32) & MASK32))


def scale_draw(words: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``floor(words * m / 2**32)`` exactly, for 32-bit ``words`` and ``1 <= m < 2**63`` (int64 tensors):
    a draw in ``[0, m)``. The low half of ``m`` is multiplied in 16-bit pieces so nothing overflows."""
    lo = m & MASK32
    mulhi = ((words * (lo >> 16)) + ((words * (lo & 0xFFFF)) >> 16)) >> 16
    return words * (m >> 32) + mulhi


def floyd_offsets(states: torch.Tensor, deg: torch.Tensor, fanout: int) -> torch.Tensor:
    """``[m, fanout]`` picked adjacency offsets, ascending per row, for ``m`` nodes with hash
    ``states`` and degrees ``deg > fanout`` (Floyd's algorithm, vectorised over the nodes)."""
    picks = torch.empty((states.numel(), fanout), dtype=torch.int64, device=states.device)
    for step in range(fanout):
        j = deg - (fanout - step)
        t = scale_draw(mix32(states ^ (j & MASK32)), j + 1)
        # Earlier picks all lie below j, so "already picked" is a test against this row's picks.
        seen = (picks[:, :step] == t.unsqueeze(1)).any(1)
        picks[:, step] = torch.where(seen, j, t)
    return picks.sort(dim=1).values


def _segments(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For segments of the given lengths: the segment id and the offset within it of every item."""
    seg = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    offs = torch.arange(seg.numel(), device=lengths.device) - starts[seg]
    return seg, offs


def sample_neighbors(
    indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanout: int, random_seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer of uniform neighbour sampling without replacement (see the module docstring).

    Returns ``(block_indptr [S+1], block_indices [E'], src_nodes)``: destination ``i`` (= ``seeds[i]``)
    aggregates ``src_nodes[block_indices[block_indptr[i]:block_indptr[i+1]]]``; ``src_nodes`` is the
    seeds in the given order followed by the newly seen sources in first-appearance order.
    Seeds must be distinct (the caller validates).
    """
    device = seeds.device
    num_seeds = seeds.numel()
    starts = indptr[seeds]
    deg = indptr[seeds + 1] - starts
    count = deg if fanout < 0 else deg.clamp(max=fanout)
    block_indptr = torch.zeros(num_seeds + 1, dtype=torch.int64, device=device)
    torch.cumsum(count, 0, out=block_indptr[1:])

    # Positions into `indices` of every kept edge, in output order: take-all seeds copy their
    # adjacency; the others (which keep exactly `fanout`) take their Floyd picks.
    need = deg > count
    edge_pos = torch.empty(int(block_indptr[-1]), dtype=torch.int64, device=device)
    seg, offs = _segments(torch.where(need, torch.zeros_like(deg), deg))
    edge_pos[block_indptr[seg] + offs] = starts[seg] + offs
    if bool(need.any()):
        rows = torch.nonzero(need).squeeze(1)
        picks = floyd_offsets(node_states(random_seed, seeds[rows]), deg[rows], fanout)
        slots = block_indptr[rows].unsqueeze(1) + torch.arange(fanout, device=device)
        edge_pos[slots] = starts[rows].unsqueeze(1) + picks
    sampled = indices[edge_pos]

    src_nodes, local = first_appearance_unique(torch.cat([seeds, sampled]))
    return block_indptr, local[num_seeds:], src_nodes


def first_appearance_unique(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct values in order of first appearance, and each value's index among them."""
    uniq, inverse = torch.unique(values, return_inverse=True)
    big = values.numel()
    first = torch.full((uniq.numel(),), big, dtype=torch.int64, device=values.device)
    first = first.scatter_reduce(0, inverse, torch.arange(big, device=values.device), reduce="amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=values.device)
    return uniq[order], rank[inverse]


def slice_layer(
    indptr: torch.Tensor, indices: torch.Tensor, dst_positions: torch.Tensor, num_parent_src: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Restrict one block to the destinations at ``dst_positions`` (distinct, in the parent's dst range).

    Returns ``(sub_indptr, sub_indices, src_positions)``: sub-destination ``i`` is parent destination
    ``dst_positions[i]`` with exactly its parent in-edges in the same order; ``src_positions`` (positions
    among the parent's ``num_parent_src`` sources) are ``dst_positions`` followed by the newly reached
    sources in first-appearance order; ``sub_indices`` are local positions into ``src_positions``.
    """
    device = dst_positions.device
    starts = indptr[dst_positions]
    deg = indptr[dst_positions + 1] - starts
    sub_indptr = torch.zeros(dst_positions.numel() + 1, dtype=torch.int64, device=device)
    torch.cumsum(deg, 0, out=sub_indptr[1:])
    seg, offs = _segments(deg)
    edges = indices[starts[seg] + offs]

    # Dense over the parent's sources: the first appearance of every reached position.
    seq = torch.cat([dst_positions, edges])
    big = seq.numel()
    first = torch.full((num_parent_src,), big, dtype=torch.int64, device=device)
    first.scatter_reduce_(0, seq, torch.arange(big, device=device), reduce="amin")
    reached = torch.nonzero(first < big).squeeze(1)
    src_positions = reached[torch.argsort(first[reached])]
    local = torch.empty(num_parent_src, dtype=torch.int64, device=device)
    local[src_positions] = torch.arange(src_positions.numel(), device=device)
    return sub_indptr, local[edges], src_positions


# (sub_indptr, sub_indices, src_positions, src_nodes, src_offsets, edge_offsets): see `slice_layer_many`
SliceManyOutputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int]]


def slice_layer_many(indptr: torch.Tensor, indices: torch.Tensor, dst_positions: torch.Tensor,
                     group_offsets: list[int], parent_src_nodes: torch.Tensor) -> SliceManyOutputs:
    """`slice_layer` of K groups at once, outputs concatenated group after group.

    The parent block has ``num_parent_src = len(parent_src_nodes)`` sources with global ids
    ``parent_src_nodes``. Group ``g`` is ``dst_positions[group_offsets[g]:group_offsets[g + 1]]``
    (``group_offsets``: a list of ``K + 1`` ints from 0 to ``len(dst_positions)``, non-decreasing;
    positions distinct within a group, possibly shared between groups). Returns ``(sub_indptr,
    sub_indices, src_positions, src_nodes, src_offsets, edge_offsets)``: group ``g``'s ``slice_layer``
    outputs are ``sub_indptr[group_offsets[g] + g : group_offsets[g + 1] + g + 1]`` (starting at 0),
    ``sub_indices[edge_offsets[g]:edge_offsets[g + 1]]`` and
    ``src_positions[src_offsets[g]:src_offsets[g + 1]]``; ``src_nodes`` is
    ``parent_src_nodes[src_positions]``; both offsets are lists of ``K + 1`` ints.
    """
    device = dst_positions.device
    bounds = list(group_offsets)
    num_parent_src = parent_src_nodes.numel()
    outs = [slice_layer(indptr, indices, dst_positions[a:b], num_parent_src) for a, b in zip(bounds[:-1], bounds[1:])]

    def cat(i: int) -> torch.Tensor:
        return torch.cat([o[i] for o in outs]) if outs else torch.empty(0, dtype=torch.int64, device=device)

    def offsets(i: int) -> list[int]:
        return [0, *accumulate(o[i].numel() for o in outs)]

    src_positions = cat(2)
    return cat(0), cat(1), src_positions, parent_src_nodes[src_positions], offsets(2), offsets(1)
