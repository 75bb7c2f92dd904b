"""Split a batch's seeds into K contiguous groups of (nearly) equal estimated cost.

Seeds are first put in locality order (by ``seed_rank``, see `cherry.planning.ordering`), then cut
into K contiguous chunks at the quantiles of a per-seed cost. The cost of a seed is the memory-model
cost of its whole sampled tree counted with multiplicity (an upper bound of its share: shared
neighbours are counted by every seed that reaches them), computed bottom-up with one aggregation per
layer. ``balance="count"`` gives every chunk the same number of seeds instead.

The contiguous split keeps what the locality order gives on graphs with community structure; on
graphs without it (heavy-tailed degree laws, where hubs and their co-neighbours carry no order) the
candidates below recover what it misses. Seeds move between groups by `cherry.ops.refine_groups_many`
(greedy, native, linear in the seeds' tree edges per pass, several starts on one build of the
reaches), under a cap on each group's summed seed cost.

`candidate_labels` gives the planner its candidates for one K. It first builds the top layer's
one-hop reaches once (linear in the top block's edges). On them it counts the top-layer sources of
the contiguous split and of the strided split (seed ``i`` of the locality order in group ``i mod K``,
which breaks up every run of neighbours the order put together). It then refines the contiguous
split on the top layer for each weight slack of ``CANDIDATE_TOLERANCES`` (``LOCAL_PASSES`` passes).

- A batch has locality when its contiguous split holds under ``LOCALITY_RATIO`` times the strided
  split's top-layer sources (the generated datasets and the geometric graph at large batches; not
  the heavy-tailed laws). It keeps these top-layer refinements as its candidates, ranked by their
  top-layer sources. They are not exact input counts: the planner counts every candidate's exact
  inputs with `group_shapes_many` before it chooses. The input-layer refinement is left out on such
  batches: its reach build walks every seed's whole tree, several times the top layer's entries, and
  the top-layer refinement keeps most of its gain.
- Any other batch (heavy-tailed degree laws, small batches) gets, for each slack, two candidates.
  One is the contiguous split refined on the input layer. The other is `grow_groups` (greedy growing
  over the top layer's shared neighbours in locality order), which recovers on graphs without
  community structure what a global order cannot carry. It is refined first on the top layer (a
  cheap descent) and then, only where that descent already holds fewer input nodes than the
  contiguous split, on the input layer.
  Their counts are exact (each `refine_groups_many` result's count; the two unrefined candidates are
  counted on the contiguous starts' reach build, under ``UNREFINED_CAP``).

Where the batch is on a GPU, the candidates are computed on the host (`candidate_labels`). The greedy
ops are sequential by definition: the GPU kernels run them on one thread or one block, far slower
than a CPU core on large batches. So the batch's CSC, the order and the weights go to the host in one
copy, and the labels come back in one. The result is the same: the CPU and CUDA kernels agree bit
for bit.

Invariant: the groups partition the given positions; each group is non-empty and keeps rank order.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from cherry.ops.planning import _grow_groups, _refine_groups_many, _tree_costs
from cherry.planning.memory_model import MemoryModel
from cherry.planning.sorting import stable_argsort
from cherry.sampling import Blocks

BALANCES = ("memory", "count")
REFINE_PASSES = 3  # measured: later passes move almost nothing
TOP_PASSES = 5  # top-layer refinement passes of the grown starts (cheap: one-hop reaches)
LOCAL_PASSES = 2  # of the contiguous split on a batch with locality: measured, later passes move almost nothing
CANDIDATE_TOLERANCES = (0.05, 0.1, 0.2)  # weight slacks of the refined candidates (the winner varies with it)
LOCALITY_RATIO = 0.9  # contiguous / strided top-layer sources below this: the batch has locality
UNREFINED_CAP = float("-inf")  # a refinement cap below every weight: the start is only counted


def seed_costs(blocks: Blocks, model: MemoryModel) -> torch.Tensor:
    """Per-seed cost (float64, length ``num_seeds``) of the seed's sampled tree under ``model``: one
    `tree_costs` call (a node's own cost is its layer's per-destination floats plus, per in-edge, the
    edge's and the source's; its children are its sources, the destinations one layer down)."""
    layers = blocks.layers
    return _tree_costs([b.indptr for b in layers], [b.indices for b in layers],
                       [float(c.per_dst) for c in model.costs], [float(c.per_edge + c.per_src) for c in model.costs])


def split_seeds(positions: torch.Tensor, costs: torch.Tensor, num_groups: int,
                seed_rank: torch.Tensor | None = None, seeds: torch.Tensor | None = None,
                balance: str = "memory") -> tuple[torch.Tensor, ...]:
    """Cut ``positions`` (into the batch's seeds) into ``num_groups`` contiguous, cost-balanced groups.

    ``costs`` is indexed by position; ``seed_rank``/``seeds`` (global ids by position) define the
    locality order; without them the given order is kept.
    """
    order, sizes, _ = split_order(positions, costs, num_groups, seed_rank, seeds, balance)
    return tuple(torch.split(order, sizes))


def split_order(positions: torch.Tensor | None, costs: torch.Tensor, num_groups: int,
                seed_rank: torch.Tensor | None = None, seeds: torch.Tensor | None = None,
                balance: str = "memory") -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """`split_seeds` as the planner uses it: ``(order, sizes, weights)``, the groups concatenated (the
    positions in locality order), their sizes and each entry's weight (float64: its cost, or 1 with
    ``balance="count"``). ``positions=None`` is every seed of the batch (``0 .. len(costs) - 1``) and
    saves gathering through the identity.

    Why it exists: the planner needs the order and the weights, not the groups, and right after a
    training step every small tensor op costs tens of microseconds (cold instruction and data
    caches), so the groups are not cut only to be concatenated again.
    """
    n = costs.numel() if positions is None else positions.numel()
    if balance not in BALANCES:
        raise ValueError(f"balance must be one of {BALANCES}, got {balance!r}")
    if not 1 <= num_groups <= max(n, 1):
        raise ValueError(f"number of micro-batches must be in [1, {n}] for {n} seeds, got {num_groups}")
    if seed_rank is not None and seeds is not None:
        keys = seed_rank.index_select(0, seeds if positions is None else seeds.index_select(0, positions))
        perm = stable_argsort(keys, seed_rank.numel())  # a rank is below its length
        order = perm if positions is None else positions.index_select(0, perm)
    else:
        order = torch.arange(n, device=costs.device) if positions is None else positions
    if balance == "count":
        weights = torch.ones(n, dtype=torch.float64)
    else:
        weights = costs.index_select(0, order).to(torch.float64)
    if num_groups == 1:
        return order, [n], weights
    cum = torch.cumsum(weights.cpu(), 0)  # the cuts are found on the host
    total = float(cum[-1])
    # (total * j) / K for j = 1 .. K - 1, as the float64 tensor ops cum[-1] * arange(1, K) / K round
    targets = torch.tensor([total * j / num_groups for j in range(1, num_groups)], dtype=torch.float64)
    bounds = [0]
    for j, cut in enumerate(torch.searchsorted(cum, targets, right=True).tolist(), start=1):
        # every group non-empty: cut j lies in [j, n - (num_groups - j)], strictly above cut j - 1
        bounds.append(min(max(cut, j, bounds[-1] + 1), n - num_groups + j))
    bounds.append(n)
    return order, [b - a for a, b in zip(bounds[:-1], bounds[1:])], weights


@dataclass(frozen=True)
class Candidates:
    """The planner's candidate splits of one batch for one K (see `candidate_labels`).

    ``labels`` ``[C, n]``: a group in ``[0, K)`` per entry of the seed order, the contiguous split in
    row 0. ``inputs`` ``[C]``: each row's summed input nodes when ``exact``; otherwise (a batch with
    locality) each row's summed *top-layer* sources. The planner only prunes by them (a row not below
    row 0 is not considered) and chooses by the exact counts of `group_shapes_many`."""

    labels: torch.Tensor
    inputs: torch.Tensor
    exact: bool


def candidate_labels(blocks: Blocks, order: torch.Tensor, sizes: list[int], weights: torch.Tensor,
                     tolerances: tuple[float, ...] = CANDIDATE_TOLERANCES) -> Candidates:
    """The `Candidates` of the seeds at positions ``order`` (the contiguous split's groups
    concatenated, of ``sizes``; see the module docstring). Caps: ``(1 + tolerance)`` times the
    heaviest contiguous group's weight (``weights``: float64, by entry of ``order``)."""
    k = len(sizes)
    if k < 2 or any(s < 1 for s in sizes) or sum(sizes) != order.numel():
        raise ValueError(f"sizes must be >= 2 positive group sizes summing to {order.numel()}, got {sizes}")
    if not tolerances or min(tolerances) < 0:
        raise ValueError(f"tolerances must be a non-empty tuple of numbers >= 0, got {tolerances}")
    layers = blocks.layers
    if order.device.type != "cpu":  # the greedy ops are sequential: a host core runs them fastest
        tensors = [b.indptr for b in layers] + [b.indices for b in layers] + [order, weights]
        host = to_host_once(tensors)
        found = _candidates(host[:len(layers)], host[len(layers):2 * len(layers)], layers[-1].num_src,
                            layers[0].num_src, host[-2], sizes, host[-1], tolerances)
        return Candidates(found.labels.to(order.device), found.inputs, found.exact)
    return _candidates([b.indptr for b in layers], [b.indices for b in layers], layers[-1].num_src,
                       layers[0].num_src, order, sizes, weights, tolerances)


def to_host_once(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Host copies of ``tensors`` (1-D), those on a device made with one transfer: the int64 and
    float64 ones are packed (as 64-bit words) into one device buffer, copied and split again; host
    tensors are returned as they are (any other dtype is copied on its own)."""
    packed = [i for i, t in enumerate(tensors)
              if t.device.type != "cpu" and t.dim() == 1 and t.dtype in (torch.int64, torch.float64)]
    out = [t if i in packed else t.cpu() for i, t in enumerate(tensors)]  # packed ones: replaced below
    if packed:
        words = torch.cat([tensors[i].view(torch.int64) for i in packed]).cpu()
        for i, part in zip(packed, words.split([tensors[i].numel() for i in packed])):
            out[i] = part if tensors[i].dtype == torch.int64 else part.view(tensors[i].dtype)
    return out


def _candidates(ips: list[torch.Tensor], inds: list[torch.Tensor], top_num_src: int, num_inputs: int,
                order: torch.Tensor, sizes: list[int], weights: torch.Tensor,
                tolerances: tuple[float, ...]) -> Candidates:
    """`candidate_labels` on the CSC ``ips``/``inds`` of the batch's layers (input layer first)."""
    k = len(sizes)
    device = order.device
    contiguous = torch.repeat_interleave(torch.arange(k, device=device), torch.tensor(sizes, device=device))
    heaviest = float(torch.bincount(contiguous, weights=weights, minlength=k).max())
    caps = [heaviest * (1.0 + t) for t in tolerances]
    c = len(caps)
    top_indptr, top_indices = ips[-1], inds[-1]
    # one build of the top layer's one-hop reaches counts the contiguous and the strided split (seed i
    # of the locality order in group i mod K: every run of neighbours the order put together broken
    # up) and refines the contiguous split on the top layer
    # (rows: the contiguous split counted, refined under each cap, then the strided split counted, so
    # the candidates are the first c + 1 rows as they come)
    strided = torch.arange(order.numel(), device=device) % k
    top_rows = torch.stack([contiguous] * (c + 1) + [strided])
    top_labels, top_counts = _refine_groups_many([top_indptr], [top_indices], order, top_rows, weights, k,
                                                 top_num_src, [UNREFINED_CAP] + caps + [UNREFINED_CAP], LOCAL_PASSES)
    counts = top_counts.tolist()
    if counts[0] < LOCALITY_RATIO * counts[-1]:
        # a batch with locality: the contiguous split refined on the top layer, ranked by its top-layer
        # sources; growing and every input-layer reach build would cost far more than they gain here
        return Candidates(top_labels[:-1], top_counts[:-1], exact=False)
    grown = _grow_groups(top_indptr, top_indices, order, weights, k)
    descended, top_inputs = _refine_groups_many([top_indptr], [top_indices], order, grown.expand(c, -1),
                                                weights, k, top_num_src, caps, TOP_PASSES)
    best = descended[int(torch.argmin(top_inputs))]
    # one build of the input-layer reaches refines the contiguous starts and counts the two unrefined
    # labellings (a cap below every weight moves nothing), instead of two `group_shapes` calls
    rows = torch.cat([contiguous.expand(c, -1), torch.stack([contiguous, best])])
    refined, counts = _refine_groups_many(ips, inds, order, rows, weights, k, num_inputs,
                                          caps + [UNREFINED_CAP] * 2, REFINE_PASSES)
    labels, inputs, first = refined[:c], counts[:c], counts[c:]
    # the grown starts are refined only where their descent already beats the contiguous split (a batch
    # without community structure): elsewhere the contiguous starts win and the refinements cost time
    if int(first[1]) < int(first[0]):
        grown_labels, grown_inputs = _refine_groups_many(ips, inds, order, descended, weights, k, num_inputs,
                                                         caps, REFINE_PASSES)
        labels, inputs = torch.cat([labels, grown_labels]), torch.cat([inputs, grown_inputs])
    return Candidates(torch.cat([torch.stack([contiguous, best]), labels]), torch.cat([first, inputs]), exact=True)
