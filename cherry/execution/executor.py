"""Run one mini-batch as K micro-batches with exactly the mini-batch's gradient.

Per step: plan (split + slice, `cherry.planning`), stage the inputs (`cherry.execution.staging`),
then for each micro-batch ``k``: the model's one forward (recomputed or not,
`cherry.execution.recompute`), ``loss_k = sum CE / B`` (B = seeds of the whole mini-batch), gradients
by ``torch.autograd.grad`` added into accumulators with one ``_foreach_add_``, and after the last one a
single optimizer step. Micro-batch ``k + 1`` is prepared by a background thread while ``k`` computes.

Invariants:
- One forward: every path (plain, pipelined, recomputed, cached, streamed) calls ``model(blocks, x)``;
  a path wraps it, never re-implements the model's loop. A streamed micro-batch
  (`cherry.execution.stream`) keeps its wrapper open over backward, which gathers its rows again.
- Exactly-once gradients: a micro-batch's gradients reach the accumulators only after its backward
  completed; an out-of-memory re-plans the seeds not yet done (`cherry.execution.recovery`).
- Same dropout masks in every micro-batch of a step: before the first, the model's `NodeDropout`
  layers get the step's seed (``options.dropout_seed`` and the step count).
- No host sync inside a micro-batch: loss and correct counts accumulate on the device and are read
  once per step; memory statistics are read once per micro-batch window.
- Partition invariance checked where the options ask (`cherry.execution.partition_check`): the step's
  gradient is recomputed under a second split before the optimizer step, and a difference stops it.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

from cherry.execution.feature_cache import FeatureCache
from cherry.execution.options import ExecutorOptions, PlannedBatch, StepStats
from cherry.execution.recompute import can_recompute, no_units_error, recomputed
from cherry.execution.recovery import (MicrobatchOutOfMemoryError, Replanner, SingleSeedMicrobatchOutOfMemoryError,
                                       StepPlan, over_budget_from, recover, replan_rest)
from cherry.execution.staging import PreparedInputs, StagedBatch, Staging
from cherry.execution.stream import can_stream, check_streamable, chunk_rows, stream_width, streamed
from cherry.models.dropout import set_dropout_step, step_seed
from cherry.models.sage import reads_degree_layouts
from cherry.planning import BatchShape, BudgetTooSmallError, MemoryModel, MicrobatchPlan, plan_microbatches
from cherry.probe import DeviceMemoryLike, NullProbe, Probe
from cherry.sampling import Blocks

__all__ = ["ExecutorOptions", "MicrobatchExecutor", "MicrobatchOutOfMemoryError", "PlannedBatch",
           "SingleSeedMicrobatchOutOfMemoryError", "StepStats"]


@dataclass
class _Totals:
    """What a step's micro-batches add up (mutable: the step loop's own state). Loss and correct counts
    stay on the device until the step's one read."""

    loss: torch.Tensor
    correct: torch.Tensor
    rows_read: int
    rows_missed: int
    recoveries: int = 0
    measured_peaks: list[int] = field(default_factory=list)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "out of memory"


class MicrobatchExecutor:
    """Gradient-accumulating executor for one model and optimizer (see module docstring)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, memory_model: MemoryModel,
                 options: ExecutorOptions, device: torch.device | str = "cpu",
                 seed_rank: Optional[torch.Tensor] = None, memory: Optional[DeviceMemoryLike] = None,
                 probe: Optional[Probe] = None) -> None:
        self.model = model
        self.optimizer = optimizer
        self.memory_model = memory_model
        self.options = options
        self.device = torch.device(device)
        self.seed_rank = seed_rank
        self.memory = memory
        self.probe = probe or NullProbe()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.staging = Staging(self.device, options.stage_features, options.budget_bytes, memory)
        self._num_steps = 0  # accumulations so far: with options.dropout_seed, the step's dropout seed
        self._reads_layouts = reads_degree_layouts(model)  # host slices carry none: made in `plan`
        self._accumulators = [torch.zeros_like(p) for p in self.params]
        self._param_bytes = sum(p.numel() * p.element_size() for p in self.params)
        self._base_fixed_bytes = memory_model.fixed_bytes
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cherry-prepare")
        self._last_k: Optional[int] = None  # the last step's K: where the next automatic K search starts
        self._can_recompute = can_recompute(model)
        if options.recompute == "on" and not self._can_recompute:
            raise no_units_error(model)
        if options.stream_inputs == "on":
            check_streamable(model)  # one line naming the first layer, before any work
        self._can_stream = can_stream(model)
        self._set_stream_chunk()

    # -- configuration -------------------------------------------------------------------------
    @property
    def num_steps(self) -> int:
        """Steps accumulated so far (a resumed run sets it: the next step's dropout seed follows it)."""
        return self._num_steps

    @num_steps.setter
    def num_steps(self, value: int) -> None:
        self._num_steps = int(value)

    @property
    def fixed_bytes(self) -> int:
        """Bytes every plan counts as held outside the activations (parameters, state, feature cache)."""
        return self._base_fixed_bytes

    def set_feature_cache(self, cache: Optional[FeatureCache]) -> None:
        """Read input features through ``cache`` (`cherry.execution.feature_cache`) from now on; its
        device bytes join the fixed bytes every plan counts (one budget for activations and cache)."""
        if self.staging.cache is not None:
            self._base_fixed_bytes -= self.staging.cache.nbytes
        self.staging.cache = cache
        if cache is not None:
            self._base_fixed_bytes += cache.nbytes
        self.memory_model.fixed_bytes = self._base_fixed_bytes

    def _set_stream_chunk(self) -> None:
        """Rows per streamed chunk, from the budget, told to the memory model (which prices them as the
        first layer's kept floats: the gathered rows and, with input dropout, their dropped copy)."""
        if not self._can_stream:
            self.stream_chunk_rows = 0
            return
        self.stream_chunk_rows = chunk_rows(stream_width(self.model), self.options.budget_bytes)
        self.memory_model.stream_chunk_rows = self.stream_chunk_rows

    @contextmanager
    def overridden(self, isolated: bool = False, **changes) -> Iterator["MicrobatchExecutor"]:
        """The executor with ``options`` changed by ``changes`` inside the block (e.g. a fixed K for a
        measurement). ``isolated``: plan and calibrate on a snapshot of the memory model, and keep the
        next automatic K search where it was, so what runs inside changes nothing of the run's."""
        saved = self.options, self.memory_model, self._last_k
        self.options = dataclasses.replace(self.options, **changes)
        if isolated:
            self.memory_model = self.memory_model.snapshot()
        try:
            yield self
        finally:
            self.options, self.memory_model, self._last_k = saved

    # -- planning -------------------------------------------------------------------------------
    def plan(self, blocks: Blocks, positions: Optional[torch.Tensor] = None,
             num_microbatches: Optional[int] = None, memory_model: Optional[MemoryModel] = None,
             recompute: Optional[str] = None, refine: bool = True, stream: Optional[str] = None) -> MicrobatchPlan:
        """The plan of ``blocks`` (of the seeds at ``positions``). A fixed K larger than the seeds to
        plan (an epoch's smaller last batch) is cut to one seed per micro-batch. An out-of-memory while
        planning (the slicing itself does not fit) is a `BudgetTooSmallError`: no K can help. For a
        model that reads degree layouts (an LSTM aggregator) every micro-batch carries its layout.
        ``recompute`` overrides ``options.recompute`` (a recovery's escalation); ``refine=False``
        plans the contiguous split only (`plan_microbatches`); ``stream`` overrides
        ``options.stream_inputs`` (a recovery keeps a streamed step streamed)."""
        if num_microbatches is not None:
            num_microbatches = min(num_microbatches, blocks.num_seeds if positions is None else positions.numel())
        try:
            plan = plan_microbatches(
                blocks, memory_model or self.memory_model, budget_bytes=self.options.budget_bytes,
                num_microbatches=num_microbatches, seed_rank=self.seed_rank,
                balance=self.options.balance, safety=self.options.safety, positions=positions,
                recompute=(recompute or self.options.recompute) if self._can_recompute else "off",
                start_k=self._last_k if positions is None else None, refine=refine,
                stream=(stream or self.options.stream_inputs) if self._can_stream else "off",
            )
        except torch.OutOfMemoryError as exc:
            raise BudgetTooSmallError(f"the device memory cannot hold even the planning of a batch of "
                                      f"{blocks.num_seeds} seeds (slicing it ran out of memory: {_first_line(exc)}); "
                                      "give more device memory or a smaller batch") from None
        if not self._reads_layouts:
            return plan
        # an LSTM orders destinations by in-degree: the layouts of host slices are made here, off the
        # step's critical path, as a device slice's are when it is sliced
        return dataclasses.replace(plan, microbatches=tuple(p.with_layouts() for p in plan.microbatches))

    def plan_batch(self, blocks: Blocks, features: torch.Tensor) -> PlannedBatch:
        """Stage decision and plan of ``blocks``; safe to call on another thread during a step. The plan
        uses a snapshot of the memory model (one step stale at most): an under-estimate is caught by
        out-of-memory recovery like any other."""
        stage = self.staging.stage_decision(blocks, features, self._base_fixed_bytes)
        staged_bytes = blocks.layers[0].num_src * features.shape[1] * features.element_size() if stage else 0
        snapshot = self.memory_model.snapshot(fixed_bytes=self._base_fixed_bytes + staged_bytes)
        return PlannedBatch(blocks, self.plan(blocks, num_microbatches=self.options.num_microbatches,
                                              memory_model=snapshot), stage)

    # -- the step ---------------------------------------------------------------------------------
    def step(self, blocks: Blocks | PlannedBatch, features: torch.Tensor, labels: torch.Tensor) -> StepStats:
        """One optimizer step on the mini-batch ``blocks`` (features/labels indexed by global id),
        planned now or ahead (`PlannedBatch`). Where ``options.exactness_check`` asks, the gradient is
        checked under a second split first; an `ExactnessError` then leaves the weights untouched."""
        stats = self.accumulate(blocks, features, labels)
        if self.options.checks_step(self._num_steps):
            from cherry.execution.partition_check import check_step

            stats = dataclasses.replace(stats, partition_check=check_step(self, blocks, features, labels, stats))
        with self.probe.phase("optimizer"):
            for p, acc in zip(self.params, self._accumulators):
                p.grad = acc
            self.optimizer.step()
            for p in self.params:
                p.grad = None
        return stats

    def gradients(self) -> list[torch.Tensor]:
        """The gradients accumulated by the last `accumulate` (one per trainable parameter)."""
        return list(self._accumulators)

    def set_gradients(self, gradients: list[torch.Tensor]) -> None:
        """Overwrite the accumulated gradients (in place) with ``gradients``, one per trainable parameter."""
        with torch.no_grad():
            for acc, g in zip(self._accumulators, gradients, strict=True):
                acc.copy_(g)

    def accumulate(self, blocks: Blocks | PlannedBatch, features: torch.Tensor, labels: torch.Tensor,
                   plan: Optional[MicrobatchPlan] = None, replay: bool = False) -> StepStats:
        """Accumulate the whole mini-batch's gradient over its micro-batches (no optimizer step).
        ``plan``: run this plan of ``blocks`` instead of the planned or planner's one; ``replay``: the
        same step again (its dropout seed, not the next step's)."""
        planned = blocks if isinstance(blocks, PlannedBatch) else None
        if planned is not None:
            blocks = planned.blocks
        if not replay:
            self._num_steps += 1
        set_dropout_step(self.model, step_seed(self.options.dropout_seed, self._num_steps))
        labels_of_seeds = labels.index_select(0, blocks.seeds.to(labels.device))
        with self.probe.phase("gather"):
            stage = planned.stage if planned and plan is None else \
                self.staging.stage_decision(blocks, features, self._base_fixed_bytes)
            staged = self.staging.stage_batch(blocks, features, stage, self._base_fixed_bytes)
            self.memory_model.fixed_bytes = self._base_fixed_bytes + staged.nbytes
        unallocated = self._unallocated_bytes()
        if plan is None and planned is not None:
            plan = planned.plan
        elif plan is None:
            with self.probe.phase("plan"):
                plan = self.plan(blocks, num_microbatches=self.options.num_microbatches)
        work = StepPlan(list(plan.seed_groups), list(plan.microbatches), [], list(plan.estimated_bytes),
                        plan.recompute, plan.stream)
        work.device_parts = self.staging.to_device(work.parts, blocks.num_seeds)
        redundancy = plan.redundancy
        del plan, planned  # the step plan owns the parts: a re-plan after an out-of-memory can free them
        totals = self._run_microbatches(blocks, work, staged, features, labels_of_seeds, unallocated)
        if self.options.num_microbatches is None:
            self._last_k = len(work.parts)
        loss_value, correct_value = torch.stack([totals.loss, totals.correct.to(torch.float64)]).tolist()  # the one read
        return StepStats(
            loss=loss_value, num_correct=int(correct_value), num_seeds=blocks.num_seeds,
            num_microbatches=len(work.parts), num_oom_recoveries=totals.recoveries, staged_features=stage,
            estimated_peak_bytes=max(work.estimates),
            measured_peak_bytes=max(totals.measured_peaks) if totals.measured_peaks else None,
            redundancy=redundancy, recompute=work.recompute, streamed=work.stream, feature_rows_read=totals.rows_read,
            feature_rows_missed=totals.rows_missed,
            feature_bytes_moved=totals.rows_missed * features.shape[1] * features.element_size(),
        )

    def _unallocated_bytes(self) -> int:
        """What the model counts as fixed but is not allocated yet (an optimizer's state before its first
        step): credited to each measurement of this step, or the first step's micro-batches would
        calibrate the per-count scale down by it and the next step, with the state, would overrun. The
        fixed part also counts one micro-batch's gradients, transient, so not live here."""
        live = getattr(self.memory, "live_bytes", None)
        return max(0, self._base_fixed_bytes - self._param_bytes - int(live())) if live is not None else 0

    def _run_microbatches(self, blocks: Blocks, work: StepPlan, staged: StagedBatch, features: torch.Tensor,
                          labels_of_seeds: torch.Tensor, unallocated: int) -> _Totals:
        """The step loop: each micro-batch's inputs, forward, backward and accumulation, with
        out-of-memory recovery re-planning the rest of the step in place."""
        totals = _Totals(torch.zeros((), dtype=torch.float64, device=self.device),
                         torch.zeros((), dtype=torch.int64, device=self.device),
                         staged.rows_read, staged.rows_missed)
        for acc in self._accumulators:
            acc.zero_()
        k, future = 0, None
        while k < len(work.parts):
            shape = BatchShape.of(work.parts[k])
            prepared = logits = loss = grads = oom = None
            try:
                if self.memory is not None:
                    self.memory.reset_peak()
                with self.probe.phase("gather"):
                    prepared, future = self._inputs(k, work, staged, features, labels_of_seeds, future, totals)
                with self.probe.phase("forward_backward"), self._streaming(prepared):
                    logits = self.forward(prepared, work.recompute)
                    loss = F.cross_entropy(logits, prepared.y, reduction="sum") / blocks.num_seeds
                    grads = torch.autograd.grad(loss, self.params, allow_unused=True)
            except torch.OutOfMemoryError as exc:
                # handled after leaving the except block: its traceback pins the failed micro-batch's tensors
                oom = _first_line(exc)
            if oom is not None:
                future = self._abandon(future)
                # a backward that ran out of memory leaves the forward's graph (and its saved
                # activations) reachable from these locals: drop them before re-planning
                prepared = logits = loss = grads = None
                self.free()
                self._recover(blocks, work, k, shape, totals.recoveries, oom)
                totals.recoveries += 1
                continue
            self._add(grads, loss, logits, prepared.y, totals)
            # this micro-batch's inputs go before the next one's peak window opens: held until the next
            # preparation replaced them, they would sit in that window
            prepared = logits = loss = grads = None
            if self.memory is not None:  # the window's one reading (host-side allocator statistics)
                peak = int(self.memory.peak_bytes())
                totals.measured_peaks.append(peak)
                self.memory_model.observe(shape, max(peak - work.resident_bytes + unallocated, 0),
                                          recompute=work.recompute, prefetched=len(work.parts) > 1,
                                          stream=work.stream)
                if peak + unallocated > work.estimates[k]:  # priced low: the rest may now be above the budget
                    future = self._rebalance(blocks, work, k + 1, future)
            k += 1
        return totals

    def _rebalance(self, blocks: Blocks, work: StepPlan, k: int, future):
        """Re-plan the step from micro-batch ``k`` when, recalibrated, one of them is above the budget
        (`cherry.execution.recovery.over_budget_from`): before it runs out of memory, not after."""
        how = self._replanner(blocks, work)
        if over_budget_from(work, k, how):
            future = replan_rest(work, k, how, abandon=lambda: self._abandon(future))
        return future

    def _streaming(self, prepared: PreparedInputs):
        """The streamed input layer's wrapper for ``prepared`` (open over forward and backward), or
        nothing when it carries its rows."""
        return streamed(self.model, prepared.source, prepared.x) if prepared.source is not None else nullcontext()

    def forward(self, prepared: PreparedInputs, recompute: bool) -> torch.Tensor:
        """The model's one forward on one micro-batch; with ``recompute``, the same forward with each
        layer unit under activation checkpointing (`cherry.execution.recompute`)."""
        with recomputed(self.model) if recompute else nullcontext():
            return self.model(prepared.blocks, prepared.x)

    def _inputs(self, k: int, work: StepPlan, staged: StagedBatch, features: torch.Tensor,
                labels_of_seeds: torch.Tensor, future: Optional[Future],
                totals: _Totals) -> tuple[PreparedInputs, Optional[Future]]:
        """Micro-batch ``k``'s inputs (prepared now, or by the future started during ``k - 1``), and the
        future preparing ``k + 1`` when pipelining."""
        def prepare(j: int) -> PreparedInputs:
            return self.staging.prepare(work.parts[j], work.device_parts[j], work.groups[j], staged, features,
                                        labels_of_seeds, self.stream_chunk_rows if work.stream else 0)

        prepared = prepare(k) if future is None else future.result()
        self.staging.use(prepared)
        totals.rows_read += prepared.rows_read
        totals.rows_missed += prepared.rows_missed
        ahead = None
        if self.options.pipeline and k + 1 < len(work.parts):
            ahead = self._pool.submit(prepare, k + 1)
        return prepared, ahead

    def _add(self, grads, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, totals: _Totals) -> None:
        """Add one micro-batch's gradients (one fused launch), loss and correct count to the step's."""
        # ``pairs`` dies with this call, and the gradients with it: the next micro-batch's window holds one
        # set of gradients (the transient set the memory model's fixed part prices), not two
        with torch.no_grad():
            pairs = [(acc, g) for acc, g in zip(self._accumulators, grads) if g is not None]
            if pairs:
                torch._foreach_add_([a for a, _ in pairs], [g for _, g in pairs])
            totals.loss += loss.detach().to(torch.float64)
            totals.correct += (logits.argmax(1) == y).sum()

    def _abandon(self, future: Optional[Future]) -> None:
        """Cancel (or wait out) a preparation in flight after an out-of-memory; it may have queued reads
        of main-stream memory (staged rows, labels, blocks) on the side stream, so the compute stream
        waits for them before anything is freed."""
        if future is not None:
            future.cancel() or future.exception()
        self.staging.main_after_side()
        return None

    def _recover(self, blocks: Blocks, work: StepPlan, k: int, shape: BatchShape, recoveries: int,
                 oom: str) -> None:
        """Re-plan the step from micro-batch ``k`` (`cherry.execution.recovery.recover`)."""
        recover(work, k, shape, recoveries, oom, self._replanner(blocks, work))

    def _replanner(self, blocks: Blocks, work: StepPlan) -> Replanner:
        """What a re-plan of ``work``'s rest needs (`cherry.execution.recovery.Replanner`)."""
        def plan(positions: torch.Tensor, recompute: Optional[str], num_microbatches: Optional[int]):
            # host work, on the idle preparation thread as the loader plans: an emulated device, which
            # counts its own thread's allocations, counts what a GPU would hold, not the host's slices
            with self.probe.phase("plan"):
                return self._pool.submit(self.plan, blocks, positions=positions, recompute=recompute,
                                         num_microbatches=num_microbatches,
                                         stream="on" if work.stream else None).result()

        return Replanner(self.options, self.memory_model,
                         getattr(self.memory, "capacity_bytes", None) or self.options.budget_bytes,
                         self._can_recompute, plan, lambda parts: self.staging.to_device(parts, blocks.num_seeds),
                         self.free)

    def free(self) -> None:
        """Return what a failed micro-batch or step left to the device (garbage and cached blocks)."""
        self.staging.free()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
