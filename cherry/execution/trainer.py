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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch

from cherry.data import Dataset
from cherry.execution.executor import ExecutorOptions, MicrobatchExecutor, PlannedBatch, StepStats
from cherry.execution.inference import evaluate
from cherry.models import build_model, count_parameters
from cherry.planning import MemoryModel, seed_rank
from cherry.probe import DeviceMemoryLike, NullProbe, Probe
from cherry.sampling import BatchLoader, NeighborSampler, sampling_generator, spec_seed_batches
from cherry.spec import RunSpec, resolve_budget_bytes

# parameters, micro-batch gradients, accumulators and Adam's two moments
_PARAM_COPIES = 5


@dataclass(frozen=True)
class EpochResult:
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


class Trainer:
    """Trains run spec ``spec`` on ``dataset`` (see module docstring).

    ``memory`` is the (emulated or real) device memory the executor reads peaks from and recovers
    from out-of-memory in; ``probe`` receives phase boundaries (`cherry.probe`).
    """

    def __init__(self, dataset: Dataset, spec: RunSpec, memory: Optional[DeviceMemoryLike] = None,
                 probe: Optional[Probe] = None) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be a cherry.data.Dataset, got {type(dataset).__name__}")
        if not isinstance(spec, RunSpec):
            raise TypeError(f"spec must be a cherry.spec.RunSpec, got {type(spec).__name__}")
        if spec.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda was asked for, but no CUDA device is available")
        self.dataset, self.spec = dataset, spec
        self.model_spec = spec.model_spec(dataset)
        self.device = torch.device(spec.device)
        self.probe = probe or NullProbe()
        self.budget_bytes = resolve_budget_bytes(spec)
        torch.manual_seed(spec.seed)
        self.model = build_model(self.model_spec).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=spec.lr)
        param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        from cherry.ops import extension_available

        options = ExecutorOptions.from_spec(spec, self.budget_bytes)
        self.memory_model = MemoryModel.for_model(self.model_spec, fixed_bytes=_PARAM_COPIES * param_bytes,
                                                  fused_aggregation=extension_available(),
                                                  prefetch_inputs=options.pipeline, device_type=self.device.type)
        rank = seed_rank(dataset, spec.ordering, spec.seed) if options.num_microbatches != 1 else None
        self.executor = MicrobatchExecutor(self.model, self.optimizer, self.memory_model, options, self.device,
                                           seed_rank=rank, memory=memory, probe=self.probe)
        self.sampler = NeighborSampler(dataset.graph, spec.fanouts)
        self.generator = sampling_generator(spec.seed)

    @property
    def num_parameters(self) -> int:
        return count_parameters(self.model)

    def prepare(self, seeds: torch.Tensor, generator: torch.Generator) -> PlannedBatch:
        """Sample and plan one mini-batch (what the loader runs ahead, on its thread)."""
        return self.executor.plan_batch(self.sampler.sample(seeds, generator), self.dataset.features)

    def loader(self, seed_batches) -> BatchLoader:
        """A loader over ``seed_batches`` that samples and plans each one ahead of its step."""
        return BatchLoader(seed_batches, self.generator, self.prepare)

    def step(self, planned: PlannedBatch) -> StepStats:
        """One optimizer step on a batch the loader prepared."""
        self.model.train()
        return self.executor.step(planned, self.dataset.features, self.dataset.labels)

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        return spec_seed_batches(self.spec, self.dataset.train_idx, epoch)

    def num_steps(self, epoch: int) -> int:
        return len(self.epoch_batches(epoch))

    def train_epoch(self, epoch: int, on_step: Optional[Callable[[StepStats], None]] = None) -> list[StepStats]:
        """One pass over the (shuffled) training seeds; returns every step's stats."""
        steps = []
        with self.loader(self.epoch_batches(epoch)) as loader:
            batches = iter(loader)
            while True:
                with self.probe.phase("sample"):  # the wait for sampling and planning ahead
                    batch = next(batches, None)
                if batch is None:
                    break
                stats = self.step(batch.prepared)
                steps.append(stats)
                if on_step is not None:
                    on_step(stats)
        return steps

    def evaluate(self) -> dict[str, float]:
        """Accuracy on train/valid/test by layer-wise full-neighbour inference under the same budget."""
        try:
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
        )

    def fit(self, on_step: Optional[Callable[[StepStats], None]] = None) -> Iterator[EpochResult]:
        """Train ``spec.epochs`` epochs, yielding each epoch's result as it completes."""
        for epoch in range(self.spec.epochs):
            yield self.run_epoch(epoch, on_step)

    def close(self) -> None:
        self.executor.close()
