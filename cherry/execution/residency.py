"""The Trainer's hook that decides feature residency (`cherry.planning.residency`) and builds the cache.

`place_features(trainer, memory)` runs once, after the Trainer has its executor and sampler:

- device construction (graph, features and labels already on the GPU): "all", nothing to build;
- option ``feature_cache`` "none" or "all": as asked (a forced "all" that does not fit is the run's
  out-of-memory, as on a real device);
- no budget (a CPU without ``--device-memory``): "none", there is nothing to fit a cache in;
- "auto": the candidate cache sizes are priced on the run's own first mini-batch, sampled with a copy
  of the run's sampling generator, so the run's batches are unchanged. K and the largest micro-batch
  estimate come from the executor's planner (its contiguous split, unrefined), with the cache (rows
  plus its 8-byte-per-row slot index) counted as fixed bytes. The misses come from that batch's
  distinct input rows. Only the sizes that could win are planned (`price_candidates`); the cheapest
  pair that fits wins (`choose_residency`).

Returns the `ResidencyPlan` and the `FeatureCache` to hand to the executor (None: no cache).
"""
from __future__ import annotations

from typing import Optional

import torch

from cherry.execution.feature_cache import FeatureCache
from cherry.planning import BudgetTooSmallError
from cherry.planning.residency import (ALL, NONE, ResidencyCosts, ResidencyPlan, candidate_rows, choose_residency,
                                       hot_order, price_candidates, rank_of)
from cherry.sampling import sampling_generator, spec_seed_batches

_INDEX_BYTES_PER_ROW = 8  # slot_of: one int64 per feature row


def residency_option(spec) -> str:
    """The spec's ``feature_cache`` option; "auto" for a system without one."""
    return spec.options.get("feature_cache", "auto")


def place_features(trainer, memory=None, costs: ResidencyCosts = ResidencyCosts()
                   ) -> tuple[ResidencyPlan, Optional[FeatureCache]]:
    """Decide where the trainer's input features live and build its cache (see module docstring)."""
    from cherry.sampling.placement import DEVICE

    features = trainer.data.features
    num_rows, row_bytes = int(features.shape[0]), int(features.shape[1] * features.element_size())
    budget = trainer.executor.options.budget_bytes
    mode = residency_option(trainer.spec)
    if trainer.construction.where == DEVICE:
        return ResidencyPlan(ALL, num_rows, num_rows, row_bytes, budget,
                             "device construction: the features live on the device with the graph"), None
    if mode == NONE:
        return ResidencyPlan(NONE, 0, num_rows, row_bytes, budget, "options.feature_cache is none"), None
    order = hot_order(trainer.dataset.graph.indptr)
    if mode == ALL:
        plan = ResidencyPlan(ALL, num_rows, num_rows, row_bytes, budget, "options.feature_cache is all")
    elif budget is None:
        return ResidencyPlan(NONE, 0, num_rows, row_bytes, None,
                             "no budget to fit a cache in (a CPU run without --device-memory)"), None
    else:
        plan = _auto(trainer, order, num_rows, row_bytes, budget, costs)
        if plan.mode == NONE:
            return plan, None
    return plan, FeatureCache(features, plan, order, trainer.device, memory)


def _auto(trainer, order: torch.Tensor, num_rows: int, row_bytes: int, budget: int,
          costs: ResidencyCosts) -> ResidencyPlan:
    """Price the candidate sizes on the run's first mini-batch and choose (see module docstring)."""
    executor = trainer.executor
    seeds = spec_seed_batches(trainer.spec, trainer.dataset.train_idx, 0 if trainer.spec.epochs else None)[0]
    graph_device = trainer.data.graph.indptr.device
    blocks = trainer.sampler.sample(seeds.to(graph_device), sampling_generator(trainer.spec.seed))
    input_ranks = rank_of(order).index_select(0, blocks.input_nodes.cpu())

    def plan_k(cache_bytes: int):
        fixed = executor.fixed_bytes + cache_bytes
        if cache_bytes:
            fixed += num_rows * _INDEX_BYTES_PER_ROW
        try:
            # priced without refinement (the candidate splits the run's own plans choose among): the
            # sizes compare on the same contiguous split, at a few percent of a refined plan's cost
            plan = executor.plan(blocks, num_microbatches=executor.options.num_microbatches,
                                 memory_model=executor.memory_model.snapshot(fixed_bytes=fixed), recompute="off",
                                 refine=False)
        except BudgetTooSmallError:
            return None
        if plan.max_estimated_bytes > budget:
            return None
        return plan.num_microbatches, plan.max_estimated_bytes

    candidates = price_candidates(candidate_rows(num_rows), row_bytes, input_ranks, plan_k, costs)
    return choose_residency(candidates, num_rows, row_bytes, budget, costs)
