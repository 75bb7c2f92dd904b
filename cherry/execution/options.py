"""What a step is told and what it reports: `ExecutorOptions` (how a step runs, from a run spec),
`PlannedBatch` (a sampled batch with its plan, made ahead of its step) and `StepStats` (what one
optimizer step did). Frozen dataclasses between the loader, the executor and the trainer."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from cherry.planning import MicrobatchPlan
from cherry.sampling import Blocks


def check_every(value: str) -> Optional[int]:
    """The period of ``options.exactness_check``: None for "off", 0 for "first-step", N for "every:N"."""
    if value == "off":
        return None
    if value == "first-step":
        return 0
    head, _, count = str(value).partition(":")
    if head == "every" and count.isdigit() and int(count) >= 1:
        return int(count)
    raise ValueError(f"exactness_check must be 'first-step', 'every:N' (N >= 1) or 'off', got {value!r}")


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
    # the streamed input layer (cherry.execution.stream): "auto" (the cheaper plan that fits), "on", "off"
    stream_inputs: str = "auto"
    # partition invariance of the gradient, checked by the engine (cherry.execution.partition_check):
    # "first-step", "every:N" (steps 1, N + 1, 2N + 1, ...) or "off"
    exactness_check: str = "off"

    def __post_init__(self) -> None:
        if self.num_microbatches is None and self.budget_bytes is None:
            raise ValueError("set num_microbatches (a fixed K) or budget_bytes (automatic K)")
        if self.num_microbatches is not None and self.num_microbatches < 1:
            raise ValueError(f"num_microbatches must be >= 1, got {self.num_microbatches}")
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {self.budget_bytes}")
        if self.recompute not in ("auto", "on", "off"):
            raise ValueError(f"recompute must be 'auto', 'on' or 'off', got {self.recompute!r}")
        if self.stream_inputs not in ("auto", "on", "off"):
            raise ValueError(f"stream_inputs must be 'auto', 'on' or 'off', got {self.stream_inputs!r}")
        check_every(self.exactness_check)  # raises on a malformed value

    def checks_step(self, step: int) -> bool:
        """Whether step ``step`` (1 for the first of this executor) runs the partition check."""
        every = check_every(self.exactness_check)
        if every is None:
            return False
        return step == 1 if every == 0 else (step - 1) % every == 0

    @staticmethod
    def for_k(num_microbatches: Optional[int], budget_bytes: Optional[int] = None, **changes) -> "ExecutorOptions":
        """Options for K = ``num_microbatches`` (None: from ``budget_bytes``) with cherry's default
        settings, read from the run schema (``$defs/cherry_options``, as every spec's), and ``changes``."""
        from cherry.schemas import load_schema

        o = {key: prop["default"] for key, prop in load_schema("run")["$defs"]["cherry_options"]["properties"].items()}
        base = ExecutorOptions(num_microbatches=num_microbatches, budget_bytes=budget_bytes,
                               stage_features=o["stage_features"], pipeline=o["pipeline"], balance=o["balance"],
                               safety=o["safety"], recover_oom=num_microbatches is None,
                               recompute=o.get("recompute", "auto"), stream_inputs=o.get("stream_inputs", "auto"),
                               exactness_check=o.get("exactness_check", "first-step"))
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
            recompute=o.get("recompute", "auto"), stream_inputs=o.get("stream_inputs", "auto"),
            exactness_check=o.get("exactness_check", "first-step"),
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
    streamed: bool = False  # micro-batches streamed their input layer (cherry.execution.stream)
    # input-feature traffic, counted as a GPU run moves it (`_rows_moved`): rows read by the step's
    # gathers, those of them not on the device (misses), and the misses' bytes moved host-to-device
    feature_rows_read: int = 0
    feature_rows_missed: int = 0
    feature_bytes_moved: int = 0
    # the partition-invariance check run on this step, if any (cherry.execution.partition_check)
    partition_check: Optional[object] = None


@dataclass(frozen=True)
class PlannedBatch:
    """A sampled mini-batch with its micro-batch plan, made ahead of its step on another thread.

    The plan used a snapshot of the memory model taken when it was made (one step stale at most);
    an under-estimate is caught by out-of-memory recovery like any other.
    """

    blocks: Blocks
    plan: MicrobatchPlan
    stage: bool
