"""`Trainer`: epochs of micro-batched training with layer-wise evaluation — the public API.

    from cherry.data import load_dataset
    from cherry.spec import make_spec
    dataset = load_dataset("synth-arxiv")
    trainer = Trainer(dataset, make_spec(dataset="synth-arxiv", aggr="lstm", batch_size=4096,
                                         budget_bytes="1GiB", epochs=3))
    for epoch in trainer.fit():
        print(epoch.loss, epoch.valid_acc, epoch.max_microbatches)

Everything comes from the `cherry.spec.RunSpec`: the model (`RunSpec.model_spec`), the budget
(`cherry.spec.resolve_budget_bytes`), the executor's options (`ExecutorOptions.from_spec`), the
batches and sampling streams (`cherry.sampling.loader`: the same rule as every other run).
Determinism: initial weights come from ``torch.manual_seed(spec.seed)``; batches and neighbour
samples from generators derived from ``spec.seed``. The loader samples and plans batch ``i + 1`` on a
background thread while step ``i`` computes, in order, so same seed, same batches, same losses.

Construction placement (`cherry.sampling.placement`) is chosen once and kept in
``Trainer.construction``. On CUDA, the graph with its features and labels lives on the device when
it fits in the device's free memory with half of it to spare (under a ``--device-memory`` cap: what
the cap leaves). Then sampling and slicing run the CUDA kernels and feature rows are gathered there
(their bytes count as fixed in the memory model). Otherwise the graph is pinned on the host and each
step's micro-batches go over in one pinned copy. On a CPU nothing moves (``host``). Evaluation always reads the host
dataset. Data-parallel ranks keep the host graph (their step reads the host dataset).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch

from cherry import progress
from cherry.data import Dataset
from cherry.execution.executor import ExecutorOptions, MicrobatchExecutor, PlannedBatch, StepStats
from cherry.execution.inference import evaluate
from cherry.models import build_model, count_parameters, reads_degree_layouts
from cherry.planning import MemoryModel, seed_rank
from cherry.probe import DeviceMemoryLike, NullProbe, Probe
from cherry.sampling import BatchLoader, NeighborSampler, sampling_generator, spec_seed_batches
from cherry.sampling.placement import (DEVICE, HOST, ConstructionChoice, choose_construction, place_dataset,
                                       resident_bytes)
from cherry.spec import RunSpec, resolve_budget_bytes

# parameters, micro-batch gradients and accumulators; the optimizer's state comes on top
_PARAM_COPIES = 3


@dataclass(frozen=True)
class EpochResult:
    """One epoch of `Trainer.fit`: what `cherry train` prints and `--json` writes per epoch.

    ``loss`` and ``train_acc`` are over the epoch's training seeds (seed-weighted); ``valid_acc`` and
    ``test_acc`` come from the evaluation after it (NaN with evaluation off). ``mean_microbatches`` and
    ``max_microbatches`` are the K used per step; ``k_changes`` counts steps whose K differs from the step before.
    ``estimated_peak_bytes`` is the memory model's largest micro-batch estimate, ``measured_peak_bytes``
    the device memory's measured peak (None without a `DeviceMemory` or a GPU to measure).
    ``oom_recoveries`` counts steps re-planned finer after an out-of-memory, ``recompute_steps`` steps
    run with per-layer recomputation, ``streamed_steps`` steps whose input layer streamed its rows.
    ``feature_bytes_moved`` is the input features copied host-to-device, ``feature_hit_rate`` the share
    of rows read that the device held (NaN when none).
    """

    epoch: int
    loss: float
    train_acc: float
    valid_acc: float
    test_acc: float
    num_steps: int
    mean_microbatches: float
    max_microbatches: int
    oom_recoveries: int
    estimated_peak_bytes: int
    measured_peak_bytes: Optional[int]
    k_changes: int = 0  # steps whose K differs from the step before (a steady K changes rarely)
    recompute_steps: int = 0  # steps run with per-layer activation recomputation
    streamed_steps: int = 0  # steps whose input layer streamed its rows (`cherry.execution.stream`)
    # input-feature traffic (`StepStats`): bytes moved host-to-device in the epoch, and the share of the
    # rows read that the device held (NaN when nothing was read)
    feature_bytes_moved: int = 0
    feature_hit_rate: float = float("nan")


class Trainer:
    """Trains run spec ``spec`` on ``dataset`` (see module docstring).

    ``memory`` is the (emulated or real) device memory the executor reads peaks from and recovers
    from out-of-memory in; ``probe`` receives phase boundaries (`cherry.probe`). ``construction``:
    ``"auto"`` (chosen, see module docstring), or ``"host"``/``"device"`` to force one.

    ``model``: a module to train instead of the spec's (``model(blocks, x) -> logits``, the layer
    contract of `docs/library.md`; a DGL or PyG model through `cherry.interop`). It is checked for
    modules that break exactness first (`cherry.execution.exactness.guard_model`: ``nn.Dropout`` is
    replaced by its exact equivalent, BatchNorm in training mode refused). The memory model prices it
    like the spec's model of the same widths until the run calibrates it.
    """

    def __init__(self, dataset: Dataset, spec: RunSpec, memory: Optional[DeviceMemoryLike] = None,
                 probe: Optional[Probe] = None, construction: str = "auto",
                 model: Optional[torch.nn.Module] = None) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be a cherry.data.Dataset, got {type(dataset).__name__}")
        if not isinstance(spec, RunSpec):
            raise TypeError(f"spec must be a cherry.spec.RunSpec, got {type(spec).__name__}")
        if spec.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda was asked for, but no CUDA device is available")
        if construction not in ("auto", HOST, DEVICE):
            raise ValueError(f"construction must be 'auto', 'host' or 'device', got {construction!r}")
        self.dataset, self.spec = dataset, spec
        self.model_spec = spec.model_spec(dataset)
        self.device = torch.device(spec.device)
        self.construction = _choose(dataset, self.device, memory, construction)
        self.data = place_dataset(dataset, self.construction)  # what training reads
        if self.data.graph.indptr.is_cuda:  # once, at construction: the copies are done before any stream reads them
            torch.cuda.synchronize(self.device)
        on_device = sum(resident_bytes(dataset)) if self.construction.where == DEVICE else 0
        self.probe = probe or NullProbe()
        self.budget_bytes = resolve_budget_bytes(spec)
        torch.manual_seed(spec.seed)
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module called as model(blocks, x), got {type(model).__name__}")
        from cherry.execution.exactness import guard_model
        from cherry.execution.optim import optimizer_for_spec, state_copies

        self.model = guard_model(model if model is not None else build_model(self.model_spec)).to(self.device)
        self.optimizer = optimizer_for_spec(self.model.parameters(), spec)
        param_state_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters()) \
            * (_PARAM_COPIES + state_copies(spec.optimizer, spec.momentum))
        from cherry.ops import extension_available

        options = ExecutorOptions.from_spec(spec, self.budget_bytes)
        self.memory_model = MemoryModel.for_model(self.model_spec, fixed_bytes=param_state_bytes + on_device,
                                                  fused_aggregation=extension_available(),
                                                  # a CPU's prefetched rows are made on another thread,
                                                  # where the emulated device does not count them
                                                  prefetch_inputs=options.pipeline and self.device.type != "cpu",
                                                  device_type=self.device.type)
        if options.budget_bytes is not None:  # a model the analytic costs cannot price: measure it
            from cherry.execution.memory_probe import optional_probe

            limit = options.budget_bytes * (1 - options.safety)
            self.memory_model = optional_probe(self.model, dataset, spec, self.memory_model,
                                               self.device, limit) or self.memory_model
            if options.stream_inputs != "off":  # and the streamed input layer's, measured
                from cherry.execution.stream import can_stream, chunk_rows, stream_width
                from cherry.execution.stream_probe import with_probed_stream

                rows = chunk_rows(stream_width(self.model), options.budget_bytes) if can_stream(self.model) else 0
                self.memory_model = with_probed_stream(self.memory_model, self.model, dataset, spec, self.device,
                                                       rows, limit)
            if options.recompute != "off":  # and recomputation's price, measured
                from cherry.execution.recompute_probe import with_probed_recompute

                self.memory_model = with_probed_recompute(self.memory_model, self.model, dataset, spec, self.device)
        rank = seed_rank(dataset, spec.ordering, spec.seed) if options.num_microbatches != 1 else None
        if rank is not None:
            rank = rank.to(self.data.graph.indptr.device)  # indexed by the sampled seeds' ids
        self.executor = MicrobatchExecutor(self.model, self.optimizer, self.memory_model, options, self.device,
                                           seed_rank=rank, memory=memory, probe=self.probe)
        # layouts only for a model that reads them (an LSTM): on a device each costs host read-backs
        self.sampler = NeighborSampler(self.data.graph, spec.fanouts, layouts=reads_degree_layouts(self.model))
        # Device construction runs on its own stream: the loader's read-backs (sizes, layouts) then
        # wait for its own kernels only, not for the step's compute queued on the default stream.
        self._loader_stream = torch.cuda.Stream(self.device) if self.data.graph.indptr.is_cuda else None
        self.generator = sampling_generator(spec.seed)
        # feature residency: all rows, the hottest rows or none on the device, priced in the same budget
        from cherry.execution.residency import place_features

        self.residency, cache = place_features(self, memory)
        self.executor.set_feature_cache(cache)

    @property
    def num_parameters(self) -> int:
        return count_parameters(self.model)

    def prepare(self, seeds: torch.Tensor, generator: torch.Generator) -> PlannedBatch:
        """Sample and plan one mini-batch (what the loader runs ahead, on its thread)."""
        if self._loader_stream is None:
            return self.executor.plan_batch(self.sampler.sample(seeds, generator), self.data.features)
        with torch.cuda.stream(self._loader_stream):
            blocks = self.sampler.sample(seeds.to(self.data.graph.indptr.device), generator)
            planned = self.executor.plan_batch(blocks, self.data.features)
        # Finished before the step's streams read it (a wait on the loader's thread, off the critical path).
        self._loader_stream.synchronize()
        return planned

    def loader(self, seed_batches) -> BatchLoader:
        """A loader over ``seed_batches`` that samples and plans each one ahead of its step."""
        return BatchLoader(seed_batches, self.generator, self.prepare)

    def step(self, planned: PlannedBatch) -> StepStats:
        """One optimizer step on a batch the loader prepared."""
        self.model.train()
        if self._loader_stream is not None:
            _used_on_current_stream(planned)
        return self.executor.step(planned, self.data.features, self.data.labels)

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        return spec_seed_batches(self.spec, self.dataset.train_idx, epoch)

    def num_steps(self, epoch: int) -> int:
        return len(self.epoch_batches(epoch))

    def train_epoch(self, epoch: int, on_step: Optional[Callable[[StepStats], None]] = None) -> list[StepStats]:
        """One pass over the (shuffled) training seeds; returns every step's stats."""
        steps = []
        seed_batches = self.epoch_batches(epoch)
        with self.loader(seed_batches) as loader, progress.task(f"epoch {epoch}", len(seed_batches), "step") as shown:
            batches = iter(loader)
            while True:
                with self.probe.phase("sample"):  # the wait for sampling and planning ahead
                    batch = next(batches, None)
                if batch is None:
                    break
                stats = self.step(batch.prepared)
                steps.append(stats)
                shown.advance(1, loss=f"{stats.loss:.4f}", K=stats.num_microbatches)
                if on_step is not None:
                    on_step(stats)
        return steps

    def evaluate(self) -> dict[str, float]:
        """Accuracy on train/valid/test by layer-wise full-neighbour inference under the same budget."""
        try:
            if not (hasattr(self.model, "forward_layer") and hasattr(self.model, "spec")):
                from cherry.execution.block_inference import evaluate_blocks  # a whole-model module

                return evaluate_blocks(self.model, self.dataset, self.spec.num_layers, self.device,
                                       memory_model=self.memory_model, budget_bytes=self.budget_bytes)
            return evaluate(self.model, self.dataset, self.memory_model, self.budget_bytes, self.device)
        finally:
            self.model.train()

    def run_epoch(self, epoch: int, on_step: Optional[Callable[[StepStats], None]] = None) -> EpochResult:
        """Train epoch ``epoch`` (its own shuffle), then evaluate (unless ``spec.evaluate`` is off)."""
        steps = self.train_epoch(epoch, on_step)
        acc = self.evaluate() if self.spec.evaluate else {"valid": float("nan"), "test": float("nan")}
        seeds = sum(s.num_seeds for s in steps)
        measured = [s.measured_peak_bytes for s in steps if s.measured_peak_bytes is not None]
        return EpochResult(
            epoch=epoch,
            loss=sum(s.loss * s.num_seeds for s in steps) / max(seeds, 1),
            train_acc=sum(s.num_correct for s in steps) / max(seeds, 1),
            valid_acc=acc["valid"], test_acc=acc["test"], num_steps=len(steps),
            mean_microbatches=sum(s.num_microbatches for s in steps) / max(len(steps), 1),
            max_microbatches=max((s.num_microbatches for s in steps), default=0),
            oom_recoveries=sum(s.num_oom_recoveries for s in steps),
            estimated_peak_bytes=max((s.estimated_peak_bytes for s in steps), default=0),
            measured_peak_bytes=max(measured) if measured else None,
            k_changes=sum(a.num_microbatches != b.num_microbatches for a, b in zip(steps, steps[1:])),
            recompute_steps=sum(bool(s.recompute) for s in steps),
            streamed_steps=sum(bool(s.streamed) for s in steps),
            feature_bytes_moved=sum(s.feature_bytes_moved for s in steps),
            feature_hit_rate=_hit_rate(steps),
        )

    def fit(self, on_step: Optional[Callable[[StepStats], None]] = None, save_dir=None,
            resume_dir=None, overwrite: bool = False,
            on_epoch_start: Optional[Callable[[int], None]] = None) -> Iterator[EpochResult]:
        """Train ``spec.epochs`` epochs, yielding each epoch's result as it completes.

        ``save_dir``: write a checkpoint there after each epoch and keep the best-validation model
        (`cherry.execution.checkpoint`: the directory is locked while the run writes it; a checkpoint
        of another spec there is refused unless ``overwrite``); ``resume_dir``: continue the run
        checkpointed there (the same losses as without the interruption; its finished epochs are
        `resumed_history`). Both may name the same directory. ``on_epoch_start(epoch)`` is called
        before each epoch trains, ``on_step(stats)`` after each step.
        """
        from pathlib import Path

        from cherry.execution.checkpoint import Checkpointer

        start = self.resume(resume_dir) if resume_dir is not None else 0
        same = resume_dir is not None and save_dir is not None and \
            Path(resume_dir).expanduser().resolve() == Path(save_dir).expanduser().resolve()
        saver = Checkpointer(save_dir, self.spec, overwrite=overwrite, resumed=same) if save_dir is not None else None
        try:
            if saver is not None and self._resumed is not None:
                saver.adopt(self._resumed)
            for epoch in range(start, self.spec.epochs):
                if on_epoch_start is not None:
                    on_epoch_start(epoch)
                result = self.run_epoch(epoch, on_step)
                if saver is not None:
                    saver.save(self, result)
                yield result
        finally:
            if saver is not None:
                saver.close()

    _resumed: Optional[dict] = None

    @property
    def resumed_history(self) -> list[dict]:
        """The finished epochs (`EpochResult` as dicts) of the checkpoint `resume` restored; empty if none."""
        return [dict(e) for e in self._resumed["history"]] if self._resumed is not None else []

    def resume(self, resume_dir) -> int:
        """Restore the checkpoint in ``resume_dir`` (`cherry.execution.checkpoint`); return the first
        epoch still to run. The restored checkpoint's finished epochs are `resumed_history`."""
        from cherry.execution.checkpoint import load_trainer_state, read_checkpoint

        checkpoint = read_checkpoint(resume_dir, self.spec)
        load_trainer_state(self, checkpoint["state"])
        self._resumed = checkpoint
        return int(checkpoint["epochs_done"])

    def close(self) -> None:
        self.executor.close()


def _choose(dataset: Dataset, device: torch.device, memory: Optional[DeviceMemoryLike],
            construction: str) -> ConstructionChoice:
    """The construction placement of a Trainer (see module docstring)."""
    graph_bytes, extra_bytes = resident_bytes(dataset)
    if device.type != "cuda":
        return choose_construction(dataset.graph, device, extra_bytes=extra_bytes)
    forced = {HOST: "asked for host construction", DEVICE: "asked for device construction"}.get(construction)
    if forced is None and torch.distributed.is_available() and torch.distributed.is_initialized():
        construction, forced = HOST, "data-parallel ranks keep the host graph (their step reads the host dataset)"
    if forced is not None:
        return ConstructionChoice(construction, str(device), graph_bytes, None, 0.0, forced, extra_bytes)
    free = int(torch.cuda.mem_get_info(device)[0])
    cap = getattr(memory, "capacity_bytes", None)
    if cap is not None:  # an allocator cap: what it leaves, not what the device has
        free = max(0, min(free, int(cap) - int(torch.cuda.memory_allocated(device))))
    return choose_construction(dataset.graph, device, free_bytes=free, extra_bytes=extra_bytes)


def _hit_rate(steps: list[StepStats]) -> float:
    read = sum(s.feature_rows_read for s in steps)
    return 1 - sum(s.feature_rows_missed for s in steps) / read if read else float("nan")


def _used_on_current_stream(planned: PlannedBatch) -> None:
    """Tell the allocator that the loader stream's tensors of ``planned`` are used on the current
    stream, so their memory is not handed out again before the step's kernels that read them ran."""
    from cherry.execution.transfer import _block_tensors

    stream = torch.cuda.current_stream()
    tensors = list(planned.plan.seed_groups)
    for blocks in (planned.blocks, *planned.plan.microbatches):
        tensors += [t for blk in blocks.layers for t in _block_tensors(blk)]
        if blocks.input_positions is not None:
            tensors.append(blocks.input_positions)
    for t in tensors:
        if t.is_cuda:
            t.record_stream(stream)
