"""Pure-PyTorch references of the planning ops `refine_groups`, `grow_groups`, `group_shapes` and
`tree_costs` (the native kernels' oracles and fallbacks).

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
- Greedy passes over the seeds in the given order. Seed ``i`` in group ``a`` (holding more than one
  seed) moves to the group ``b != a`` of highest gain ``#{u in R(i): only i holds u in a} -
  #{u in R(i): no seed holds u in b}``. It moves only if that gain is positive and ``W[b] +
  weights[i] <= max_group_weight`` (``W`` the groups' summed weights, updated in float64 in move
  order). Ties go to the lowest ``b``. A pass without a move ends the refinement early; at most ``num_passes`` passes.
  Every move strictly lowers the objective, so the result is never worse than the input groups.

`grow_groups` (csrc/cpu/grow_groups.cpp, csrc/cuda/grow_groups.cu): seeds ``order[i]`` (top-layer
destination positions, in locality order) are grown into ``K`` groups over the top layer's shared
sources. ``R1(i)`` is the seed and its in-neighbours in the top block; a seed's *score* in the group
being grown is the number of sources of ``R1`` the group already covers. Group ``g = 0..K-1`` starts
empty and repeatedly takes the unassigned seed of highest score (ties: lowest ``i``; a score of 0 or
no scored seed: the lowest unassigned ``i``) until its summed weight reaches ``sum(weights) / K`` (in
float64, in pick order) or only one seed per later group is left; the last group takes the rest.
Every group is non-empty. Cost: the holders of the sources each group covers, at most ``K`` times the
top block's edges, and a heap of the scored seeds.

`group_shapes`: for each group, per layer (input layer first), ``(num_src, num_dst, num_edges)`` of the
micro-batch `slice_blocks` would build from its seeds, counted without building it. `group_shapes_many`:
the same for every row of a ``[C, n]`` labelling, ``[C, K, L, 3]`` (the CPU kernel walks the batch's
edges once for all rows, propagating each node's set of groups as a bit mask).

`refine_groups_many` refines each row of a ``[C, n]`` start under its own cap on one build of the
reaches (each row exactly as `refine_groups` would) and also returns each result's objective
``sum_g |union_{i in g} R(i)|``: a cap below every weight leaves a start as it is and only counts it.

Cost: building the reaches is linear in the edges of the seeds' sampled trees (with multiplicity),
each pass ``O(sum_i |R(i)| * K)``.

`tree_costs` (csrc/cpu/tree_costs.cpp, csrc/cuda/tree_costs.cu): per top-layer destination (seed), the
cost of its whole sampled tree counted with multiplicity (a node reached twice counts twice), float64:
layer by layer from the input layer, a destination's cost is ``per_dst[l] + per_edge[l] * in-degree``
plus, above the input layer, the sum of its sources' costs (the destinations one layer down). With
integer per-element counts (the memory model's) every value is an integer below 2**53, so each sum is
exact and the kernels equal this reference bit for bit whatever their order of additions.
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
    ptr, pos = reaches(indptrs, indices, positions, num_inputs)
    return _greedy(ptr, pos, groups, weights, num_groups, num_inputs, max_group_weight, num_passes)[0]


def refine_groups_many(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                       groups: torch.Tensor, weights: torch.Tensor, num_groups: int, num_inputs: int,
                       max_group_weights: list[float], num_passes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of ``groups`` (``[C, n]``) refined under its cap, on one build of the reaches, and the
    summed distinct inputs of each result (int64, ``[C]``)."""
    ptr, pos = reaches(indptrs, indices, positions, num_inputs)
    runs = [_greedy(ptr, pos, g, weights, num_groups, num_inputs, cap, num_passes)
            for g, cap in zip(groups, max_group_weights)]
    out = torch.stack([r[0] for r in runs]) if runs else groups.clone()
    return out, torch.tensor([r[1] for r in runs], dtype=torch.int64, device=positions.device)


def _greedy(ptr: torch.Tensor, pos: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor, num_groups: int,
            num_inputs: int, max_group_weight: float, num_passes: int) -> tuple[torch.Tensor, int]:
    k = num_groups
    ptr_l, w = ptr.tolist(), weights.tolist()
    g = groups.clone()
    cnt = torch.zeros((num_inputs, k), dtype=torch.int64, device=pos.device)
    cnt.index_put_((pos, torch.repeat_interleave(g, ptr[1:] - ptr[:-1])), torch.ones_like(pos), accumulate=True)
    size = torch.bincount(g, minlength=k).tolist()
    total = [0.0] * k
    for i, gi in enumerate(g.tolist()):
        total[gi] += w[i]
    g_list = g.tolist()
    for _ in range(num_passes):
        moved = 0
        for i in range(len(g_list)):
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
    return torch.tensor(g_list, dtype=torch.int64, device=pos.device), int((cnt > 0).sum())


def grow_groups(indptr: torch.Tensor, indices: torch.Tensor, order: torch.Tensor, weights: torch.Tensor,
                num_groups: int) -> torch.Tensor:
    """The group of every seed of ``order`` (int64, ``[n]``); inputs validated by the caller."""
    import heapq

    n, k = order.numel(), num_groups
    ip, ind = indptr.tolist(), indices.tolist()
    reach = [list(dict.fromkeys([p] + ind[ip[p]:ip[p + 1]])) for p in order.tolist()]
    holders: dict[int, list[int]] = {}
    for i, r in enumerate(reach):
        for u in r:
            holders.setdefault(u, []).append(i)
    w = weights.tolist()
    total = 0.0
    for x in w:
        total += x
    target = total / k
    label, score, score_group, covered = [-1] * n, [0] * n, [-1] * n, {}
    cursor, left = 0, n
    for g in range(k):
        heap: list[tuple[int, int]] = []  # (-score, i): max score, then lowest i
        weight = 0.0
        while left > 0:
            i = -1
            while heap:
                s, j = heapq.heappop(heap)
                if label[j] < 0 and score_group[j] == g and score[j] == -s:
                    i = j
                    break
            if i < 0:
                while label[cursor] >= 0:
                    cursor += 1
                i = cursor
            label[i] = g
            weight += w[i]
            left -= 1
            for u in reach[i]:
                if covered.get(u) == g:
                    continue
                covered[u] = g
                for j in holders[u]:
                    if label[j] >= 0:
                        continue
                    if score_group[j] != g:
                        score_group[j], score[j] = g, 0
                    score[j] += 1
                    heapq.heappush(heap, (-score[j], j))
            if g < k - 1 and (weight >= target or left == k - 1 - g):
                break
    return torch.tensor(label, dtype=torch.int64, device=order.device)


def group_shapes(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                 groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """``[K, L, 3]`` int64: per group and layer (input first) its sources, destinations and edges."""
    k, num_layers = num_groups, len(indptrs)
    num_nodes = max(indptrs[0].numel() - 1, int(indices[0].max()) + 1 if indices[0].numel() else 0, 1)
    keys = torch.unique(groups * num_nodes + positions)
    owner, node = keys // num_nodes, keys % num_nodes
    out = torch.zeros((k, num_layers, 3), dtype=torch.int64, device=positions.device)
    for l in range(num_layers - 1, -1, -1):
        ip, ind = indptrs[l], indices[l]
        start = ip.index_select(0, node)
        deg = ip.index_select(0, node + 1) - start
        out[:, l, 1] = torch.bincount(owner, minlength=k)
        out[:, l, 2] = torch.zeros(k, dtype=torch.int64, device=positions.device).index_add_(0, owner, deg)
        seg = torch.repeat_interleave(torch.arange(node.numel(), device=node.device), deg)
        offs = torch.arange(seg.numel(), device=node.device) - (torch.cumsum(deg, 0) - deg).index_select(0, seg)
        fresh = ind.index_select(0, start.index_select(0, seg) + offs)
        keys = torch.unique(torch.cat([keys, owner.index_select(0, seg) * num_nodes + fresh]))
        owner, node = keys // num_nodes, keys % num_nodes
        out[:, l, 0] = torch.bincount(owner, minlength=k)
    return out


def group_shapes_many(indptrs: list[torch.Tensor], indices: list[torch.Tensor], positions: torch.Tensor,
                      groups: torch.Tensor, num_groups: int, num_inputs: int) -> torch.Tensor:
    """``[C, K, L, 3]`` int64: `group_shapes` of every row of ``groups`` (``[C, n]``); positions lie in
    ``[0, num_inputs)``."""
    return torch.stack([group_shapes(indptrs, indices, positions, row, num_groups) for row in groups])


def tree_costs(indptrs: list[torch.Tensor], indices: list[torch.Tensor], per_dst: list[float],
               per_edge: list[float]) -> torch.Tensor:
    """``[num_seeds]`` float64: each top-layer destination's tree cost (see the module docstring)."""
    below = None
    for ip, ind, pd, pe in zip(indptrs, indices, per_dst, per_edge):
        own = pd + pe * (ip[1:] - ip[:-1]).to(torch.float64)
        if below is not None:
            seg = torch.repeat_interleave(torch.arange(ip.numel() - 1, device=ip.device), ip[1:] - ip[:-1])
            own = own + torch.zeros_like(own).index_add_(0, seg, below.index_select(0, ind))
        below = own
    return below
