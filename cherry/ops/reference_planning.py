"""Pure-PyTorch reference of the planning op `refine_groups` (the native kernels' oracle and fallback).

Contract (shared with csrc/cpu/refine_groups.cpp and csrc/cuda/refine_groups.cu, which must return the
same groups bit for bit):

- The batch's blocks are given as per-layer CSC ``indptrs[l]``/``indices[l]`` (input layer first);
  positions are consistent across layers (a block's destinations are a prefix of its sources, and its
  sources are the next lower block's destinations), so every node of the batch is one position in
  ``[0, num_inputs)``, the input layer's sources.
- The *reach* ``R(i)`` of seed ``positions[i]`` is the set of input positions its micro-batch needs:
  the seed, and, layer by layer from the top, every source of every node reached so far. A group's
  input nodes are exactly the union of its seeds' reaches, so ``sum_g |union_{i in g} R(i)|`` is the
  numerator of the input-layer redundancy, which the refinement lowers.
- Greedy passes over the seeds in the given order: seed ``i`` in group ``a`` (holding more than one
  seed) moves to the group ``b != a`` of highest gain ``#{u in R(i): only i holds u in a} -
  #{u in R(i): no seed holds u in b}`` if that gain is positive and ``W[b] + weights[i] <=
  max_group_weight`` (``W`` the groups' summed weights, updated in float64 in move order); ties go to
  the lowest ``b``. A pass without a move ends the refinement early; at most ``num_passes`` passes.
  Every move strictly lowers the objective, so the result is never worse than the input groups.

Cost: building the reaches is linear in the edges of the seeds' sampled trees (with multiplicity),
each pass ``O(sum_i |R(i)| * K)``.
"""
from __future__ import annotations

import torch


def reaches(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
            num_inputs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ptr [n+1], pos)``: ``pos[ptr[i]:ptr[i+1]]`` is ``R(i)`` ascending (see module docstring)."""
    n = positions.numel()
    device = positions.device
    owner = torch.arange(n, dtype=torch.int64, device=device)
    node = positions.clone()
    for l in range(len(indptrs) - 1, -1, -1):
        ip, ind = indptrs[l], indices[l]
        start = ip.index_select(0, node)
        deg = ip.index_select(0, node + 1) - start
        total = int(deg.sum())
        seg = torch.repeat_interleave(torch.arange(node.numel(), device=device), deg)
        offs = torch.arange(total, device=device) - (torch.cumsum(deg, 0) - deg).index_select(0, seg)
        new_node = ind.index_select(0, start.index_select(0, seg) + offs)
        keys = torch.unique(torch.cat([owner * num_inputs + node, owner.index_select(0, seg) * num_inputs + new_node]))
        owner, node = keys // num_inputs, keys % num_inputs
    counts = torch.bincount(owner, minlength=n)
    ptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr, node


def refine_groups(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                  groups: torch.Tensor, weights: torch.Tensor, num_groups: int, num_inputs: int,
                  max_group_weight: float, num_passes: int) -> torch.Tensor:
    """The refined group of every seed (int64, like ``groups``); inputs validated by the caller."""
    k = num_groups
    ptr, pos = reaches(indptrs, indices, positions, num_inputs)
    ptr_l, w = ptr.tolist(), weights.tolist()
    g = groups.clone()
    cnt = torch.zeros((num_inputs, k), dtype=torch.int64, device=positions.device)
    cnt.index_put_((pos, torch.repeat_interleave(g, ptr[1:] - ptr[:-1])), torch.ones_like(pos), accumulate=True)
    size = torch.bincount(g, minlength=k).tolist()
    total = [0.0] * k
    for i, gi in enumerate(g.tolist()):
        total[gi] += w[i]
    g_list = g.tolist()
    for _ in range(num_passes):
        moved = 0
        for i in range(positions.numel()):
            a = g_list[i]
            if size[a] <= 1:
                continue
            reach = pos[ptr_l[i]:ptr_l[i + 1]]
            rows = cnt.index_select(0, reach)
            lose = int((rows[:, a] == 1).sum())
            add = (rows == 0).sum(0).tolist()
            best, best_gain = -1, 0
            for b in range(k):
                if b != a and lose - add[b] > best_gain and total[b] + w[i] <= max_group_weight:
                    best, best_gain = b, lose - add[b]
            if best < 0:
                continue
            cnt[reach, a] -= 1
            cnt[reach, best] += 1
            total[a] -= w[i]
            total[best] += w[i]
            size[a] -= 1
            size[best] += 1
            g_list[i] = best
            moved += 1
        if moved == 0:
            break
    return torch.tensor(g_list, dtype=torch.int64, device=positions.device)
