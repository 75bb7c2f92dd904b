"""The ``cherry`` system of the benchmark: the `cherry.execution.Trainer` behind `System`.

The runner's loader runs `CherrySystem.prepare` (sample and plan, `Trainer.prepare`) for batch
``i + 1`` while batch ``i`` steps, exactly as `Trainer.train_epoch` does for a user, so the workflow
measures the engine users get; the step's ``sample`` phase is the wait for it. The options of the
spec (ordering, balance, stage_features, pipeline, native_ops, safety, feature_cache, recompute;
``$defs/cherry_options`` of the run schema) reach the executor through `ExecutorOptions.from_spec`.
It lives beside the executor, not in `cherry.systems`, so that the systems package (the table and the
contract) imports no execution code: execution builds on systems, never the reverse.

The seed ordering is a once-per-dataset host-side computation (cached next to the dataset by
`cherry.planning.seed_rank`), done in `preprocess` before the run enters the device memory, so it is
charged neither to the device nor to the steps; the runner records its time separately.
"""
from __future__ import annotations

import os

import torch

from cherry.data import Dataset
from cherry.execution.trainer import Trainer
from cherry.sampling import LoadedBatch
from cherry.spec import RunSpec
from cherry.systems.contract import StepOutcome, System


class CherrySystem(System):
    """Cherry's micro-batched training (see module docstring)."""

    name = "cherry"
    accepts_auto_microbatches = True
    prepares_ahead = True

    @classmethod
    def preprocess(cls, dataset: Dataset, spec: RunSpec) -> None:
        """Compute (or load from the dataset's cache) the seed ordering, outside the device memory."""
        from cherry.planning import seed_rank

        if spec.num_microbatches != 1 or spec.nproc > 1:  # ranks split the batch along it too
            seed_rank(dataset, spec.ordering, spec.seed)

    def __init__(self, dataset: Dataset, spec: RunSpec, device: torch.device, memory, probe) -> None:
        super().__init__(dataset, spec, device, memory, probe)
        from cherry.ops import extension_available

        if not spec.options["native_ops"]:
            if os.environ.get("CHERRY_NO_EXT", "") in ("", "0") or extension_available():
                raise ValueError("cherry option native_ops=false needs CHERRY_NO_EXT=1 before the extension "
                                 "loads; run through `python -m cherry.bench.run`, which sets it")
        if torch.distributed.is_available() and torch.distributed.is_initialized():  # one rank of nproc
            from cherry.execution.distributed import DistributedTrainer

            self.trainer = DistributedTrainer(dataset, spec, memory=memory, probe=probe)
        else:
            self.trainer = Trainer(dataset, spec, memory=memory, probe=probe)

    def prepare(self, seeds: torch.Tensor, generator: torch.Generator):
        return self.trainer.prepare(seeds, generator)

    def step(self, batch: LoadedBatch) -> StepOutcome:
        stats = self.trainer.step(batch.prepared)
        return StepOutcome(loss=stats.loss, num_microbatches=stats.num_microbatches,
                           redundancy=tuple(stats.redundancy), estimated_peak_bytes=stats.estimated_peak_bytes,
                           measured_peak_bytes=stats.measured_peak_bytes, recompute=stats.recompute, streamed=stats.streamed,
                           oom_recoveries=stats.num_oom_recoveries, feature_rows_read=stats.feature_rows_read,
                           feature_rows_missed=stats.feature_rows_missed,
                           feature_bytes_moved=stats.feature_bytes_moved)

    def evaluate(self) -> dict[str, float]:
        return self.trainer.evaluate()

    def estimator_errors(self) -> list[float]:
        return self.trainer.memory_model.relative_errors()

    @property
    def num_parameters(self) -> int:
        return self.trainer.num_parameters

    @property
    def construction(self) -> str:
        """Where the micro-batches are built (`cherry.sampling.placement`), for the record."""
        return self.trainer.construction.where

    @property
    def feature_cache(self) -> dict:
        """Where the input features live (`cherry.planning.residency.ResidencyPlan`), for the record."""
        return self.trainer.residency.as_dict()

    @property
    def ordering(self) -> str:
        """The seed ordering used, for the record: ``"bfs"`` where ``"metis"`` was asked for and pymetis
        is absent (`cherry.planning.ordering.resolve_ordering`); ``"none"`` when K = 1 and one rank."""
        from cherry.planning.ordering import resolve_ordering

        uses_rank = self.spec.num_microbatches != 1 or self.spec.nproc > 1
        return resolve_ordering(self.spec.ordering) if uses_rank else "none"

    def close(self) -> None:
        self.trainer.close()


SYSTEM = CherrySystem
