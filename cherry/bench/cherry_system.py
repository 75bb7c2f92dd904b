"""The ``cherry`` system of the benchmark: `cherry.execution`'s Trainer pieces behind `System`.

Each step samples the mini-batch's blocks (phase ``sample``) and hands them to the
`MicrobatchExecutor` (phases ``gather``, ``plan``, ``forward_backward``, ``optimizer``). The
ablation switches of ``config.options`` (all optional):

- ``ordering``: ``metis`` (default), ``random`` or ``none`` — the seed ordering for locality;
- ``balance``: ``memory`` (default) or ``count`` — how micro-batches are balanced;
- ``stage_features``, ``pipeline``: bool, default True;
- ``native_ops``: bool, default True; False needs ``CHERRY_NO_EXT=1`` set before the extension
  loads (the runner sets it before importing anything), and is checked here;
- ``safety``: fraction of the budget kept free when choosing K (default 0.1).

``num_microbatches=None`` chooses K per step from ``budget_bytes`` and recovers from an
out-of-memory by re-planning finer; a fixed K never re-plans (an out-of-memory is the result).

The seed ordering is a once-per-dataset host-side computation (cached next to the dataset), done in
`preprocess` before the run enters the device memory, so it is neither charged to the device nor
to the steps; the runner records its time separately.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import torch

from cherry.bench.system import StepOutcome, System, SystemConfig
from cherry.data import Dataset

DEFAULT_OPTIONS = {"ordering": "metis", "balance": "memory", "stage_features": True, "pipeline": True,
                   "native_ops": True, "safety": 0.1}
_CHOICES = {"ordering": ("none", "metis", "random"), "balance": ("memory", "count")}

# (dataset name, ordering, seed) -> rank; one process per run, so a module-level cache is per run
_RANKS: dict[tuple[str, str, int], Optional[torch.Tensor]] = {}


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` over `DEFAULT_OPTIONS`, validated (ValueError naming the bad key or value)."""
    if not isinstance(options, Mapping):
        raise TypeError(f"options has type {type(options).__name__}: expected a mapping")
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ValueError(f"unknown cherry option(s) {unknown}: expected keys among {sorted(DEFAULT_OPTIONS)}")
    out = dict(DEFAULT_OPTIONS, **options)
    for key, choices in _CHOICES.items():
        if out[key] not in choices:
            raise ValueError(f"cherry option {key}={out[key]!r} is invalid: expected one of {choices}")
    for key in ("stage_features", "pipeline", "native_ops"):
        if not isinstance(out[key], bool):
            raise ValueError(f"cherry option {key}={out[key]!r} is invalid: expected true or false")
    safety = out["safety"]
    if isinstance(safety, bool) or not isinstance(safety, (int, float)) or not 0 <= safety < 1:
        raise ValueError(f"cherry option safety={safety!r} is invalid: expected a number in [0, 1)")
    return out


def _needs_rank(config: SystemConfig, ordering: str) -> bool:
    return ordering != "none" and config.num_microbatches != 1


class CherrySystem(System):
    """Cherry's micro-batched training (see module docstring)."""

    name = "cherry"
    accepts_auto_microbatches = True

    @classmethod
    def preprocess(cls, dataset: Dataset, config: SystemConfig) -> None:
        """Compute (or load from the dataset's cache) the seed ordering, outside the device memory."""
        from cherry.session import seed_rank_for

        opts = resolve_options(config.options)
        key = (dataset.name, opts["ordering"], config.seed)
        if _needs_rank(config, opts["ordering"]) and key not in _RANKS:
            _RANKS[key] = seed_rank_for(dataset, opts["ordering"], config.seed)

    def __init__(self, dataset: Dataset, config: SystemConfig, device: torch.device, memory, probe) -> None:
        super().__init__(dataset, config, device, memory, probe)
        from cherry.execution import Trainer, TrainConfig
        from cherry.models import ModelSpec
        from cherry.ops import extension_available

        self.options = resolve_options(config.options)
        if not self.options["native_ops"]:
            if os.environ.get("CHERRY_NO_EXT", "") in ("", "0") or extension_available():
                raise ValueError("cherry option native_ops=false needs CHERRY_NO_EXT=1 before the extension "
                                 "loads; run through `python -m cherry.bench.run`, which sets it")
        spec = ModelSpec(config.model, dataset.feature_dim, config.hidden, dataset.num_classes, config.num_layers,
                         aggr=config.aggr, heads=config.heads, dropout=config.dropout)
        train_config = TrainConfig(
            fanouts=tuple(config.fanouts), batch_size=config.batch_size, lr=config.lr,
            num_microbatches=config.num_microbatches, budget_bytes=config.budget_bytes,
            ordering=self.options["ordering"], stage_features=self.options["stage_features"],
            pipeline=self.options["pipeline"], balance=self.options["balance"], safety=self.options["safety"],
            seed=config.seed,
        )
        rank = None
        if _needs_rank(config, self.options["ordering"]):
            key = (dataset.name, self.options["ordering"], config.seed)
            if key not in _RANKS:  # built without the runner: compute here (charged to the device)
                type(self).preprocess(dataset, config)
            rank = _RANKS[key]
        self.trainer = Trainer(dataset, spec, train_config, str(device), memory=memory, probe=probe, seed_rank=rank)
        self.trainer.model.train()

    def step(self, seeds: torch.Tensor, generator: torch.Generator) -> StepOutcome:
        trainer = self.trainer
        trainer.model.train()
        with self.probe.phase("sample"):
            blocks = trainer.sampler.sample(seeds, generator)
        stats = trainer.executor.step(blocks, self.dataset.features, self.dataset.labels)
        return StepOutcome(loss=stats.loss, num_microbatches=stats.num_microbatches,
                           redundancy=tuple(stats.redundancy), estimated_peak_bytes=stats.estimated_peak_bytes)

    def evaluate(self) -> dict[str, float]:
        try:
            return self.trainer.evaluate()
        finally:
            self.trainer.model.train()

    def estimator_errors(self) -> list[float]:
        return self.trainer.memory_model.relative_errors()

    @property
    def num_parameters(self) -> int:
        return self.trainer.num_parameters

    def close(self) -> None:
        self.trainer.close()
