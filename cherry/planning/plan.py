"""`MicrobatchPlan`: the already-sampled mini-batch cut into K exact micro-batches that fit a budget.

The plan never samples: every micro-batch is `slice_blocks` of the mini-batch's own blocks, so the
K micro-batches together compute exactly the mini-batch (each seed once, with all its sampled
in-edges at every layer).

Choosing K (``num_microbatches=None``): start from the whole batch's estimate over the budget, split,
slice, estimate each part; while the largest part's estimate exceeds ``budget * (1 - safety)``, grow
K in proportion to the overshoot. A budget that one seed alone cannot meet raises
`BudgetTooSmallError` before any compute.

Refinement (``refine=True``, K > 1): the contiguous split in locality order is one candidate;
`candidate_labels` gives the others (on a batch with locality the contiguous split refined on the top
layer; on any other batch the contiguous split refined on the input layer and groups grown over the
top layer's shared neighbours and refined). One `group_shapes_many` walk counts every candidate's
micro-batches exactly (per layer sources, destinations and edges: the counts their slices would
have) without slicing any, and the plan keeps the candidate with the fewest input nodes whose
largest estimate is at most ``MAX_GROWTH`` above the contiguous split's: so choosing never raises
redundancy above the contiguous split's and keeps the memory balance. Only the chosen candidate is
sliced.

Contracts: ``seed_groups`` partition the batch's seed positions; ``microbatches[i]`` equals
``slice_blocks(blocks, seed_groups[i])``; with K chosen, every estimate is at most
``budget * (1 - safety)`` or `BudgetTooSmallError` was raised; ``redundancy[l]`` is the micro-batches'
summed sources at layer ``l`` over the batch's. The function is pure: no timing, no I/O.

Cost: the planner runs on the loader's thread beside each training step, so it is built to take a
few percent of a step. Per stage on a batch with locality: seed costs (one `tree_costs` call), the
split (a 16-bit radix sort by rank), the candidates (mostly the top layer's refinement), one
`group_shapes_many` walk for all candidates, then slicing the choice (a 16-bit renumbering map per
group). Right after a step every small tensor op costs tens of microseconds, so the locality path
keeps them few (`split_order`, one stack of the top layer's rows, one read-back of the estimates).
A batch without locality also pays the input-layer refinements (a reach build per call, linear in
the seeds' sampled trees, each pass times K). Measure it with ``cherry bench planner`` and
``cherry bench engine`` (its "plan work" column); docs/benchmarks.md has the figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from cherry.ops.planning import _group_shapes_many
from cherry.planning.memory_model import MemoryModel
from cherry.planning.shapes import BatchShape
from cherry.planning.sorting import stable_argsort
from cherry.planning.split import Candidates, candidate_labels, seed_costs, split_order
from cherry.sampling import Blocks, slice_blocks, slice_blocks_many


MAX_GROWTH = 0.05  # a refined plan's largest estimate may exceed the contiguous split's by this much


def _sliced(blocks: Blocks, groups, memory_model: MemoryModel, estimates: Optional[list[int]] = None):
    """``(groups, their slices, their estimates)``: ``groups`` partition (a subset of) the seeds, as
    the split and the candidates make them, so the slicer need not check them; ``estimates``, when
    given, are the groups' `estimate_bytes` already (from their exact shapes)."""
    parts = tuple(slice_blocks_many(blocks, list(groups), check=False))
    if estimates is None:
        estimates = [memory_model.estimate_bytes(BatchShape.of(p)) for p in parts]
    return tuple(groups), parts, tuple(estimates)


def _best_plan(blocks: Blocks, order: torch.Tensor, candidates: Candidates, k: int, memory_model: MemoryModel):
    """`_sliced` of the candidate (rows of ``candidates.labels``, the contiguous split first) with the
    fewest input nodes whose largest estimate is within ``MAX_GROWTH`` of the contiguous split's, or
    the contiguous split if none holds fewer inputs than it. Only rows that ``candidates.inputs``
    ranks below the contiguous split are considered; their exact shapes (and so their inputs and
    estimates, the same counts as their slices) come from one `group_shapes_many` walk, so only the
    chosen row is sliced. Ties go to the lowest row."""
    layers = blocks.layers
    ips, inds = [b.indptr for b in layers], [b.indices for b in layers]
    labels, ranking = candidates.labels, candidates.inputs.tolist()
    rows = [0] + [c for c in range(1, len(ranking)) if ranking[c] < ranking[0]]
    # (few tensor ops: right after a training step each small one costs tens of microseconds)
    considered = labels if len(rows) == len(ranking) else labels[rows]
    shapes = _group_shapes_many(ips, inds, order, considered, k, layers[0].num_src)  # [rows, K, L, 3]
    inputs = shapes[:, :, 0, 0].sum(1).tolist()
    estimates = memory_model.estimate_bytes_many(shapes).tolist()  # [rows][K], value for value estimate_bytes
    largest = [max(row) for row in estimates]
    limit = largest[0] * (1 + MAX_GROWTH)
    best = min(range(len(rows)), key=lambda r: (inputs[r] if r == 0 or largest[r] <= limit else math.inf, r))
    sizes = shapes[best, :, -1, 1].tolist()  # each group's seeds: its top layer's destinations
    return _sliced(blocks, _groups_of(labels[rows[best]], order, k, sizes), memory_model, estimates[best])


def _groups_of(row: torch.Tensor, order: torch.Tensor, k: int, sizes: list[int]) -> tuple[torch.Tensor, ...]:
    """The K groups of ``order`` that ``row`` labels (``sizes[g]`` entries labelled ``g``), each in
    the order's order (a stable sort by label)."""
    return torch.split(order.index_select(0, stable_argsort(row, k)), sizes)


class BudgetTooSmallError(ValueError):
    """The memory budget cannot hold the micro-batch of a single seed."""


@dataclass(frozen=True)
class MicrobatchPlan:
    """K micro-batches of one mini-batch (seed positions, their exact blocks, estimated peaks)."""

    seed_groups: tuple[torch.Tensor, ...]
    microbatches: tuple[Blocks, ...]
    estimated_bytes: tuple[int, ...]
    budget_bytes: Optional[int]
    redundancy: tuple[float, ...]  # per layer, input layer first: sum of parts' sources / whole's

    @property
    def num_microbatches(self) -> int:
        return len(self.microbatches)

    @property
    def max_estimated_bytes(self) -> int:
        return max(self.estimated_bytes)


def plan_microbatches(
    blocks: Blocks,
    memory_model: MemoryModel,
    budget_bytes: Optional[int] = None,
    num_microbatches: Optional[int] = None,
    seed_rank: Optional[torch.Tensor] = None,
    balance: str = "memory",
    safety: float = 0.0,
    positions: Optional[torch.Tensor] = None,
    refine: bool = True,
) -> MicrobatchPlan:
    """Plan the micro-batches of ``blocks`` (or of the seeds at ``positions`` only, when re-planning).

    Either ``num_microbatches`` is given (a fixed K, the budget only reported) or ``budget_bytes``
    is, and K is the smallest found whose largest micro-batch is estimated to fit with ``safety``
    (a fraction of the budget kept free; none unless asked: the cherry system's margin is its option
    ``safety`` in the systems table, which the executor passes).
    ``refine``: choose among candidate splits by their exact input counts (see the module docstring).
    """
    if num_microbatches is None and budget_bytes is None:
        raise ValueError("give num_microbatches or budget_bytes (neither was set)")
    if budget_bytes is not None and budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    if not 0 <= safety < 1:
        raise ValueError(f"safety must be in [0, 1), got {safety}")
    n = blocks.num_seeds if positions is None else positions.numel()
    if n == 0:
        raise ValueError("cannot plan an empty set of seeds")
    if num_microbatches is not None and not 1 <= num_microbatches <= n:
        raise ValueError(f"number of micro-batches must be in [1, {n}] for {n} seeds, got {num_microbatches}")
    whole_batch = n == blocks.num_seeds
    costs: Optional[torch.Tensor] = None

    def build(k: int):
        nonlocal costs
        if k == 1 and whole_batch:  # the batch itself: no ordering, costing or slicing needed
            return (torch.arange(n, dtype=torch.int64, device=blocks.seeds.device),), (blocks,), (memory_model.estimate_bytes(BatchShape.of(blocks)),)
        if costs is None:
            costs = seed_costs(blocks, memory_model)
        # no positions: every seed, in batch order (split_order skips gathering through the identity)
        order, sizes, weights = split_order(positions, costs, k, seed_rank, blocks.seeds, balance)
        if not refine or k == 1:
            return _sliced(blocks, torch.split(order, sizes), memory_model)
        try:
            return _best_plan(blocks, order, candidate_labels(blocks, order, sizes, weights), k, memory_model)
        except torch.OutOfMemoryError:  # candidates are an optimisation: a device too full keeps the contiguous split
            return _sliced(blocks, torch.split(order, sizes), memory_model)

    if num_microbatches is not None:
        groups, parts, est = build(num_microbatches)
    else:
        limit = budget_bytes * (1 - safety)
        fixed = memory_model.fixed_bytes
        if fixed >= limit:
            raise BudgetTooSmallError(
                f"budget {budget_bytes} B leaves nothing for activations: parameters, optimizer state "
                f"and staged features alone need {fixed} B"
            )
        k = 1
        while True:
            groups, parts, est = build(k)
            worst = max(est)
            if worst <= limit:
                break
            if k == n:
                raise BudgetTooSmallError(
                    f"budget {budget_bytes} B is too small for one seed: a single-seed micro-batch "
                    f"is estimated at {worst} B"
                )
            growth = (worst - fixed) / max(limit - fixed, 1.0)
            k = min(n, max(k + 1, math.ceil(k * growth)))
    whole = BatchShape.of(blocks) if n == blocks.num_seeds else BatchShape.of(slice_blocks(blocks, positions))
    shapes = [BatchShape.of(p) for p in parts]
    redundancy = tuple(
        sum(s.layers[l].num_src for s in shapes) / max(whole.layers[l].num_src, 1)
        for l in range(len(whole.layers))
    )
    return MicrobatchPlan(groups, parts, est, budget_bytes, redundancy)
