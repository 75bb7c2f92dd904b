"""Feature residency in the budget: which input-feature rows live on the device, sized together with K.

One budget holds the activations of the largest micro-batch and a device-resident feature cache.
The cache holds the hottest rows, hottest = highest in-degree (`hot_order`, decided once per
dataset: a row's chance to be sampled as a neighbour grows with its in-degree, as PaGraph observed);
every other row is a miss, gathered from (pinned) host memory and staged once per mini-batch.

Choosing (`choose_residency`): each candidate cache size (`candidate_rows`: no cache, shares of the
rows, all of them) is priced on a representative mini-batch: its K and largest micro-batch estimate
from the planner with the cache's bytes counted as fixed (a callable, so this module stays pure),
and its misses (the batch's distinct input rows outside the cache). Among the candidates that fit,
the one with the least estimated step cost (`ResidencyCosts.step_cost_s`: miss bytes over the
host-to-device bandwidth + a per-micro-batch overhead times K) wins; ties go to the smaller cache.
All rows on the device is simply the candidate with no misses: it wins whenever it fits beside the
largest micro-batch at no larger K. When nothing fits, the plan has no cache (and the run meets the
planner's usual refusal). The choice is a frozen `ResidencyPlan`, recorded with the run.

The cost table is a frozen dataclass so that tests (and users with a measured link) can feed their own.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import torch

ALL, CACHE, NONE = "all", "cache", "none"
RESIDENCY_MODES = ("auto", NONE, ALL)  # the run option ``feature_cache``
# candidate cache sizes, as shares of the feature rows (0: no cache, 1: all rows on the device)
DEFAULT_SHARES = (0.0, 1 / 64, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)


@dataclass(frozen=True)
class ResidencyCosts:
    """The step-cost table: ``miss_bytes / h2d_bytes_per_s + num_microbatches * microbatch_overhead_s``.

    Defaults: a PCIe 4.0 x16 link's effective pinned host-to-device rate, and the fixed cost of one
    micro-batch (its launches, its gradient accumulation, its share of the optimizer-free step) on a
    GPU of that class; the same table prices the CPU's emulated device, so the choice made here is the
    one a GPU run of the same budget would make."""

    h2d_bytes_per_s: float = 12e9
    microbatch_overhead_s: float = 2e-3

    def __post_init__(self) -> None:
        for name in ("h2d_bytes_per_s", "microbatch_overhead_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.h2d_bytes_per_s == 0:
            raise ValueError("h2d_bytes_per_s must be > 0")

    def step_cost_s(self, miss_bytes: int, num_microbatches: int) -> float:
        return miss_bytes / self.h2d_bytes_per_s + num_microbatches * self.microbatch_overhead_s


@dataclass(frozen=True)
class ResidencyCandidate:
    """One priced (cache size, K) pair. ``num_microbatches`` None: it does not fit the budget."""

    cache_rows: int
    cache_bytes: int
    num_microbatches: Optional[int]
    peak_bytes: Optional[int]  # the largest micro-batch's estimate, fixed bytes and cache included
    miss_bytes: int  # host-to-device feature bytes of the representative mini-batch
    priced: bool = True  # False: not planned, as it could not fit or could not be the cheapest (`price_candidates`)

    @property
    def fits(self) -> bool:
        return self.num_microbatches is not None


@dataclass(frozen=True)
class ResidencyPlan:
    """Where the input features live during a run (see module docstring).

    ``mode``: "all" (every row on the device), "cache" (the ``cache_rows`` hottest rows) or "none".
    ``candidates``: what was priced (empty when nothing was chosen: forced, or nothing to fit)."""

    mode: str
    cache_rows: int
    num_rows: int
    row_bytes: int
    budget_bytes: Optional[int]
    reason: str
    num_microbatches: Optional[int] = None  # the chosen pair's K on the representative batch
    step_cost_s: Optional[float] = None
    candidates: tuple[ResidencyCandidate, ...] = ()

    @property
    def cache_bytes(self) -> int:
        return self.cache_rows * self.row_bytes

    @property
    def budget_share(self) -> Optional[float]:
        """The cache's share of the budget (None without a budget)."""
        return self.cache_bytes / self.budget_bytes if self.budget_bytes else None

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(cache_bytes=self.cache_bytes, budget_share=self.budget_share)
        return out


def hot_order(indptr: torch.Tensor) -> torch.Tensor:
    """Node ids by in-degree, highest first, ties by id (CSC ``indptr``: in-degree = its difference)."""
    if not isinstance(indptr, torch.Tensor) or indptr.dim() != 1 or indptr.numel() < 1:
        raise ValueError("indptr must be a 1-D tensor with at least one entry (CSC offsets)")
    degree = (indptr[1:] - indptr[:-1]).cpu()
    return torch.sort(-degree, stable=True).indices


def slot_map(order: torch.Tensor, cache_rows: int) -> torch.Tensor:
    """``slot_of`` [N]: the cache slot of each row (its position among the ``cache_rows`` hottest), -1
    for a row not cached."""
    if isinstance(cache_rows, bool) or not isinstance(cache_rows, int) or not 0 <= cache_rows <= order.numel():
        raise ValueError(f"cache_rows must be an int in [0, {order.numel()}], got {cache_rows!r}")
    slot_of = torch.full((order.numel(),), -1, dtype=torch.int64)
    slot_of[order[:cache_rows]] = torch.arange(cache_rows, dtype=torch.int64)
    return slot_of


def rank_of(order: torch.Tensor) -> torch.Tensor:
    """Each row's position in ``order`` (hotness rank: 0 is the hottest)."""
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), dtype=order.dtype)
    return rank


def candidate_rows(num_rows: int, shares: Sequence[float] = DEFAULT_SHARES) -> tuple[int, ...]:
    """Distinct cache sizes in rows, ascending: ``floor(share * num_rows)`` for each share in [0, 1]."""
    if isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < 0:
        raise ValueError(f"num_rows must be an int >= 0, got {num_rows!r}")
    for s in shares:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s <= 1:
            raise ValueError(f"shares must be numbers in [0, 1], got {s!r}")
    return tuple(sorted({int(s * num_rows) for s in shares}))


def miss_rows(input_ranks: torch.Tensor, cache_rows: int) -> int:
    """How many of a mini-batch's distinct input rows (given by their hotness ranks) a cache of the
    ``cache_rows`` hottest rows misses."""
    return int((input_ranks >= cache_rows).sum())


def price_candidates(rows: Sequence[int], row_bytes: int, input_ranks: torch.Tensor,
                     plan_k: Callable[[int], Optional[tuple[int, int]]],
                     costs: Optional[ResidencyCosts] = None) -> tuple[ResidencyCandidate, ...]:
    """Price the cache sizes ``rows`` (ascending) on one representative mini-batch.

    ``input_ranks``: the hotness ranks of the batch's distinct input rows. ``plan_k(cache_bytes)``:
    ``(K, largest micro-batch estimate)`` with ``cache_bytes`` counted as fixed, or None when no K fits.

    Without ``costs`` every size is planned. With them only the sizes that could be chosen are, since
    a plan is the expensive part. Fitting is monotone in the size (a larger cache only adds fixed
    bytes), so the largest size that fits is found by bisection. No size fits at a K below no cache's,
    so a size whose misses plus no cache's K already cost as much as the cheapest size priced cannot
    win. Those sizes
    come back with ``priced=False`` (and no K). The choice (`choose_candidate`) is the same as with
    every size planned."""
    misses = [miss_rows(input_ranks, r) * row_bytes for r in rows]
    planned: dict[int, Optional[tuple[int, int]]] = {}

    def plan(i: int):
        if i not in planned:
            planned[i] = plan_k(rows[i] * row_bytes)
        return planned[i]

    if costs is None:
        for i in range(len(rows)):
            plan(i)
    elif rows and plan(0) is not None:
        low, high = 0, len(rows) - 1  # invariant: rows[low] fits; nothing above high does
        while low < high:
            mid = (low + high + 1) // 2
            if plan(mid) is not None:
                low = mid
            else:
                high = mid - 1
        k0 = planned[0][0]
        bound = lambda i: costs.step_cost_s(misses[i], k0)  # noqa: E731  (no size fits at a K below k0)
        best = min(costs.step_cost_s(misses[i], planned[i][0]) for i in planned if planned[i] is not None)
        for i in sorted(range(low + 1), key=bound):
            if i in planned or bound(i) > best:  # (equal: it could tie, and ties go to the smaller cache)
                continue
            if plan(i) is not None:
                best = min(best, costs.step_cost_s(misses[i], planned[i][0]))
    out = []
    for i, r in enumerate(rows):
        fitted = planned.get(i)
        k, peak = fitted if fitted is not None else (None, None)
        out.append(ResidencyCandidate(r, r * row_bytes, k, peak, misses[i], priced=i in planned))
    return tuple(out)


def choose_candidate(candidates: Sequence[ResidencyCandidate], costs: ResidencyCosts) -> Optional[ResidencyCandidate]:
    """The fitting candidate of least `ResidencyCosts.step_cost_s` (ties: the smaller cache), or None."""
    if not isinstance(costs, ResidencyCosts):
        raise TypeError(f"costs must be a ResidencyCosts, got {type(costs).__name__}")
    fitting = [c for c in candidates if c.fits]
    if not fitting:
        return None
    return min(fitting, key=lambda c: (costs.step_cost_s(c.miss_bytes, c.num_microbatches), c.cache_bytes))


def choose_residency(candidates: Sequence[ResidencyCandidate], num_rows: int, row_bytes: int,
                     budget_bytes: Optional[int], costs: ResidencyCosts = ResidencyCosts()) -> ResidencyPlan:
    """The `ResidencyPlan` of the cheapest fitting candidate (see module docstring)."""
    best = choose_candidate(candidates, costs)
    if best is None:
        return ResidencyPlan(NONE, 0, num_rows, row_bytes, budget_bytes,
                             "no cache size fits beside the largest micro-batch", candidates=tuple(candidates))
    cost = costs.step_cost_s(best.miss_bytes, best.num_microbatches)
    mode = ALL if best.cache_rows >= num_rows and num_rows > 0 else CACHE if best.cache_rows else NONE
    what = {ALL: "all rows fit on the device", CACHE: f"the {best.cache_rows} hottest rows (by in-degree)",
            NONE: "no cache"}[mode]
    reason = (f"{what}: K={best.num_microbatches}, {best.miss_bytes} B moved per step, estimated "
              f"{cost * 1e3:.3f} ms of transfer and micro-batch overhead, the least of {len(candidates)} sizes")
    return ResidencyPlan(mode, best.cache_rows, num_rows, row_bytes, budget_bytes, reason,
                         best.num_microbatches, cost, tuple(candidates))
