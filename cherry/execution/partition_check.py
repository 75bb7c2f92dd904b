"""Partition invariance, checked on the user's own run: the gradient must not depend on the split.

An exact model's mini-batch gradient is the same however the batch is split into micro-batches. Where
``options.exactness_check`` asks (the first step by default), `check_step` recomputes the step's
gradient under a second split of the same batch, before the optimizer step, and compares:

- the second split has one micro-batch more than the step's own (K -> K + 1, same recomputation
  setting): other groups of other sizes at about the step's cost and memory; where the step already
  ran one seed per micro-batch, half as many with recomputation (pairs of seeds), where the model can
  recompute;
- it runs on the step's own dropout seed (a replay), on a snapshot of the memory model (the run's
  calibration and its next K are untouched) and with out-of-memory recovery as the run has it, which
  only makes the split finer;
- the step's gradient is kept off the device while the second runs (on the host; on the CPU on a
  thread the emulated device does not count), then restored: the step goes on with its own gradient.

A parameter whose gradients differ by more than ``TOLERANCE`` relative to its largest entry stops the
run with an `ExactnessError`: one line naming the parameter, the difference, the likely cause and the
remedy. Cost: about one more forward and backward of the batch, on the checked steps only.
`compare_gradients` (`check_exact`, `cherry verify`) uses the same comparison.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch

from cherry.planning import BudgetTooSmallError
from cherry.planning.plan import resident_index_bytes

TOLERANCE = 1e-4  # float32 re-association differs by ~1e-6 relative; the known breakers by 1e-3 to 3


@dataclass(frozen=True)
class ParameterDifference:
    name: str
    max_abs_diff: float
    max_rel_diff: float  # max |g_other - g_ref| / max |g_ref|


def compare(names: Sequence[str], reference: Sequence[torch.Tensor],
            other: Sequence[torch.Tensor]) -> tuple[ParameterDifference, ...]:
    """Per-parameter difference of two gradient lists (in ``names``' order)."""
    out = []
    for name, g1, g2 in zip(names, reference, other, strict=True):
        diff = float((g2 - g1).abs().max()) if g1.numel() else 0.0
        ref = float(g1.abs().max()) if g1.numel() else 0.0
        out.append(ParameterDifference(name, diff, diff / ref if ref > 0 else diff))
    return tuple(out)


@dataclass(frozen=True)
class PartitionCheck:
    """One run of the check: the two splits, the differences and the verdict (``skipped``: why no
    second split was run, e.g. a batch of one seed)."""

    num_seeds: int
    first_k: int
    second_k: int
    first_recompute: bool
    second_recompute: bool
    differences: tuple[ParameterDifference, ...] = ()
    tolerance: float = TOLERANCE
    skipped: str = ""

    @property
    def max_rel_diff(self) -> float:
        """The largest relative difference; NaN where any parameter's is (a NaN never passes)."""
        values = [d.max_rel_diff for d in self.differences]
        return math.nan if any(math.isnan(v) for v in values) else max(values, default=0.0)

    @property
    def ok(self) -> bool:
        return bool(self.skipped) or self.max_rel_diff <= self.tolerance  # NaN compares False: not ok

    def describe(self) -> str:
        """One line: what was compared and the largest difference (or why it was skipped)."""
        if self.skipped:
            return f"partition check skipped: {self.skipped}"
        worst = max(self.differences, key=_severity)
        return (f"K={self.first_k}{' (recomputed)' if self.first_recompute else ''} against "
                f"K={self.second_k}{' (recomputed)' if self.second_recompute else ''} on {self.num_seeds} seeds: "
                f"largest relative gradient difference {worst.max_rel_diff:.3g} ({worst.name})")


def _severity(d: ParameterDifference) -> float:
    return math.inf if math.isnan(d.max_rel_diff) else d.max_rel_diff


_CAUSES = ("batch statistics (BatchNorm in training mode, centring or scaling by the batch's mean or norm), "
           "a random op outside cherry.models.ExactDropout (F.dropout, torch.rand*), or a dependence on the "
           "micro-batch's size (e.g. 1 / block.num_dst)")
_REMEDY = ("normalise per node (nn.LayerNorm, a BatchNorm in eval mode), draw randomness with "
           "cherry.models.ExactDropout, scale by per-node quantities; options.exactness_check=off trains it anyway")


def second_split(executor, blocks, first_k: int, first_recompute: bool) -> Union[tuple[int, str], str]:
    """``(K, recompute)`` of the second split, or the reason there is none."""
    n = blocks.num_seeds
    if n < 2:
        return "a batch of one seed has no second split"
    if first_k < n:
        return first_k + 1, "on" if first_recompute else "off"
    if executor._can_recompute and executor.options.recompute != "off":
        return (n + 1) // 2, "on"  # one seed per micro-batch fitted: pairs fit with recomputation, mostly
    return (n + 1) // 2, "off"


def _within_budget(executor, plan, held_bytes: int) -> None:
    """Raise `BudgetTooSmallError` when the second split, beside ``held_bytes`` the step still holds,
    is estimated above the planner's limit (the budget less its safety margin): the check never
    takes a run over its budget, it is skipped instead."""
    budget = executor.options.budget_bytes
    if budget is None:
        return
    limit = budget * (1 - executor.options.safety)
    if plan.max_estimated_bytes + held_bytes > limit:
        raise BudgetTooSmallError(f"estimated at {plan.max_estimated_bytes + held_bytes} B beside the step's own "
                                  f"micro-batches, above the limit of {int(limit)} B")


def _off_device(executor, fn):
    """``fn()`` where the device's accounting does not see what it makes: on a CPU device, on the
    executor's preparation thread (the emulated device counts the training thread's tensors, as a GPU
    counts its own memory and not the host's); on a GPU ``fn`` must make host tensors itself."""
    if executor.device.type == "cpu":
        return executor._pool.submit(fn).result()
    return fn()


def _host_copy(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().to("cpu", copy=True) for t in tensors]


def check_step(executor, blocks, features: torch.Tensor, labels: torch.Tensor, stats) -> PartitionCheck:
    """Check the step just accumulated by ``executor`` (its ``stats``) under a second split (module
    docstring). Raises `cherry.execution.exactness.ExactnessError` when the gradients differ."""
    from cherry.execution.options import PlannedBatch

    # a planned batch's micro-batches stay alive (its caller holds them) while the second split runs:
    # their resident index buffers count against the budget beside the second split's own
    held = resident_index_bytes(blocks.plan.microbatches) if isinstance(blocks, PlannedBatch) else 0
    if isinstance(blocks, PlannedBatch):
        blocks = blocks.blocks
    base = dict(num_seeds=blocks.num_seeds, first_k=stats.num_microbatches, first_recompute=bool(stats.recompute))
    # a non-finite loss is the run's divergence to report (cherry.errors.check_loss), not a split's
    choice = second_split(executor, blocks, stats.num_microbatches, bool(stats.recompute)) \
        if math.isfinite(stats.loss) else f"the step's loss is {stats.loss}: nothing to compare"
    if isinstance(choice, str):
        return PartitionCheck(**base, second_k=stats.num_microbatches, second_recompute=bool(stats.recompute),
                              skipped=choice)
    second_k, mode = choice
    names = [n for n, p in executor.model.named_parameters() if p.requires_grad]
    first = _off_device(executor, lambda: _host_copy(executor.gradients()))
    try:
        with executor.overridden(isolated=True):
            # planned where the device's accounting does not see it, as the loader plans the run's
            # steps: a split that does not fit is then skipped without having taken the device's memory;
            # a streamed step's second split streams too: it must fit where the first did
            stream = "on" if getattr(stats, "streamed", False) else None
            plan = _off_device(executor, lambda: executor.plan(blocks, num_microbatches=second_k, recompute=mode,
                                                               stream=stream))
            _within_budget(executor, plan, held)
            second = executor.accumulate(blocks, features, labels, plan=plan, replay=True)
        differences = _off_device(executor, lambda: compare(names, first, _host_copy(executor.gradients())))
    except (torch.OutOfMemoryError, BudgetTooSmallError) as exc:
        reason = f"the second split ({second_k} micro-batches) did not fit: {str(exc).strip().splitlines()[0]}"
        check = PartitionCheck(**base, second_k=second_k, second_recompute=mode == "on", skipped=reason)
        failed = True
    else:
        check = PartitionCheck(**base, second_k=second.num_microbatches, second_recompute=bool(second.recompute),
                               differences=differences)
        failed = False
    finally:
        executor.set_gradients([g.to(executor.device) for g in first])
    if failed:  # after the handler: its traceback held the failed micro-batch's tensors
        executor.free()
    if not check.ok:
        raise _error(executor, check, blocks, features)
    return check


def _error(executor, check: PartitionCheck, blocks, features: torch.Tensor) -> Exception:
    """The one-line `ExactnessError` of a failed check, naming the module that breaks it where a probe
    forward finds one (`check_functional`)."""
    from cherry.execution.exactness import ExactnessError, check_functional

    worst = max(check.differences, key=_severity)
    cause: Optional[str] = None
    try:
        x = features.index_select(0, blocks.input_nodes.to(features.device)).to(executor.device)
        check_functional(executor.model, blocks.to(executor.device), x)
    except ExactnessError as found:
        cause = str(found)
    except Exception:  # noqa: BLE001 - the probe is a diagnosis only; the check's verdict stands
        cause = None
    return ExactnessError(
        f"the gradient depends on how the batch is split: parameter {worst.name} differs by "
        f"{worst.max_rel_diff:.3g} of its largest entry (tolerance {check.tolerance:g}) between "
        f"K={check.first_k} and K={check.second_k} on the first checked batch of {check.num_seeds} seeds; "
        f"{'found: ' + cause if cause else 'likely cause: ' + _CAUSES}; remedy: {_REMEDY}")
