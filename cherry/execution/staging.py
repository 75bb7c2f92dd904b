"""`Staging`: a step's inputs on the device — index buffers, input-feature rows and labels.

It owns what moves data for the executor: the side stream (preparation of micro-batch k + 1 while k
computes), the pinned host buffers, the device feature cache, and the traffic counts.

Stream order, without a host wait anywhere:
- the side stream waits (an event) for the compute stream before it first reads a step's inputs
  (labels, staged rows and device-built blocks are written there);
- side-stream tensors are handed to the compute stream with an event wait and ``record_stream``;
- after an out-of-memory the compute stream waits for the side stream before anything is freed.

Index buffers of every micro-batch go to the device in one pinned copy per step.

Traffic counts follow the GPU's staging rule on every device, from host index tensors only, so a
CPU run counts the bytes a GPU run of the same budget moves.
"""
from __future__ import annotations

import gc
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Optional

import torch

from cherry.execution.feature_cache import FeatureCache, moved_rows
from cherry.execution.stream import RowSource
from cherry.execution.transfer import PinnedRows, blocks_to_device, copied_blocks, index_tensors
from cherry.planning import BudgetTooSmallError
from cherry.planning.plan import resident_index_bytes
from cherry.planning.residency import ALL
from cherry.probe import DeviceMemoryLike
from cherry.sampling import Blocks


@dataclass(frozen=True)
class PreparedInputs:
    """One micro-batch's inputs on the device."""

    blocks: Blocks
    x: torch.Tensor
    y: torch.Tensor
    ready: Optional["torch.cuda.Event"] = None  # end of its preparation on the side stream
    rows_read: int = 0  # feature rows this preparation gathered (0 when it read staged rows)
    rows_missed: int = 0  # of them, rows moved host-to-device
    source: Optional[RowSource] = None  # a streamed micro-batch's rows, gathered on demand (x: a placeholder)

    def tensors(self) -> list[torch.Tensor]:
        return [self.x, self.y, *index_tensors([self.blocks])]


@dataclass(frozen=True)
class StagedBatch:
    """A step's staging decision and what it staged: the whole batch's input rows (or None), and the
    traffic the step's gathers are counted with."""

    stage: bool  # the rows were staged on the device once for the step
    rows: Optional[torch.Tensor]
    counted_staged: bool  # counters follow the GPU's staging rule (see `Staging.gpu_would_stage`)
    rows_read: int
    rows_missed: int

    @property
    def nbytes(self) -> int:
        return 0 if self.rows is None else self.rows.numel() * self.rows.element_size()


class Staging:
    """Moves a step's inputs to ``device`` (see module docstring). ``memory``: the (emulated) device
    whose tracker must count what this object makes on other threads."""

    def __init__(self, device: torch.device, stage_features: bool, budget_bytes: Optional[int],
                 memory: Optional[DeviceMemoryLike] = None) -> None:
        self.device = device
        self.stage_features = stage_features
        self.budget_bytes = budget_bytes
        self.memory = memory
        self.side_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        # a streamed input layer's chunk copies (`cherry.execution.chunk_pipeline`)
        self.chunk_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.pinned = PinnedRows(slots=2)  # per-micro-batch rows (prepared one ahead)
        self.pinned_stage = PinnedRows(slots=1)  # the whole batch's rows, once per step
        self.pinned_chunks = PinnedRows(slots=2)  # a streamed input layer's chunks
        self.cache: Optional[FeatureCache] = None  # the device-resident feature rows

    # -- decisions and counts ------------------------------------------------------------------
    def stage_decision(self, blocks: Blocks, features: torch.Tensor, fixed_bytes: int) -> bool:
        """Stage the batch's input rows on the device once, or gather per micro-batch?

        Staging moves each row over the host-device link once instead of once per micro-batch
        that reads it (``redundancy`` times), at the price of holding all rows during the step. On a
        CPU device there is no link (both ways are host copies), so staging would only add a copy.
        """
        return self.device.type != "cpu" and self.gpu_would_stage(blocks, features, fixed_bytes)

    def gpu_would_stage(self, blocks: Blocks, features: torch.Tensor, fixed_bytes: int) -> bool:
        """The GPU's staging rule, on any device: what the traffic counters follow."""
        if not self.stage_features:
            return False
        staged = blocks.layers[0].num_src * features.shape[1] * features.element_size()
        # staging pays when it leaves most of the budget to activations
        return self.budget_bytes is None or fixed_bytes + staged <= self.budget_bytes // 2

    def rows_moved(self, nodes: torch.Tensor, features: torch.Tensor) -> tuple[int, int]:
        """``(rows read, rows moved host-to-device)`` of a gather of ``nodes`` (host ids; read on the
        host only, never a device sync)."""
        on_device = features.device.type != "cpu" or (self.cache is not None and self.cache.plan.mode == ALL)
        if nodes.device.type != "cpu":  # device-built blocks: their features live there too
            return int(nodes.numel()), 0
        return int(nodes.numel()), moved_rows(self.cache, nodes, on_device)

    # -- per step -------------------------------------------------------------------------------
    def stage_batch(self, blocks: Blocks, features: torch.Tensor, stage: bool, fixed_bytes: int) -> StagedBatch:
        """The step's input rows staged on the device once (when ``stage``), and the traffic counted for
        it under the GPU's rule."""
        counted = stage or self.gpu_would_stage(blocks, features, fixed_bytes)
        read, missed = self.rows_moved(blocks.input_nodes, features) if counted else (0, 0)
        rows = None
        if stage and self.cache is not None:
            rows = self.cache.gather(blocks.input_nodes.to(self.device, non_blocking=True))
        elif stage:  # read on the side stream: see `to_device`
            rows = self.pinned_stage.gather(features, blocks.input_nodes.to(features.device), self.device)
        return StagedBatch(stage, rows, counted, read, missed)

    def to_device(self, parts: list[Blocks], num_seeds: int) -> list[Blocks]:
        """All micro-batches' index buffers to the device in one pinned copy (on the side stream,
        ahead of the preparations that read them). On the CPU, the blocks themselves. An emulated
        device counts them as a GPU holds them: all of them, from now until the step ends. Counted one
        micro-batch at a time, the first micro-batches would measure below what the plan priced.
        Buffers that do not fit are a `BudgetTooSmallError` (a finer K holds more of them, not fewer)."""
        try:
            if self.side_stream is None:
                register = getattr(self.memory, "register_external", None)
                if register is not None and self.device.type == "cpu":
                    moved = copied_blocks(parts)  # the step's own copy, as a GPU's is (not the host's)
                    register(index_tensors(moved))
                    return moved
                return [p.to(self.device) for p in parts]
            self.side_after_main()
            with torch.cuda.stream(self.side_stream):
                return blocks_to_device(parts, self.device)
        except torch.OutOfMemoryError as exc:
            first = (str(exc).strip().splitlines() or ["out of memory"])[0]
            raise BudgetTooSmallError(
                f"the device memory cannot hold even the planning of a batch of {num_seeds} seeds (the index "
                f"buffers of its {len(parts)} micro-batches, {resident_index_bytes(parts)} B, ran out of memory: "
                f"{first}); give more device memory or a smaller batch") from None

    def prepare(self, mb: Blocks, on_device: Blocks, group: torch.Tensor, staged: StagedBatch,
                features: torch.Tensor, labels_of_seeds: torch.Tensor, stream_rows: int = 0) -> PreparedInputs:
        """Inputs of one micro-batch on the device (``mb`` on the host, ``on_device`` its copy made by
        `to_device`). On a GPU the gathers and copies are queued on the side stream and an event marks
        their end; nothing here waits for the device. Runs on the preparation thread when pipelining.
        ``stream_rows`` > 0: the input rows are not gathered here but by the streamed input layer, in
        chunks of that many rows, from the same place (`row_source`), twice (forward and backward)."""
        stream = self.side_stream
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            read = missed = 0
            source = None
            if stream_rows > 0:
                source = self.row_source(mb, on_device, staged, features, stream_rows)
                x = source.placeholder(features.dtype)
            elif staged.rows is not None:
                positions = on_device.input_positions
                x = staged.rows if positions is None else staged.rows.index_select(0, positions)
            elif self.cache is not None:
                x = self.cache.gather(on_device.input_nodes)
            else:
                x = self.pinned.gather(features, mb.input_nodes.to(features.device), self.device)
            if staged.rows is None and not staged.counted_staged:
                read, missed = self.rows_moved(mb.input_nodes, features)
                if source is not None:
                    read, missed = 2 * read, 2 * missed
            y = labels_of_seeds.index_select(0, group).to(self.device, non_blocking=stream is not None)
            ready = stream.record_event() if stream is not None else None
        return PreparedInputs(on_device, x, y, ready, read, missed, source)

    def row_source(self, mb: Blocks, on_device: Blocks, staged: StagedBatch, features: torch.Tensor,
                   rows: int) -> RowSource:
        """Where a streamed micro-batch reads its input rows, ``rows`` at a time: the staged rows, the
        feature cache, or the host table through pinned buffers, as `prepare` would gather them whole."""
        if staged.rows is not None:
            positions = on_device.input_positions
            if positions is None:
                gather = lambda a, b: staged.rows[a:b]  # noqa: E731
            else:
                gather = lambda a, b: staged.rows.index_select(0, positions[a:b])  # noqa: E731
        elif self.cache is not None:
            nodes = on_device.input_nodes
            gather = lambda a, b: self.cache.gather(nodes[a:b])  # noqa: E731
        else:
            host = mb.input_nodes.to(features.device)
            gather = lambda a, b: self.pinned_chunks.gather(features, host[a:b], self.device)  # noqa: E731
            if self.chunk_stream is not None and features.device.type == "cpu":
                # host rows on a GPU: each chunk's copy runs on a stream of its own beside the previous
                # chunk's GEMMs, so two chunks are live: each is half the priced one, both fit its place
                return RowSource(gather, on_device.input_nodes, int(features.shape[1]), max(1, rows // 2),
                                 copy_stream=self.chunk_stream)
        return RowSource(gather, on_device.input_nodes, int(features.shape[1]), rows)

    def use(self, prepared: PreparedInputs) -> None:
        """Order the compute stream after ``prepared``'s preparation (no host wait), tell the allocator
        its tensors are used there, and count on an emulated device what the preparation thread made
        (its index buffers were counted with the step's, by `to_device`)."""
        if prepared.ready is not None:
            main = torch.cuda.current_stream(self.device)
            main.wait_event(prepared.ready)
            for t in prepared.tensors():
                t.record_stream(main)
        register = getattr(self.memory, "register_external", None)
        if register is not None and self.device.type == "cpu":
            register([prepared.x, prepared.y])

    # -- stream order ---------------------------------------------------------------------------
    def side_after_main(self) -> None:
        """Order the side stream after all work queued so far on the compute stream (no host wait).
        Called, unconditionally, before the side stream first reads a step's (or a re-plan's) inputs."""
        if self.side_stream is not None:
            self.side_stream.wait_stream(torch.cuda.current_stream(self.device))

    def main_after_side(self) -> None:
        """Order the compute stream after all work queued so far on the side stream (no host wait), so
        memory the side stream still reads is not reused by the compute stream."""
        if self.side_stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.side_stream)
        if self.chunk_stream is not None:  # a streamed layer's copies, cut short by the out-of-memory
            torch.cuda.current_stream(self.device).wait_stream(self.chunk_stream)

    def free(self) -> None:
        """Return freed memory: collect cycles (a failed step's frames) and empty the CUDA cache."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
