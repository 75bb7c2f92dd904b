"""`MicrobatchPlan`: the already-sampled mini-batch cut into K exact micro-batches that fit a budget.

The plan never samples: every micro-batch is `slice_blocks` of the mini-batch's own blocks, so the
K micro-batches together compute exactly the mini-batch (each seed once, with all its sampled
in-edges at every layer).

Choosing K (``num_microbatches=None``): start from ``start_k`` (the previous step's K, so that K stays
steady over equal batches) or 1, split, slice, estimate each part; while the largest part's estimate
exceeds ``budget * (1 - safety)``, grow K in proportion to the overshoot; a start that fits with room
to spare is lowered, by at most half per step. When even one seed per micro-batch is estimated above
that limit, the plan still runs it in three cases. The estimate is within the budget itself (the
margin is a safety, not a limit). Or a micro-batch at least as large fitted in this run. Or, short
of evidence that such a seed ran out of memory, the estimate is within `TRY_FACTOR` times the budget.
Calibration alone never refuses a step, evidence does: the executor's out-of-memory path re-plans,
with recomputation, and records the evidence. Otherwise, with ``recompute="auto"``, the smallest
K with per-layer recomputation (`MemoryModel.with_recompute`) is chosen; ``"on"`` plans with it from
the start, ``"off"`` never. ``stream`` says whether the first layer streams its input rows
(`MemoryModel.with_stream`): ``"on"`` and ``"off"`` plan with or without it; ``"auto"`` (with a budget,
where streaming prices lower) plans both ways and keeps the cheaper plan that fits, by `plan_cost`.
The choice is between a few streamed micro-batches (each input row gathered twice) or more plain ones (each row gathered,
and its layer computed, once per micro-batch that reads it). What is left raises `BudgetTooSmallError`, naming the estimate, the
budget, the safety margin and the smallest budgets that would fit with and without recomputation.

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


def resident_index_bytes(parts) -> int:
    """Bytes of the index buffers of every micro-batch of a plan (per layer: int64 source ids, CSC
    indptr and indices; the input positions), which the executor keeps on the device for the whole
    step. The planner adds them to every estimate; measurements have them subtracted before they
    calibrate the per-micro-batch model (`cherry.execution.executor`)."""
    total = 0
    for p in parts:
        total += sum(b.num_src + b.num_dst + 1 + b.num_edges for b in p.layers) + p.layers[0].num_src
    return 8 * total


class BudgetTooSmallError(ValueError):
    """The memory budget cannot hold the micro-batch of a single seed."""


RECOMPUTE_MODES = ("auto", "on", "off")
STREAM_MODES = ("auto", "on", "off")
# `plan_cost`'s priors: a gathered input row's share of its micro-batch's work per row (the first
# layer's GEMMs and the layers above dominate on a CPU and a GPU alike: the gather is a copy), and
# recomputation's extra forward
GATHER_SHARE = 0.25
RECOMPUTE_COST = 1.3
PLAIN_K_FACTOR, PLAIN_K_MIN = 4, 8  # the plain plans `stream="auto"` weighs against a streamed one of K


def plan_cost(parts, stream: bool, recompute: bool) -> float:
    """A plan's relative epoch cost: its micro-batches' summed input rows, each gathered once (twice
    when streamed) and computed once (a recomputed forward again). What ``stream="auto"`` minimises."""
    rows = sum(p.layers[0].num_src for p in parts)
    return rows * (1 + (2 if stream else 1) * GATHER_SHARE) * (RECOMPUTE_COST if recompute else 1.0)


@dataclass(frozen=True)
class MicrobatchPlan:
    """K micro-batches of one mini-batch (seed positions, their exact blocks, estimated peaks)."""

    seed_groups: tuple[torch.Tensor, ...]
    microbatches: tuple[Blocks, ...]
    estimated_bytes: tuple[int, ...]
    budget_bytes: Optional[int]
    redundancy: tuple[float, ...]  # per layer, input layer first: sum of parts' sources / whole's
    recompute: bool = False  # run with per-layer activation recomputation (checkpointing)
    stream: bool = False  # the first layer streams its input rows (`cherry.execution.stream`)

    @property
    def num_microbatches(self) -> int:
        return len(self.microbatches)

    @property
    def max_estimated_bytes(self) -> int:
        return max(self.estimated_bytes)


def _check_settings(num_microbatches, budget_bytes, safety, recompute, stream, start_k) -> None:
    """One-line ValueError for a `plan_microbatches` setting out of its range."""
    if num_microbatches is None and budget_bytes is None:
        raise ValueError("give num_microbatches or budget_bytes (neither was set)")
    if budget_bytes is not None and budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    if not 0 <= safety < 1:
        raise ValueError(f"safety must be in [0, 1), got {safety}")
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {recompute!r}")
    if stream not in STREAM_MODES:
        raise ValueError(f"stream must be one of {STREAM_MODES}, got {stream!r}")
    if start_k is not None and start_k < 1:
        raise ValueError(f"start_k must be >= 1, got {start_k}")


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
    recompute: str = "auto",
    start_k: Optional[int] = None,
    stream: str = "off",
) -> MicrobatchPlan:
    """Plan the micro-batches of ``blocks`` (or of the seeds at ``positions`` only, when re-planning).

    Either ``num_microbatches`` is given (a fixed K, the budget only reported) or ``budget_bytes``
    is, and K is the smallest found whose largest micro-batch is estimated to fit with ``safety``
    (a fraction of the budget kept free; none unless asked: the cherry system's margin is its option
    ``safety`` in the systems table, which the executor passes).
    ``refine``: choose among candidate splits by their exact input counts (see the module docstring).
    ``recompute``: ``"auto"``, ``"on"`` or ``"off"``; ``start_k``: where the search for K starts (see
    the module docstring). A fixed K runs with recomputation only when ``recompute="on"``, and
    streamed only when ``stream="on"``.
    """
    _check_settings(num_microbatches, budget_bytes, safety, recompute, stream, start_k)
    n = blocks.num_seeds if positions is None else positions.numel()
    if n == 0:
        raise ValueError("cannot plan an empty set of seeds")
    if num_microbatches is not None and not 1 <= num_microbatches <= n:
        raise ValueError(f"number of micro-batches must be in [1, {n}] for {n} seeds, got {num_microbatches}")
    whole_batch = n == blocks.num_seeds
    costs: Optional[torch.Tensor] = None

    def build(k: int, memory_model: MemoryModel):
        # one micro-batch has no next one whose input rows the pipeline prefetches beside it
        groups, parts, est = build_parts(k, memory_model.without_prefetch() if k == 1 else memory_model)
        # every micro-batch's index buffers stay on the device for the whole step (one copy per step)
        resident = resident_index_bytes(parts)
        return groups, parts, tuple(e + resident for e in est)

    def build_parts(k: int, memory_model: MemoryModel):
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

    use_recompute, use_stream = recompute == "on", stream == "on"
    if num_microbatches is not None:
        model = memory_model.with_recompute(use_recompute).with_stream(use_stream)
        groups, parts, est = build(num_microbatches, model)
    elif stream == "auto" and memory_model.stream_saves:
        (groups, parts, est), use_recompute, use_stream = _choose_stream(
            build, memory_model, budget_bytes, safety, n, recompute, start_k)
    else:
        (groups, parts, est), use_recompute = _choose_k(build, memory_model.with_stream(use_stream), budget_bytes,
                                                        safety, n, recompute, start_k)
    whole = BatchShape.of(blocks) if n == blocks.num_seeds else BatchShape.of(slice_blocks(blocks, positions))
    shapes = [BatchShape.of(p) for p in parts]
    redundancy = tuple(
        sum(s.layers[l].num_src for s in shapes) / max(whole.layers[l].num_src, 1)
        for l in range(len(whole.layers))
    )
    return MicrobatchPlan(groups, parts, est, budget_bytes, redundancy, use_recompute, use_stream)


class _BeyondCap(Exception):
    """A plain plan's search reached more micro-batches than `_choose_stream` lets it compete with."""


def _choose_stream(build, memory_model: MemoryModel, budget_bytes: int, safety: float, n: int, recompute: str,
                   start_k: Optional[int]):
    """``(built plan, recompute?, stream?)``: one plain micro-batch where it fits (nothing is cheaper);
    else, of the streamed and the plain plan (`_choose_k` each), the one within the limit of least
    `plan_cost`. The plain search stops beyond `PLAIN_K_FACTOR` times the streamed plan's K: its
    per-micro-batch work then outweighs a second gather, and searching that far (slicing hundreds of
    micro-batches per probe) would cost seconds per step. Raises a `BudgetTooSmallError` when neither
    plans."""
    limit = budget_bytes * (1 - safety)
    plain = memory_model.with_stream(False)
    whole = build(1, plain)
    if max(whole[2]) <= limit:
        return whole, False, False
    found, error, cap = [], None, n
    try:
        # the streamed search starts afresh at K = 1: its K is not the plain plan's
        built, rc = _choose_k(build, memory_model.with_stream(True), budget_bytes, safety, n, recompute, None)
        found.append((max(built[2]) > limit, plan_cost(built[1], True, rc), True, built, rc))
        cap = max(PLAIN_K_FACTOR * len(built[1]), PLAIN_K_MIN)
    except BudgetTooSmallError as exc:
        error = exc

    def capped(k: int, model: MemoryModel):
        if k > cap:
            raise _BeyondCap
        return build(k, model)

    try:
        built, rc = _choose_k(capped, plain, budget_bytes, safety, n, recompute, start_k)
        found.append((max(built[2]) > limit, plan_cost(built[1], False, rc), False, built, rc))
    except BudgetTooSmallError as exc:
        error = error or exc
    except _BeyondCap:
        pass
    if not found:
        raise error
    _, _, stream, built, rc = min(found, key=lambda f: f[:3])
    return built, rc, stream


def _search_k(build, model: MemoryModel, limit: float, n: int, start_k: Optional[int],
              steady_limit: Optional[float] = None):
    """``(k, built, capped)`` of the smallest K found from ``start_k`` whose largest estimate is at most
    ``limit``, or the priced plan of least largest estimate when none is (the caller decides).

    Down: from a start that fits, the smallest K that fits in ``[ceil(start / 2), start]``. It is a
    bisection whose first probe is the K the room's ratio predicts. When that is the start itself,
    the first probe is at three quarters of it, at least one less: a hub's micro-batch need not shrink
    in proportion to K, and K = 1 holds no prefetched rows. So K stays tight (the chosen K over the
    smallest fitting one) and falls at most by half per step.
    Up: K grows in proportion to the overshoot, then the smallest fitting K above the last one that did
    not fit is bisected for. With ``steady_limit`` (the limit plus half the margin, `_choose_k`) and a
    start, K stops at twice the start when that plan's estimate is within ``steady_limit``. The safety
    margin absorbs a calibration's jump, or a batch a little larger than the last, rather than K more
    than doubling. Beyond it, the plan would risk overrunning the budget, and K grows as far as needed.
    ``capped`` (the third item returned) says that K stopped there above ``limit``."""
    fixed = model.fixed_bytes + model.floor_bytes
    k = min(max(start_k or 1, 1), n)
    cache = {}

    def at(j: int):
        if j not in cache:
            cache[j] = build(j, model)
        return cache[j]

    def fits(j: int) -> bool:
        return max(at(j)[2]) <= limit

    def lowest_fitting(low: int, high: int, first: Optional[int] = None) -> int:
        """The smallest j in [low, high] that fits, ``high`` known to fit (bisection; estimates are
        near-monotone in K, so it is the smallest found, not proven)."""
        probe = first
        while low < high:
            mid = probe if probe is not None and low <= probe < high else (low + high) // 2
            probe = None
            if fits(mid):
                high = mid
            else:
                low = mid + 1
        return high

    worst = max(at(k)[2])
    if worst <= limit:
        if k == 1:
            return k, at(k), False
        half = max(1, math.ceil(k / 2))
        predicted = math.ceil(k * max(worst - fixed, 0.0) / max(limit - fixed, 1.0))
        if predicted >= k:  # no room by the ratio; but a hub's group need not shrink with K, and K = 1
            # prefetches nothing: one probe, at three quarters of K (at K - 1 for K <= 4)
            predicted = max(half, min(k - 1, math.ceil(0.75 * k)))
            if predicted >= k or not fits(predicted):
                return k, at(k), False
            k = predicted
        k = lowest_fitting(half, k, max(predicted, half))
        return k, at(k), False
    failed = k
    while worst > limit and k < n:
        growth = (worst - fixed) / max(limit - fixed, 1.0)
        nxt = min(n, max(k + 1, math.ceil(k * growth)))
        if steady_limit is not None and start_k is not None and k <= 2 * start_k < nxt:
            doubled = min(n, 2 * start_k)
            if max(at(doubled)[2]) <= steady_limit:
                if fits(doubled):
                    k = lowest_fitting(failed + 1, doubled)
                    return k, at(k), False
                return doubled, at(doubled), True
        k = nxt
        worst = max(at(k)[2])
        if worst > limit:
            failed = k
    if worst > limit:
        # nothing fits: the plan of least estimated peak among those priced (a hub's micro-batch need not
        # shrink with K, and K = 1 prefetches nothing, so that need not be the largest K); ties: larger K
        k = min(cache, key=lambda j: (max(cache[j][2]), -j))
        return k, at(k), False
    k = lowest_fitting(failed + 1, k)
    return k, at(k), False


TRY_FACTOR = 2.0  # before any measurement, a single seed estimated up to this times the budget is tried


def _worth_trying(model: MemoryModel, shape: BatchShape, estimate: int, budget_bytes: int) -> bool:
    """Whether a single-seed micro-batch estimated above the budget is still run: calibration alone
    never refuses. It is not run in three cases. An out-of-memory of a single seed at most as large
    proved it cannot fit (`MemoryModel.has_failed`). The model is priced by probes
    (`MemoryModel.probed`: its estimate covers peaks measured on this device from one seed up, so
    above the budget it is evidence). Or the run has measured nothing yet (the analytic model alone:
    a budget far too small is refused before any work) and the estimate is more than `TRY_FACTOR`
    times the budget.
    Once calibrated, only evidence refuses: at tiny budgets a calibrated floor can put a seed above
    twice the budget while the seed still fits."""
    if model.has_failed(shape) or model.probed:
        return False
    return estimate <= TRY_FACTOR * budget_bytes or model.is_calibrated


def _choose_k(build, memory_model: MemoryModel, budget_bytes: int, safety: float, n: int, recompute: str,
              start_k: Optional[int]):
    """``(built plan, recompute?)`` under ``budget_bytes`` (see the module docstring)."""
    limit = budget_bytes * (1 - safety)
    # a calibrated floor below zero says the fixed part over-counts what the run holds
    fixed = memory_model.fixed_bytes + min(memory_model.floor_bytes, 0)
    if fixed >= limit:
        raise BudgetTooSmallError(
            f"budget {budget_bytes} B with a {safety:.0%} safety margin (limit {int(limit)} B) leaves nothing "
            f"for activations: parameters, optimizer state and staged features alone need {fixed} B; the "
            f"smallest budget that could fit is above {math.ceil(fixed / (1 - safety))} B"
        )
    # K more than doubles from the last step's only when the doubled plan is estimated above the limit
    # plus half the safety margin: within it, the margin absorbs the step (a calibration that moved the
    # estimate, or a batch a little larger than the last) and the plan runs without recomputation; the
    # other half stays for the estimator's error (held up to the budget itself, a GAT step on
    # synth-products' hubs estimated at 0.996 of it peaked at 1.001)
    steady = budget_bytes * (1 - safety / 2)
    plain = memory_model.with_recompute(False)
    plain_built, plain_escape = None, False
    if recompute != "on":
        k, built, capped = _search_k(build, plain, limit, n, start_k, steady)
        worst = max(built[2])
        if worst <= limit or capped:
            return built, False
        # one seed per micro-batch above the limit: run it anyway if only the margin or calibration says
        # no (with recompute="auto" only when recomputation does not fit the limit either)
        largest = BatchShape.of(built[1][max(range(len(built[1])), key=lambda g: built[2][g])])
        plain_escape = worst <= budget_bytes or plain.has_fitted(largest) or (
            recompute == "off" and _worth_trying(plain, largest, worst, budget_bytes))
        if recompute == "off" and plain_escape:
            return built, False
        plain_worst, plain_built = worst, built
    else:
        plain_worst = max(build(n, plain)[2])
    with_recompute = memory_model.with_recompute(True)
    if recompute != "off":
        # (with "auto" the search starts afresh at K = 1: no step before it ran with recomputation's K)
        k, built, _ = _search_k(build, with_recompute, limit, n, start_k if recompute == "on" else 1,
                                steady if recompute == "on" else None)
        worst = max(built[2])
        if worst <= limit:
            return built, True
        if plain_built is not None and plain_escape:
            return plain_built, False
        largest = BatchShape.of(built[1][max(range(len(built[1])), key=lambda g: built[2][g])])
        if worst <= budget_bytes or _worth_trying(with_recompute, largest, worst, budget_bytes):
            return built, True
        if plain_built is not None and _worth_trying(plain, largest, plain_worst, budget_bytes):
            return plain_built, False
        rc_worst = worst
    else:
        rc_worst = max(build(n, with_recompute)[2])
    need = lambda e: math.ceil(e / (1 - safety))  # noqa: E731
    raise BudgetTooSmallError(
        f"budget {budget_bytes} B is too small for one seed: a single-seed micro-batch is estimated at "
        f"{plain_worst} B ({rc_worst} B with recomputation) against a limit of {int(limit)} B (the budget "
        f"less its {safety:.0%} safety margin); the smallest budget that would fit is {need(plain_worst)} B "
        f"without recomputation and {need(rc_worst)} B with it"
        + (" (recomputation is off)" if recompute == "off" else "")
    )
