"""Buffalo's scheduling (HPCA'25), reimplemented from its description: degree buckets + knapsack.

Given the sampled in-degree of every seed in the output block and K:
1. bucket the seeds by degree, one bucket per degree value (degree 0 included: Buffalo's artifact drops
   zero-in-degree seeds while still dividing by the full seed count, a known defect not reproduced);
2. one bucket is cut into K contiguous chunks: the bucket of degree ``chunk_degree`` (the system passes
   the output layer's fanout: the released code chunks its last bucket, degree = fanout, even when another
   bucket holds more seeds, e.g. degree 1 on real ogbn-arxiv at fanout 25; an empty bucket gives empty
   chunks), or, with ``chunk_degree=None``, the most populous bucket (ties to the higher degree);
3. the other buckets are packed into K groups by repeated 0/1 knapsack on estimated bytes with capacity
   ``(their total estimate) / K``: each of the first K - 1 packs takes, from the heaviest degree down,
   as many seeds as still fit (the greedy solution of a knapsack whose items share a few weights); the
   rest forms the last group;
4. micro-batch ``j`` is chunk ``j`` followed by group ``j``.

The estimate of a seed of degree ``d`` is ``(d + 1) * bytes_per_degree``: one unit per aggregated edge
and one for its own row (so zero-degree seeds still weigh something). Buffalo's per-degree constant
(``D * 18 * 4`` bytes, fitted per dataset) scales every item alike and so does not change the split.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class BucketSchedule:
    """Micro-batches as seed positions (chunk ``j`` then group ``j``), with what built them.

    ``chunks[j]`` and ``groups[j]`` are positions into the seeds; ``microbatches[j]`` is their
    concatenation; ``estimated_bytes[j]`` is micro-batch ``j``'s summed seed estimate. Empty micro-batches
    (K above the seed count) are kept here and skipped by the system.
    """

    big_degree: int
    chunks: tuple[torch.Tensor, ...]
    groups: tuple[torch.Tensor, ...]
    microbatches: tuple[torch.Tensor, ...]
    estimated_bytes: tuple[int, ...]


def seed_cost_bytes(degrees: torch.Tensor, bytes_per_degree: int) -> torch.Tensor:
    """Estimated bytes of seeds with in-degrees ``degrees``: ``(degree + 1) * bytes_per_degree``."""
    return (degrees + 1) * bytes_per_degree


def bucketize(degrees: torch.Tensor, num_microbatches: int, bytes_per_degree: int = 1,
              chunk_degree: Optional[int] = None) -> BucketSchedule:
    """Buffalo's schedule for seeds with sampled in-degrees ``degrees`` (see module docstring): the
    bucket of degree ``chunk_degree`` is chunked, or the most populous one when it is None.

    Invariants: the micro-batches partition ``range(len(degrees))``; every chunk holds only degree
    ``big_degree`` and the chunks are consecutive runs of that bucket in seed order with sizes differing
    by at most one; no group holds degree ``big_degree``.
    """
    if not isinstance(degrees, torch.Tensor) or degrees.dtype != torch.int64 or degrees.dim() != 1:
        raise ValueError("degrees must be a 1-D int64 tensor of in-degrees")
    if degrees.numel() == 0:
        raise ValueError("degrees must hold at least one seed, got an empty tensor")
    if int(degrees.min()) < 0:
        raise ValueError(f"degrees must be >= 0, got {int(degrees.min())}")
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise ValueError(f"num_microbatches must be an int >= 1, got {num_microbatches!r}")
    if isinstance(bytes_per_degree, bool) or not isinstance(bytes_per_degree, int) or bytes_per_degree < 1:
        raise ValueError(f"bytes_per_degree must be an int >= 1, got {bytes_per_degree!r}")
    if chunk_degree is not None and (isinstance(chunk_degree, bool) or not isinstance(chunk_degree, int)
                                     or chunk_degree < 0):
        raise ValueError(f"chunk_degree must be None or an int >= 0, got {chunk_degree!r}")
    k = num_microbatches
    if chunk_degree is None:
        values, counts = torch.unique(degrees, return_counts=True)
        # Most populous bucket; ties go to the higher degree (the fanout bucket in sampled batches).
        best = max(range(values.numel()), key=lambda i: (int(counts[i]), int(values[i])))
        big_degree = int(values[best])
    else:
        big_degree = chunk_degree
    big = torch.nonzero(degrees == big_degree).flatten()
    chunks = tuple(torch.tensor_split(big, k))
    groups = _pack(degrees, big_degree, k, bytes_per_degree)
    microbatches = tuple(torch.cat([c, g]) for c, g in zip(chunks, groups))
    cost = seed_cost_bytes(degrees, bytes_per_degree)
    estimated = tuple(int(cost.index_select(0, mb).sum()) for mb in microbatches)
    return BucketSchedule(big_degree=big_degree, chunks=chunks, groups=groups, microbatches=microbatches,
                          estimated_bytes=estimated)


def _pack(degrees: torch.Tensor, big_degree: int, k: int, bytes_per_degree: int) -> tuple[torch.Tensor, ...]:
    """The seeds outside the big bucket packed into ``k`` groups by repeated greedy 0/1 knapsack."""
    # Remaining seeds of each small bucket, heaviest degree first, each in seed order.
    buckets = [(d, torch.nonzero(degrees == d).flatten())
               for d in torch.unique(degrees).tolist()[::-1] if d != big_degree]
    costs = {d: int(seed_cost_bytes(torch.tensor(d), bytes_per_degree)) for d, _ in buckets}
    total = sum(costs[d] * int(pos.numel()) for d, pos in buckets)
    capacity = total / k
    taken_from = {d: 0 for d, _ in buckets}
    groups = []
    for _ in range(k - 1):
        room = capacity
        picked = []
        for d, pos in buckets:
            left = int(pos.numel()) - taken_from[d]
            n = min(left, int(room // costs[d]))
            if n > 0:
                picked.append(pos[taken_from[d]:taken_from[d] + n])
                taken_from[d] += n
                room -= n * costs[d]
        groups.append(torch.cat(picked) if picked else torch.empty(0, dtype=torch.int64))
    rest = [pos[taken_from[d]:] for d, pos in buckets]
    groups.append(torch.cat(rest) if rest else torch.empty(0, dtype=torch.int64))
    return tuple(groups)
