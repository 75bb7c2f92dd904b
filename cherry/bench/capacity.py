"""The largest logical batch a system trains under a device capacity, found by search.

`search_largest_batch(fits, start, limit)` is pure: it only calls ``fits(batch_size) -> bool``.
Doubling from ``start`` (capped at ``limit``, the training set) while batches fit; if ``start`` does
not fit, halving down to ``lowest`` (1, or a fixed K: a batch needs at least one seed per micro-batch). Then bisection between the largest fitting and the smallest failing
batch probed, until ``hi / lo <= ratio_tolerance`` or ``hi - lo <= seed_tolerance``.

Invariants, for a monotone ``fits`` (a batch fits whenever a larger one does). Every batch is probed
at most once and lies in ``[lowest, limit]``. ``largest_fit`` was probed and fitted, ``smallest_oom`` was probed and failed, and no
fitting probe lies above a failing one. ``largest_fit < smallest_oom`` within the tolerance. If the
limit fits, ``largest_fit == limit`` and ``smallest_oom`` is None. If not even ``lowest`` fits,
``largest_fit`` is None. A non-monotone ``fits`` (noise) still ends; the result then is the largest fitting batch below
the smallest failing one. ``fits`` may raise to abort the search (the exception propagates).

`cherry.bench.capacity_run` probes real runs through this function (one short run per batch size);
`wall_reason` says from its probes what stopped a search (`WALL_REASONS`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

RATIO_TOLERANCE = 1.1
SEED_TOLERANCE = 64


@dataclass(frozen=True)
class BatchSearch:
    """The outcome of `search_largest_batch`: probes in the order made, as (batch size, fitted)."""

    largest_fit: Optional[int]
    smallest_oom: Optional[int]
    limit: int
    probes: tuple[tuple[int, bool], ...]

    @property
    def capped(self) -> bool:
        """True if the whole limit (the training set) fits: the search found no wall below it."""
        return self.largest_fit == self.limit


def _check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} has type {type(value).__name__}: expected an int")
    if value < minimum:
        raise ValueError(f"{name} is {value}: expected an int >= {minimum}")
    return value


def check_tolerances(ratio_tolerance: object, seed_tolerance: object) -> None:
    """Raise a one-line error unless the ratio tolerance is a number > 1 and the seed tolerance an int >= 1."""
    if isinstance(ratio_tolerance, bool) or not isinstance(ratio_tolerance, (int, float)):
        raise TypeError(f"ratio_tolerance has type {type(ratio_tolerance).__name__}: expected a number > 1")
    if not ratio_tolerance > 1:  # also rejects NaN
        raise ValueError(f"ratio_tolerance is {ratio_tolerance!r}: expected a number > 1")
    _check_positive_int("seed_tolerance", seed_tolerance)


def search_largest_batch(fits: Callable[[int], bool], start: int, limit: int,
                         ratio_tolerance: float = RATIO_TOLERANCE,
                         seed_tolerance: int = SEED_TOLERANCE, lowest: int = 1) -> BatchSearch:
    """The largest batch size in ``[lowest, limit]`` for which ``fits`` holds (see the module docstring)."""
    if not callable(fits):
        raise TypeError(f"fits has type {type(fits).__name__}: expected a callable fits(batch_size) -> bool")
    _check_positive_int("lowest", lowest)
    _check_positive_int("limit", limit, lowest)
    _check_positive_int("start", start, lowest)
    check_tolerances(ratio_tolerance, seed_tolerance)
    probes: list[tuple[int, bool]] = []

    def probe(batch: int) -> bool:
        fitted = fits(batch)
        if not isinstance(fitted, bool):
            raise TypeError(f"fits({batch}) returned {type(fitted).__name__}: expected a bool")
        probes.append((batch, fitted))
        return fitted

    lo: Optional[int] = None  # largest batch known to fit
    hi: Optional[int] = None  # smallest batch known not to fit
    batch = min(start, limit)
    if probe(batch):
        lo = batch
        while lo < limit:
            batch = min(2 * lo, limit)
            if not probe(batch):
                hi = batch
                break
            lo = batch
    else:
        hi = batch
        while hi > lowest:
            batch = max(hi // 2, lowest)
            if probe(batch):
                lo = batch
                break
            hi = batch
    if lo is None or hi is None:
        return BatchSearch(lo, hi, limit, tuple(probes))
    while hi - lo > seed_tolerance and hi > ratio_tolerance * lo:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return BatchSearch(lo, hi, limit, tuple(probes))


# What stopped a search: the whole training set fitted; the smallest failing batch failed at one seed
# per micro-batch (no K fits it: K alone stops, only recomputation goes further); it failed at a K
# that one seed per micro-batch had not reached (the system's K, e.g. 1, or its own estimate of K);
# a probe ended neither ok nor oom (timeout, error), so the largest batch is a lower bound.
WALL_REASONS = {"training_set": "reached the training set", "single_seed": "one seed does not fit",
                "capacity": "out of memory", "stopped": "search stopped (lower bound)"}


def wall_reason(status: str, largest_fit: Optional[int], smallest_oom: Optional[int], limit: int,
                probes: Sequence[Mapping[str, Any]]) -> str:
    """The key of `WALL_REASONS` for a search record's ``status``, result and ``probes`` (each a dict
    with ``batch_size``, ``status`` and, from records that have it, ``oom_single_seed``)."""
    if status != "ok":
        return "stopped"
    if largest_fit is not None and largest_fit == limit:
        return "training_set"
    failed = next((p for p in probes if p.get("batch_size") == smallest_oom and p.get("status") == "oom"), None)
    return "single_seed" if failed is not None and failed.get("oom_single_seed") else "capacity"
