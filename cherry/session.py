"""A training session: dataset + model + budget + device memory -> epochs, with progress and a summary.

The application layer shared by `cherry train` and the benchmark's cherry system: it loads data,
enters the (emulated or real) device memory, builds the `Trainer`, shows a progress bar and turns an
out-of-memory into a result (``status: "oom"``) instead of a crash.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch

from cherry.io import cached_tensor


@dataclass(frozen=True)
class SessionSpec:
    dataset: str
    root: Optional[str]
    model: str
    aggr: Optional[str]
    layers: int
    hidden: int
    heads: int
    dropout: float
    fanouts: tuple[int, ...]
    batch_size: int
    epochs: int
    lr: float
    num_microbatches: Optional[int]
    budget_bytes: Optional[int]
    device_memory_bytes: Optional[int]
    device: str
    seed: int
    max_steps_per_epoch: Optional[int]
    evaluate: bool
    ordering: str


def seed_rank_for(dataset, ordering: str, seed: int = 0) -> Optional[torch.Tensor]:
    """The dataset's locality rank, computed once and cached next to the dataset's files."""
    from cherry.planning.ordering import ORDERING_VERSION, locality_rank

    if ordering == "none":
        return None
    path = dataset.metadata.get("cache_dir")
    compute = lambda: locality_rank(dataset.graph, ordering, seed=seed)  # noqa: E731
    if path is None:
        return compute()
    return cached_tensor(f"{path}/locality-{ordering}-v{ORDERING_VERSION}-{seed}.pt", compute)


class TrainingSession:
    def __init__(self, spec: SessionSpec) -> None:
        self.spec = spec

    @staticmethod
    def from_args(args: argparse.Namespace, budget_bytes: Optional[int]) -> "TrainingSession":
        aggr = args.aggr if args.model == "sage" else None
        if args.aggr is not None and args.model != "sage":
            raise ValueError(f"--aggr is for --model sage only, got --model {args.model} --aggr {args.aggr}")
        return TrainingSession(SessionSpec(
            dataset=args.dataset, root=args.root, model=args.model, aggr=aggr, layers=args.layers,
            hidden=args.hidden, heads=args.heads, dropout=args.dropout, fanouts=tuple(args.fanouts),
            batch_size=args.batch_size, epochs=getattr(args, "epochs", 1), lr=getattr(args, "lr", 3e-3),
            num_microbatches=args.microbatches, budget_bytes=budget_bytes,
            device_memory_bytes=args.device_memory, device=args.device, seed=args.seed,
            max_steps_per_epoch=getattr(args, "max_steps", None), evaluate=not getattr(args, "no_eval", False),
            ordering=getattr(args, "ordering", "metis"),
        ))

    def build(self, memory=None):
        """Load the data and build the `Trainer` (inside ``memory`` when given)."""
        from cherry.data import load_dataset
        from cherry.execution import Trainer, TrainConfig
        from cherry.models import ModelSpec

        s = self.spec
        if s.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda was asked for, but no CUDA device is available")
        if len(s.fanouts) != s.layers and s.model != "mlp":
            raise ValueError(f"--fanouts has {len(s.fanouts)} values for --layers {s.layers}; give one per layer")
        dataset = load_dataset(s.dataset, s.root)
        model_spec = ModelSpec(s.model, dataset.feature_dim, s.hidden, dataset.num_classes, s.layers,
                               aggr=s.aggr, heads=s.heads, dropout=s.dropout)
        config = TrainConfig(
            fanouts=s.fanouts, batch_size=s.batch_size, epochs=s.epochs, lr=s.lr,
            num_microbatches=s.num_microbatches, budget_bytes=s.budget_bytes, ordering=s.ordering,
            seed=s.seed, max_steps_per_epoch=s.max_steps_per_epoch, evaluate=s.evaluate,
        )
        rank = seed_rank_for(dataset, s.ordering, s.seed) if s.num_microbatches != 1 else None
        return Trainer(dataset, model_spec, config, s.device, memory=memory, seed_rank=rank)

    def run(self, progress: bool = True, echo: Callable[[str], None] = print) -> dict:
        """Train every epoch; return a JSON-able summary (``status`` ok or oom)."""
        from cherry.memory import DeviceMemory, format_size
        from cherry.ops import extension_status
        from tqdm import tqdm

        s = self.spec
        summary: dict = {"spec": asdict(self.spec), "status": "ok", "reason": None, "epochs": []}
        with DeviceMemory(s.device, s.device_memory_bytes) as memory:
            trainer = self.build(memory)
            summary["num_parameters"] = trainer.num_parameters
            summary["native_ops"] = extension_status()
            try:
                for epoch in range(s.epochs):
                    bar = tqdm(total=trainer.num_steps(epoch), desc=f"epoch {epoch}", disable=not progress, leave=False)

                    def on_step(stats, bar=bar):
                        bar.update(1)
                        bar.set_postfix(loss=f"{stats.loss:.4f}", K=stats.num_microbatches)

                    result = trainer.run_epoch(epoch, on_step)
                    bar.close()
                    summary["epochs"].append(asdict(result))
                    peak = result.measured_peak_bytes
                    echo(f"epoch {epoch}: loss={result.loss:.4f} train_acc={result.train_acc:.4f} "
                         f"valid_acc={result.valid_acc:.4f} K={result.max_microbatches} "
                         f"peak={format_size(peak) if peak else 'n/a'} "
                         f"est={format_size(result.estimated_peak_bytes)}")
            except torch.OutOfMemoryError as exc:
                summary.update(status="oom", reason=str(exc).splitlines()[0])
            finally:
                trainer.close()
            errors = trainer.memory_model.relative_errors()
            summary["estimator_median_relative_error"] = statistics.median(errors) if errors else None
        return summary
