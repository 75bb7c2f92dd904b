"""Run one mini-batch as K micro-batches with exactly the mini-batch's gradient.

Per step: plan (split + slice, `cherry.planning`), stage the input features of the whole batch once
(on a GPU, when the budget allows), then for each micro-batch ``k``: forward, ``loss_k = sum CE / B`` (B = seeds
of the whole mini-batch), gradients by ``torch.autograd.grad`` added into accumulators, and after the
last one a single optimizer step. Micro-batch ``k + 1`` is prepared (feature rows indexed, moved to
the device on a side stream) by a background thread while ``k`` computes.

No host sync inside a micro-batch: blocks are valid by construction, so the model's ops check
nothing on the device; every micro-batch's index buffers go to the device in one pinned copy per
step; the side stream waits (an event, no host wait) for the compute stream before it first reads a
step's inputs (labels, staged rows and device-built blocks are written there), and the compute stream
waits for the side stream after an out-of-memory before anything is freed; side-stream tensors are
handed to the compute stream with an event wait and ``record_stream`` (no host wait); loss and correct counts accumulate on the device and are read once per step;
gradients are added with one ``_foreach_add_``; the memory statistics are read once per
micro-batch window (host-side allocator counters on a GPU).

Input features: read through the run's device feature cache when it has one (`set_feature_cache`,
`cherry.execution.feature_cache`: hits from the device, misses from host memory), else gathered from
the host table. Every step counts the rows its gathers read and those moved host-to-device
(`StepStats.feature_*`), following the GPU's staging rule on every device, from host index tensors
only, so a CPU run counts the bytes a GPU run of the same budget moves.

Dropout: before a step's first micro-batch the model's `NodeDropout` layers get that step's seed
(``options.dropout_seed`` and the executor's step count), so every micro-batch of the step applies
the same mask to the same node and the accumulated gradient is the mini-batch's with dropout too.

Exactly-once gradients: a micro-batch's gradients are added to the accumulators only after its
backward has completed, so an out-of-memory anywhere inside it leaves the accumulators as they were.
Recovery then re-plans the seeds not yet done with a recalibrated (larger) estimate, hence a larger K,
and continues the same step: no seed lost, none counted twice.

Recomputation: a plan with ``recompute`` runs each layer under activation checkpointing
(`torch.utils.checkpoint`), so forward keeps only the layers' inputs and backward recomputes one layer
at a time. It is exact: dropout masks are a function of node, layer and step, not of an RNG stream.
The planner picks it only when one seed per micro-batch does not fit (``options.recompute="auto"``).
"""
from __future__ import annotations

import dataclasses
import gc
from contextlib import nullcontext
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from cherry.execution.feature_cache import FeatureCache, moved_rows
from cherry.execution.transfer import PinnedRows, blocks_to_device, index_tensors
from cherry.memory import SingleSeedOutOfMemoryError
from cherry.models.dropout import set_dropout_step, step_seed
from cherry.models.sage import reads_degree_layouts
from cherry.probe import DeviceMemoryLike, NullProbe, Probe
from cherry.planning import BatchShape, BudgetTooSmallError, MemoryModel, MicrobatchPlan, plan_microbatches
from cherry.planning.plan import resident_index_bytes
from cherry.planning.residency import ALL
from cherry.sampling import Blocks


class MicrobatchOutOfMemoryError(torch.OutOfMemoryError):
    """A micro-batch did not fit and could not be recovered (fixed K, or a single seed)."""


class SingleSeedMicrobatchOutOfMemoryError(MicrobatchOutOfMemoryError, SingleSeedOutOfMemoryError):
    """A micro-batch of one seed did not fit (with recomputation where it was allowed): no K fits."""


@dataclass(frozen=True)
class ExecutorOptions:
    """How a step is executed, derived from a run spec by `from_spec` (the one place that maps the
    spec's settings to the executor's). ``num_microbatches=None`` means: choose K from ``budget_bytes``."""

    num_microbatches: Optional[int]
    budget_bytes: Optional[int]
    stage_features: bool
    pipeline: bool
    balance: str
    safety: float
    recover_oom: bool
    max_oom_recoveries: int = 8
    dropout_seed: int = 0  # with the step count, seeds every step's dropout masks (cherry.models.dropout)
    recompute: str = "auto"  # per-layer recomputation: "auto" (when K alone cannot fit), "on", "off"

    def __post_init__(self) -> None:
        if self.num_microbatches is None and self.budget_bytes is None:
            raise ValueError("set num_microbatches (a fixed K) or budget_bytes (automatic K)")
        if self.num_microbatches is not None and self.num_microbatches < 1:
            raise ValueError(f"num_microbatches must be >= 1, got {self.num_microbatches}")
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {self.budget_bytes}")
        if self.recompute not in ("auto", "on", "off"):
            raise ValueError(f"recompute must be 'auto', 'on' or 'off', got {self.recompute!r}")

    @staticmethod
    def for_k(num_microbatches: Optional[int], budget_bytes: Optional[int] = None, **changes) -> "ExecutorOptions":
        """Options for K = ``num_microbatches`` (None: from ``budget_bytes``) with cherry's default
        settings, read from the systems table like every spec's (`cherry.systems`), and ``changes``."""
        from cherry.systems.table import system_entry

        o = system_entry("cherry").option_defaults
        base = ExecutorOptions(num_microbatches=num_microbatches, budget_bytes=budget_bytes,
                               stage_features=o["stage_features"], pipeline=o["pipeline"], balance=o["balance"],
                               safety=o["safety"], recover_oom=num_microbatches is None,
                               recompute=o.get("recompute", "auto"))
        return dataclasses.replace(base, **changes)

    @staticmethod
    def from_spec(spec, budget_bytes: Optional[int]) -> "ExecutorOptions":
        """The options of run spec ``spec`` (a `cherry.spec.RunSpec` of system cherry, whose options
        hold every key) under the resolved budget.

        "auto" K (``spec.num_microbatches is None``) chooses K from the budget and recovers from an
        out-of-memory by re-planning finer; without a budget it is K = 1. A fixed K never re-plans.
        """
        o = spec.options
        fixed_k = spec.num_microbatches
        if fixed_k is None and budget_bytes is None:
            fixed_k = 1
        return ExecutorOptions(
            num_microbatches=fixed_k, budget_bytes=budget_bytes,
            stage_features=o["stage_features"], pipeline=o["pipeline"], balance=o["balance"], safety=o["safety"],
            recover_oom=spec.num_microbatches is None, dropout_seed=spec.seed,
            recompute=o.get("recompute", "auto"),
        )


@dataclass(frozen=True)
class StepStats:
    """What one optimizer step did."""

    loss: float
    num_correct: int
    num_seeds: int
    num_microbatches: int
    num_oom_recoveries: int
    staged_features: bool
    estimated_peak_bytes: int
    measured_peak_bytes: Optional[int]
    redundancy: tuple[float, ...]
    recompute: bool = False  # micro-batches ran with per-layer activation recomputation
    # input-feature traffic, counted as a GPU run moves it (`_rows_moved`): rows read by the step's
    # gathers, those of them not on the device (misses), and the misses' bytes moved host-to-device
    feature_rows_read: int = 0
    feature_rows_missed: int = 0
    feature_bytes_moved: int = 0


@dataclass(frozen=True)
class PlannedBatch:
    """A sampled mini-batch with its micro-batch plan, made ahead of its step on another thread.

    The plan used a snapshot of the memory model taken when it was made (one step stale at most);
    an under-estimate is caught by out-of-memory recovery like any other.
    """

    blocks: Blocks
    plan: MicrobatchPlan
    stage: bool


@dataclass(frozen=True)
class _Prepared:
    blocks: Blocks
    x: torch.Tensor
    y: torch.Tensor
    ready: Optional["torch.cuda.Event"] = None  # end of its preparation on the side stream
    rows_read: int = 0  # feature rows this preparation gathered (0 when it read staged rows)
    rows_missed: int = 0  # of them, rows moved host-to-device


def _tensors_of(prepared: _Prepared) -> list[torch.Tensor]:
    out = [prepared.x, prepared.y]
    for blk in prepared.blocks.layers:
        out += [blk.src_nodes, blk.indptr, blk.indices]
        if blk.layout is not None:
            out += [blk.layout.order, blk.layout.step_sizes, blk.layout.step_offsets]
    if prepared.blocks.input_positions is not None:
        out.append(prepared.blocks.input_positions)
    return out


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
        self._reads_layouts = reads_degree_layouts(model)  # host slices carry none: made in `plan`
        self._accumulators = [torch.zeros_like(p) for p in self.params]
        self._param_bytes = sum(p.numel() * p.element_size() for p in self.params)
        self._base_fixed_bytes = memory_model.fixed_bytes
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cherry-prepare")
        self._side_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._pinned = PinnedRows(slots=2)  # per-micro-batch rows (prepared one ahead)
        self._pinned_stage = PinnedRows(slots=1)  # the whole batch's rows, once per step
        self._num_steps = 0  # accumulations so far: with options.dropout_seed, the step's dropout seed
        self._last_k: Optional[int] = None  # the last step's K: where the next automatic K search starts
        self._can_recompute = hasattr(model, "forward_layer") and hasattr(getattr(model, "spec", None), "num_layers")
        self._cache: Optional[FeatureCache] = None  # the device-resident feature rows (set_feature_cache)

    def set_feature_cache(self, cache: Optional[FeatureCache]) -> None:
        """Read input features through ``cache`` (`cherry.execution.feature_cache`) from now on; its
        device bytes join the fixed bytes every plan counts (one budget for activations and cache)."""
        if self._cache is not None:
            self._base_fixed_bytes -= self._cache.nbytes
        self._cache = cache
        if cache is not None:
            self._base_fixed_bytes += cache.nbytes
        self.memory_model.fixed_bytes = self._base_fixed_bytes

    # -- planning -------------------------------------------------------------------------------
    def _stage_decision(self, blocks: Blocks, feature_dim: int, itemsize: int) -> bool:
        """Stage the batch's input rows on the device once, or gather per micro-batch?

        Staging moves each row over the host-device link once instead of once per micro-batch
        that reads it (``redundancy`` times), at the price of holding all rows during the step. On a
        CPU device there is no link (both ways are host copies), so staging would only add a copy.
        """
        return self.device.type != "cpu" and self._gpu_would_stage(blocks, feature_dim, itemsize)

    def _gpu_would_stage(self, blocks: Blocks, feature_dim: int, itemsize: int) -> bool:
        """The GPU's staging rule, on any device: what the traffic counters follow, so that a CPU run
        (emulated device) counts the bytes a GPU run of the same budget moves."""
        if not self.options.stage_features:
            return False
        staged = blocks.layers[0].num_src * feature_dim * itemsize
        budget = self.options.budget_bytes
        # staging pays when it leaves most of the budget to activations
        return budget is None or self._base_fixed_bytes + staged <= budget // 2

    def _rows_moved(self, nodes: torch.Tensor, features: torch.Tensor) -> tuple[int, int]:
        """``(rows read, rows moved host-to-device)`` of a gather of ``nodes`` (host ids; read on the
        host only, never a device sync)."""
        on_device = features.device.type != "cpu" or (self._cache is not None and self._cache.plan.mode == ALL)
        if nodes.device.type != "cpu":  # device-built blocks: their features live there too
            return int(nodes.numel()), 0
        return int(nodes.numel()), moved_rows(self._cache, nodes, on_device)

    def plan(self, blocks: Blocks, positions: Optional[torch.Tensor] = None,
             num_microbatches: Optional[int] = None, memory_model: Optional[MemoryModel] = None,
             recompute: Optional[str] = None, refine: bool = True) -> MicrobatchPlan:
        """The plan of ``blocks`` (of the seeds at ``positions``). A fixed K larger than the seeds to
        plan (an epoch's smaller last batch) is cut to one seed per micro-batch. An out-of-memory while
        planning (the slicing itself does not fit) is a `BudgetTooSmallError`: no K can help. For a
        model that reads degree layouts (an LSTM aggregator) every micro-batch carries its layout.
        ``recompute`` overrides ``options.recompute`` (a recovery's escalation); ``refine=False``
        plans the contiguous split only (`plan_microbatches`)."""
        if num_microbatches is not None:
            num_microbatches = min(num_microbatches, blocks.num_seeds if positions is None else positions.numel())
        try:
            plan = plan_microbatches(
                blocks, memory_model or self.memory_model, budget_bytes=self.options.budget_bytes,
                num_microbatches=num_microbatches, seed_rank=self.seed_rank,
                balance=self.options.balance, safety=self.options.safety, positions=positions,
                recompute=(recompute or self.options.recompute) if self._can_recompute else "off",
                start_k=self._last_k if positions is None else None, refine=refine,
            )
        except torch.OutOfMemoryError as exc:
            first = (str(exc).strip().splitlines() or ["out of memory"])[0]
            raise BudgetTooSmallError(f"the device memory cannot hold even the planning of a batch of "
                                      f"{blocks.num_seeds} seeds (slicing it ran out of memory: {first}); "
                                      "give more device memory or a smaller batch") from None
        if not self._reads_layouts:
            return plan
        # an LSTM orders destinations by in-degree: the layouts of host slices are made here, off the
        # step's critical path, as a device slice's are when it is sliced
        return dataclasses.replace(plan, microbatches=tuple(p.with_layouts() for p in plan.microbatches))

    def plan_batch(self, blocks: Blocks, features: torch.Tensor) -> PlannedBatch:
        """Stage decision and plan of ``blocks``; safe to call on another thread during a step."""
        stage = self._stage_decision(blocks, features.shape[1], features.element_size())
        staged_bytes = blocks.layers[0].num_src * features.shape[1] * features.element_size() if stage else 0
        snapshot = self.memory_model.snapshot(fixed_bytes=self._base_fixed_bytes + staged_bytes)
        return PlannedBatch(blocks, self.plan(blocks, num_microbatches=self.options.num_microbatches,
                                              memory_model=snapshot), stage)

    # -- preparation (runs on the background thread when pipelining) -----------------------------
    def _prepare(self, mb: Blocks, on_device: Blocks, group: torch.Tensor, staged: Optional[torch.Tensor],
                 features: torch.Tensor, labels_of_seeds: torch.Tensor, counted_staged: bool = False) -> _Prepared:
        """Inputs of one micro-batch on the device (``mb`` on the host, ``on_device`` its copy made by
        `_to_device`). On a GPU the gathers and copies are queued on the side stream and an event marks
        their end; nothing here waits for the device."""
        stream = self._side_stream
        ctx = torch.cuda.stream(stream) if stream is not None else nullcontext()
        with ctx:
            non_blocking = stream is not None
            blocks = on_device
            read = missed = 0
            if staged is not None:
                positions = blocks.input_positions
                x = staged if positions is None else staged.index_select(0, positions)
            elif self._cache is not None:
                x = self._cache.gather(blocks.input_nodes)
            else:
                x = self._pinned.gather(features, mb.input_nodes.to(features.device), self.device)
            if staged is None and not counted_staged:
                read, missed = self._rows_moved(mb.input_nodes, features)
            y = labels_of_seeds.index_select(0, group).to(self.device, non_blocking=non_blocking)
            ready = stream.record_event() if stream is not None else None
        return _Prepared(blocks, x, y, ready, read, missed)

    def _use(self, prepared: _Prepared) -> None:
        """Order the compute stream after the side stream's preparation of ``prepared`` (no host
        wait), and tell the allocator its tensors are used there, so their memory is not handed to
        the side stream again before the compute that reads them has run."""
        if prepared.ready is None:
            return
        main = torch.cuda.current_stream(self.device)
        main.wait_event(prepared.ready)
        for t in _tensors_of(prepared):
            t.record_stream(main)

    # -- the step ---------------------------------------------------------------------------------
    def step(self, blocks: Blocks | PlannedBatch, features: torch.Tensor, labels: torch.Tensor) -> StepStats:
        """One optimizer step on the mini-batch ``blocks`` (features/labels indexed by global id),
        planned now or ahead (`PlannedBatch`)."""
        stats = self.accumulate(blocks, features, labels)
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

    def accumulate(self, blocks: Blocks | PlannedBatch, features: torch.Tensor, labels: torch.Tensor) -> StepStats:
        """Accumulate the whole mini-batch's gradient over its micro-batches (no optimizer step)."""
        planned = blocks if isinstance(blocks, PlannedBatch) else None
        if planned is not None:
            blocks = planned.blocks
        num_seeds = blocks.num_seeds
        self._num_steps += 1
        set_dropout_step(self.model, step_seed(self.options.dropout_seed, self._num_steps))
        labels_of_seeds = labels.index_select(0, blocks.seeds.to(labels.device))
        with self.probe.phase("gather"):
            stage = planned.stage if planned else self._stage_decision(blocks, features.shape[1],
                                                                        features.element_size())
            staged = None
            staged_bytes = 0
            # the counters follow the GPU's staging rule also on the CPU (see _gpu_would_stage)
            counted_staged = stage or self._gpu_would_stage(blocks, features.shape[1], features.element_size())
            rows_read, rows_missed = self._rows_moved(blocks.input_nodes, features) if counted_staged else (0, 0)
            if stage and self._cache is not None:
                staged = self._cache.gather(blocks.input_nodes.to(self.device, non_blocking=True))
                staged_bytes = staged.numel() * staged.element_size()
            elif stage:
                staged = self._pinned_stage.gather(features, blocks.input_nodes.to(features.device), self.device)
                staged_bytes = staged.numel() * staged.element_size()  # read on the side stream: see _to_device
            self.memory_model.fixed_bytes = self._base_fixed_bytes + staged_bytes
        # What the model counts as fixed but is not allocated yet (an optimizer's state before its first
        # step): credited to each measurement of this step, or the first step's micro-batches would
        # calibrate the per-count scale down by it and the next step, with the state, would overrun.
        # The fixed part also counts one micro-batch's gradients, transient, so not live here.
        live = getattr(self.memory, "live_bytes", None)
        unallocated = max(0, self._base_fixed_bytes - self._param_bytes - int(live())) if live is not None else 0
        if planned is not None:
            plan = planned.plan
        else:
            with self.probe.phase("plan"):
                plan = self.plan(blocks, num_microbatches=self.options.num_microbatches)
        groups, parts = list(plan.seed_groups), list(plan.microbatches)
        device_parts = self._to_device(parts, num_seeds)
        resident = resident_index_bytes(parts)  # in every estimate, not in what calibrates the model
        estimates, redundancy = list(plan.estimated_bytes), plan.redundancy
        recompute = plan.recompute
        del plan, planned  # the lists own the parts: a re-plan after an out-of-memory can free them
        # Loss and correct counts stay on the device and are read once, after the last micro-batch.
        total_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        num_correct = torch.zeros((), dtype=torch.int64, device=self.device)
        recoveries = 0
        measured_peak: Optional[int] = None
        for acc in self._accumulators:
            acc.zero_()
        k = 0
        future = None
        prepared = None
        while k < len(parts):
            shape = BatchShape.of(parts[k])
            oom_message = None
            try:
                if self.memory is not None:
                    self.memory.reset_peak()
                with self.probe.phase("gather"):
                    if future is None:
                        prepared = self._prepare(parts[k], device_parts[k], groups[k], staged, features,
                                                 labels_of_seeds, counted_staged)
                    else:
                        prepared = future.result()
                    self._use(prepared)
                    self._account(prepared)
                    rows_read += prepared.rows_read
                    rows_missed += prepared.rows_missed
                future = None
                if self.options.pipeline and k + 1 < len(parts):
                    future = self._pool.submit(self._prepare, parts[k + 1], device_parts[k + 1], groups[k + 1],
                                               staged, features, labels_of_seeds, counted_staged)
                with self.probe.phase("forward_backward"):
                    logits = self._forward(prepared, recompute)
                    loss = F.cross_entropy(logits, prepared.y, reduction="sum") / num_seeds
                    grads = torch.autograd.grad(loss, self.params, allow_unused=True)
            except torch.OutOfMemoryError as exc:
                # Handle it after leaving this block: the traceback pins the failed micro-batch's tensors.
                oom_message = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
            if oom_message is not None:
                if future is not None:
                    future.cancel() or future.exception()
                    future = None
                # the cancelled preparation may have queued reads of main-stream memory (the staged rows,
                # the labels, the blocks) on the side stream: free nothing before they have run
                self._main_after_side()
                # a backward that ran out of memory leaves the forward's graph (and its saved
                # activations) reachable from these locals: drop them before re-planning
                prepared = logits = loss = grads = None
                self._free()
                recompute = self._replan_after_oom(blocks, groups, parts, device_parts, estimates, k, shape,
                                                   recompute, recoveries, oom_message)
                resident = resident_index_bytes(parts)
                recoveries += 1
                continue
            with torch.no_grad():
                pairs = [(acc, g) for acc, g in zip(self._accumulators, grads) if g is not None]
                if pairs:  # one fused launch for all parameters
                    torch._foreach_add_([a for a, _ in pairs], [g for _, g in pairs])
                total_loss += loss.detach().to(torch.float64)
                num_correct += (logits.argmax(1) == prepared.y).sum()
            # this micro-batch's inputs go before the next one's peak window opens: held until the next
            # preparation replaced them, they sat in that window (on synth-arxiv a small micro-batch after
            # a large one measured up to 60 KB more than the same shape after a small one)
            del logits, loss, grads
            prepared = None
            if self.memory is not None:  # the window's one reading (host-side allocator statistics)
                peak = int(self.memory.peak_bytes())
                measured_peak = peak if measured_peak is None else max(measured_peak, peak)
                self.memory_model.observe(shape, max(peak - resident + unallocated, 0), recompute=recompute,
                                          prefetched=len(parts) > 1)
            k += 1
        if self.options.num_microbatches is None:
            self._last_k = len(parts)
        loss_value, correct_value = torch.stack([total_loss, num_correct.to(torch.float64)]).tolist()  # the one read
        return StepStats(
            loss=loss_value, num_correct=int(correct_value), num_seeds=num_seeds,
            num_microbatches=len(parts), num_oom_recoveries=recoveries, staged_features=stage,
            estimated_peak_bytes=max(estimates), measured_peak_bytes=measured_peak,
            redundancy=redundancy, recompute=recompute, feature_rows_read=rows_read,
            feature_rows_missed=rows_missed, feature_bytes_moved=rows_missed * features.shape[1] * features.element_size(),
        )

    def _replan_after_oom(self, blocks: Blocks, groups: list, parts: list, device_parts: list, estimates: list,
                          k: int, shape: BatchShape, recompute: bool, recoveries: int, oom_message: str) -> bool:
        """Recovery from an out-of-memory of micro-batch ``k``: recalibrate, then re-plan the seeds not
        yet done (``groups[k:]`` and the other lists, replaced in place) finer than before; a single seed
        that failed without recomputation is re-planned with it (when allowed). Returns whether the new
        plan recomputes. Raises `MicrobatchOutOfMemoryError` when nothing finer is left or allowed."""
        escalate = (groups[k].numel() == 1 and not recompute and self._can_recompute
                    and self.options.recompute != "off")
        capacity = getattr(self.memory, "capacity_bytes", None) or self.options.budget_bytes
        if capacity is not None:  # evidence, also when nothing is left to try: the next plan refuses on it
            self.memory_model.observe_oom(shape, capacity - resident_index_bytes(parts), recompute=recompute)
        if (not self.options.recover_oom or self.options.budget_bytes is None
                or recoveries >= self.options.max_oom_recoveries or (groups[k].numel() == 1 and not escalate)):
            error = SingleSeedMicrobatchOutOfMemoryError if groups[k].numel() == 1 else MicrobatchOutOfMemoryError
            raise error(
                f"micro-batch {k + 1}/{len(parts)} ({groups[k].numel()} seeds, estimated "
                f"{estimates[k]} B{', with recomputation' if recompute else ''}) ran out of device memory: "
                f"{oom_message}"
            )
        remaining = torch.cat(groups[k:])
        failed_k = len(parts) - k  # micro-batches the failed plan had left
        del parts[k:], device_parts[k:]  # free the failed plan's blocks before slicing anew
        self._free()
        with self.probe.phase("plan"):
            if escalate:  # one seed did not fit as it is: the same seeds, recomputing
                replan = self.plan(blocks, positions=remaining, recompute="on")
            else:
                mode = "on" if recompute else None
                replan = self.plan(blocks, positions=remaining, recompute=mode)
                if replan.num_microbatches <= failed_k:  # recalibration must make it finer
                    replan = self.plan(blocks, positions=remaining, recompute=mode,
                                       num_microbatches=min(remaining.numel(), 2 * failed_k))
        groups[k:], parts[k:] = list(replan.seed_groups), list(replan.microbatches)
        device_parts[k:] = self._to_device(parts[k:], blocks.num_seeds)
        estimates[k:] = list(replan.estimated_bytes)
        return replan.recompute

    def _forward(self, prepared: _Prepared, recompute: bool) -> torch.Tensor:
        """The model on one micro-batch; with ``recompute``, each layer under activation checkpointing."""
        if not recompute:
            return self.model(prepared.blocks, prepared.x)
        from torch.utils.checkpoint import checkpoint

        # the input dropout runs outside the checkpoints: its output is the first layer's kept input
        forward_input = getattr(self.model, "forward_input", None)
        h = prepared.x if forward_input is None else forward_input(prepared.blocks, prepared.x)
        for index, block in enumerate(prepared.blocks.layers):
            h = checkpoint(self.model.forward_layer, index, block, h, use_reentrant=False)
        return h

    def _to_device(self, parts: list[Blocks], num_seeds: int) -> list[Blocks]:
        """All micro-batches' index buffers to the device in one pinned copy (on the side stream,
        ahead of the preparations that read them); on the CPU the blocks themselves, counted on an
        emulated device as a GPU holds them: all of them, from now until the step ends (sliced on the
        loader's thread, they escape the tracker; counted one micro-batch at a time, and without their
        input positions, the first micro-batches measured below what the plan priced). Buffers that do
        not fit are a `BudgetTooSmallError` (a finer K holds more of them, not fewer)."""
        try:
            if self._side_stream is None:
                moved = [p.to(self.device) for p in parts]
                register = getattr(self.memory, "register_external", None)
                if register is not None and self.device.type == "cpu":
                    register(index_tensors(moved))
                return moved
            self._side_after_main()
            with torch.cuda.stream(self._side_stream):
                return blocks_to_device(parts, self.device)
        except torch.OutOfMemoryError as exc:
            first = (str(exc).strip().splitlines() or ["out of memory"])[0]
            raise BudgetTooSmallError(
                f"the device memory cannot hold even the planning of a batch of {num_seeds} seeds (the index "
                f"buffers of its {len(parts)} micro-batches, {resident_index_bytes(parts)} B, ran out of memory: "
                f"{first}); give more device memory or a smaller batch") from None

    def _side_after_main(self) -> None:
        """Order the side stream after all work queued so far on the compute stream (no host wait).
        Called, unconditionally, before the side stream first reads a step's (or a re-plan's) inputs:
        the seeds' labels, the staged rows and blocks built on the device are all written there."""
        if self._side_stream is not None:
            self._side_stream.wait_stream(torch.cuda.current_stream(self.device))

    def _main_after_side(self) -> None:
        """Order the compute stream after all work queued so far on the side stream (no host wait), so
        memory the side stream still reads is not reused by the compute stream."""
        if self._side_stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._side_stream)

    def _account(self, prepared: _Prepared) -> None:
        """Count a micro-batch's input rows and labels: made on the preparation thread, they escape a
        thread-local tracker (its index buffers were counted with the step's, by `_to_device`)."""
        register = getattr(self.memory, "register_external", None)
        if register is not None and self.device.type == "cpu":
            register([prepared.x, prepared.y])

    def _free(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
