"""Out-of-memory recovery inside a step: re-plan the seeds not yet done, finer, and go on.

Exactly once: a micro-batch's gradients are added to the accumulators only after its backward has
completed, so an out-of-memory anywhere inside it leaves them as they were; recovery re-plans the
seeds of the failed micro-batch and of those after it, so no seed is lost and none counted twice.
The re-plan uses a recalibrated (larger) estimate, hence a larger K; a single seed that failed
without recomputation is re-planned with it where the options allow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from cherry.execution.options import ExecutorOptions
from cherry.memory import SingleSeedOutOfMemoryError
from cherry.planning import BatchShape, MemoryModel, MicrobatchPlan
from cherry.planning.plan import resident_index_bytes
from cherry.sampling import Blocks


class MicrobatchOutOfMemoryError(torch.OutOfMemoryError):
    """A micro-batch did not fit and could not be recovered (fixed K, or a single seed)."""


class SingleSeedMicrobatchOutOfMemoryError(MicrobatchOutOfMemoryError, SingleSeedOutOfMemoryError):
    """A micro-batch of one seed did not fit (with recomputation where it was allowed): no K fits."""


@dataclass
class StepPlan:
    """The plan a step is working through, replaced from micro-batch ``k`` on by a recovery (mutable:
    the step's own working state, never handed to another stage)."""

    groups: list[torch.Tensor]  # seed positions of each micro-batch
    parts: list[Blocks]  # host slices
    device_parts: list[Blocks]  # their index buffers on the device
    estimates: list[int]  # estimated peak bytes of each micro-batch
    recompute: bool
    stream: bool = False  # the first layer streams its input rows

    @property
    def resident_bytes(self) -> int:
        return resident_index_bytes(self.parts)


@dataclass(frozen=True)
class Replanner:
    """What a recovery needs from the executor: its options, model of memory and capacity, and how
    it plans (``plan(positions, recompute, num_microbatches)``), moves blocks and frees memory."""

    options: ExecutorOptions
    memory_model: MemoryModel
    capacity_bytes: Optional[int]
    can_recompute: bool
    plan: Callable[..., MicrobatchPlan]
    to_device: Callable[[list[Blocks]], list[Blocks]]
    free: Callable[[], None]


def recover(step: StepPlan, k: int, shape: BatchShape, recoveries: int, oom_message: str, how: Replanner) -> None:
    """Recovery from an out-of-memory of micro-batch ``k``: recalibrate, then re-plan ``step`` from
    ``k`` on, finer than before (in place). Raises `MicrobatchOutOfMemoryError` (or its single-seed
    subclass) when nothing finer is left or allowed."""
    single = step.groups[k].numel() == 1
    escalate = single and not step.recompute and how.can_recompute and how.options.recompute != "off"
    if how.capacity_bytes is not None:  # evidence, also when nothing is left to try: the next plan refuses on it
        how.memory_model.observe_oom(shape, how.capacity_bytes - step.resident_bytes, recompute=step.recompute,
                                     stream=step.stream)
    options = how.options
    if (not options.recover_oom or options.budget_bytes is None
            or recoveries >= options.max_oom_recoveries or (single and not escalate)):
        error = SingleSeedMicrobatchOutOfMemoryError if single else MicrobatchOutOfMemoryError
        raise error(
            f"micro-batch {k + 1}/{len(step.parts)} ({step.groups[k].numel()} seeds, estimated "
            f"{step.estimates[k]} B{', with recomputation' if step.recompute else ''}) ran out of device memory: "
            f"{oom_message}")
    replan_rest(step, k, how, "on" if escalate else None)


def over_budget_from(step: StepPlan, k: int, how: Replanner) -> bool:
    """Whether a micro-batch from ``k`` on, priced by the memory model as it is now (recalibrated by
    the step's measurements so far), with the step's resident index buffers, is above the budget."""
    budget = how.options.budget_bytes
    if budget is None or how.options.num_microbatches is not None or k >= len(step.parts):
        return False
    model = how.memory_model.with_stream(step.stream) if how.memory_model.stream != step.stream else how.memory_model
    model = model.without_prefetch() if len(step.parts) == 1 else model
    resident = step.resident_bytes
    return any(model.estimate_bytes(BatchShape.of(p), step.recompute) + resident > budget for p in step.parts[k:])


def replan_rest(step: StepPlan, k: int, how: Replanner, recompute: Optional[str] = None,
                abandon: Callable[[], None] = lambda: None) -> None:
    """Re-plan the seeds of micro-batches ``k`` on (in place), finer than the plan they had: after an
    out-of-memory, or before one, when a measurement above its estimate put the rest above the
    budget (`over_budget_from`). ``recompute="on"``: the seeds re-planned with recomputation.
    ``abandon`` first drops what was prepared ahead for the old plan (it returns nothing to keep)."""
    abandon()
    remaining = torch.cat(step.groups[k:])
    failed_k = len(step.parts) - k  # micro-batches the old plan had left
    del step.parts[k:], step.device_parts[k:]  # free the old plan's blocks before slicing anew
    how.free()
    if recompute == "on":  # one seed did not fit as it is: the same seeds, recomputing
        replan = how.plan(remaining, "on", None)
    else:
        mode = "on" if step.recompute else None
        replan = how.plan(remaining, mode, None)
        if replan.num_microbatches <= failed_k:  # recalibration must make it finer
            replan = how.plan(remaining, mode, min(remaining.numel(), 2 * failed_k))
    step.groups[k:], step.parts[k:] = list(replan.seed_groups), list(replan.microbatches)
    step.device_parts[k:] = how.to_device(step.parts[k:])
    step.estimates[k:] = list(replan.estimated_bytes)
    step.recompute = replan.recompute
    step.stream = replan.stream
