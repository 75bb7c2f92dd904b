"""`Trainer`: epochs of micro-batched training with layer-wise evaluation — the public API.

    trainer = Trainer(dataset, ModelSpec("sage", dataset.feature_dim, 256, dataset.num_classes, 2,
                      aggr="lstm"), TrainConfig(fanouts=(10, 25), batch_size=4096, budget_bytes=2**30))
    for epoch in trainer.fit():
        print(epoch.loss, epoch.valid_acc, epoch.max_microbatches)

Determinism: the model's initial weights come from ``torch.manual_seed(config.seed)``; batches and
neighbour samples from generators seeded by ``config.seed``. Sampling of mini-batch ``i + 1`` runs on
a background thread while step ``i`` computes; it is still sequential, so same seed, same batches.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch

from cherry.data import Dataset
from cherry.execution.executor import ExecutorOptions, MicrobatchExecutor, PlannedBatch, StepStats
from cherry.execution.inference import evaluate
from cherry.execution.probe import DeviceMemoryLike, NullProbe, Probe
from cherry.models import ModelSpec, build_model, count_parameters
from cherry.planning import ORDERINGS, MemoryModel, locality_rank
from cherry.sampling import NeighborSampler

# parameters, micro-batch gradients, accumulators and Adam's two moments
_PARAM_COPIES = 5


@dataclass(frozen=True)
class TrainConfig:
    """How to train. ``num_microbatches=None`` picks K per step from ``budget_bytes``; with no budget
    either, K is 1 (plain mini-batch training)."""

    fanouts: tuple[int, ...]
    batch_size: int
    epochs: int = 1
    lr: float = 3e-3
    num_microbatches: Optional[int] = None
    budget_bytes: Optional[int] = None
    ordering: str = "metis"
    stage_features: bool = True
    pipeline: bool = True
    balance: str = "memory"
    safety: float = 0.1
    seed: int = 0
    max_steps_per_epoch: Optional[int] = None
    evaluate: bool = True

    def __post_init__(self) -> None:
        if not self.fanouts or any(not isinstance(f, int) or (f < 1 and f != -1) for f in self.fanouts):
            raise ValueError(f"fanouts must be positive ints or -1, got {self.fanouts!r}")
        for name in ("batch_size", "epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.num_microbatches is not None and self.num_microbatches < 1:
            raise ValueError(f"num_microbatches must be >= 1 or None (auto), got {self.num_microbatches}")
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {self.budget_bytes}")
        if self.ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, got {self.ordering!r}")
        if self.max_steps_per_epoch is not None and self.max_steps_per_epoch < 1:
            raise ValueError(f"max_steps_per_epoch must be >= 1, got {self.max_steps_per_epoch}")


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
    """Trains ``spec`` on ``dataset`` under ``config`` (see module docstring)."""

    def __init__(self, dataset: Dataset, spec: ModelSpec, config: TrainConfig, device: str = "cpu",
                 memory: Optional[DeviceMemoryLike] = None, probe: Optional[Probe] = None,
                 seed_rank: Optional[torch.Tensor] = None) -> None:
        if spec.uses_graph and len(config.fanouts) != spec.num_layers:
            raise ValueError(f"{len(config.fanouts)} fanouts given for a {spec.num_layers}-layer model; "
                             "give one fanout per layer")
        if spec.in_dim != dataset.feature_dim or spec.num_classes != dataset.num_classes:
            raise ValueError(f"model expects in_dim={spec.in_dim}, num_classes={spec.num_classes}; dataset "
                             f"{dataset.name} has {dataset.feature_dim} features and {dataset.num_classes} classes")
        self.dataset, self.spec, self.config = dataset, spec, config
        self.device = torch.device(device)
        self.probe = probe or NullProbe()
        torch.manual_seed(config.seed)
        self.model = build_model(spec).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        from cherry.ops import extension_available

        self.memory_model = MemoryModel.for_model(spec, fixed_bytes=_PARAM_COPIES * param_bytes,
                                                  fused_aggregation=extension_available(),
                                                  prefetch_inputs=config.pipeline)
        if seed_rank is None and config.ordering != "none" and config.num_microbatches != 1:
            seed_rank = locality_rank(dataset.graph, config.ordering, seed=config.seed)
        fixed_k = config.num_microbatches
        if fixed_k is None and config.budget_bytes is None:
            fixed_k = 1
        options = ExecutorOptions(
            num_microbatches=fixed_k, budget_bytes=config.budget_bytes,
            stage_features=config.stage_features, pipeline=config.pipeline, balance=config.balance,
            safety=config.safety, recover_oom=config.num_microbatches is None,
        )
        self.executor = MicrobatchExecutor(self.model, self.optimizer, self.memory_model, options, self.device,
                                           seed_rank=seed_rank, memory=memory, probe=self.probe)
        self.sampler = NeighborSampler(dataset.graph, list(config.fanouts))
        self._sample_gen = torch.Generator().manual_seed(config.seed)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cherry-sample")

    @property
    def num_parameters(self) -> int:
        return count_parameters(self.model)

    def _batches(self, epoch: int) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.config.seed * 1_000_003 + epoch)
        train = self.dataset.train_idx
        order = train[torch.randperm(train.numel(), generator=gen)]
        batches = list(torch.split(order, self.config.batch_size))
        if self.config.max_steps_per_epoch is not None:
            batches = batches[: self.config.max_steps_per_epoch]
        return batches

    def _sample_and_plan(self, seeds: torch.Tensor) -> PlannedBatch:
        return self.executor.plan_batch(self.sampler.sample(seeds, self._sample_gen), self.dataset.features)

    def _sampled(self, batches: list[torch.Tensor]) -> Iterator[PlannedBatch]:
        """Each batch sampled and planned in the background while the caller steps the previous one.

        The wait for it is timed as ``sample`` (sampling and planning ahead: what the step waits for).
        """
        future = self._pool.submit(self._sample_and_plan, batches[0]) if batches else None
        for i in range(len(batches)):
            with self.probe.phase("sample"):
                planned = future.result()
            future = self._pool.submit(self._sample_and_plan, batches[i + 1]) if i + 1 < len(batches) else None
            yield planned

    def train_epoch(self, epoch: int, on_step: Optional[Callable[[StepStats], None]] = None) -> list[StepStats]:
        """One pass over the (shuffled) training seeds; returns every step's stats."""
        self.model.train()
        steps = []
        for blocks in self._sampled(self._batches(epoch)):
            stats = self.executor.step(blocks, self.dataset.features, self.dataset.labels)
            steps.append(stats)
            if on_step is not None:
                on_step(stats)
        return steps

    def evaluate(self) -> dict[str, float]:
        """Accuracy on train/valid/test by layer-wise full-neighbour inference under the same budget."""
        return evaluate(self.model, self.dataset, self.memory_model, self.config.budget_bytes, self.device)

    def num_steps(self, epoch: int) -> int:
        return len(self._batches(epoch))

    def run_epoch(self, epoch: int, on_step: Optional[Callable[[StepStats], None]] = None) -> EpochResult:
        """Train epoch ``epoch`` (its own shuffle), then evaluate (unless ``config.evaluate`` is off)."""
        steps = self.train_epoch(epoch, on_step)
        acc = self.evaluate() if self.config.evaluate else {"valid": float("nan"), "test": float("nan")}
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
        """Train ``config.epochs`` epochs, yielding each epoch's result as it completes."""
        for epoch in range(self.config.epochs):
            yield self.run_epoch(epoch, on_step)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.executor.close()
