"""What the micro-batching baselines share: config checks, the seeded model, the accumulation loop and
the shared evaluator.

`AccumulatingSystem` runs a logical mini-batch as micro-batches one after another, as Betty and Buffalo
do: for each micro-batch ``k`` the input features are gathered and moved to the device, then
``loss_k = sum CE(model(blocks_k, x_k), y_k) / |B|`` (``|B|`` = seeds of the whole logical batch) and
``loss_k.backward()`` adds its gradient into ``.grad``; one optimizer step follows the last one. With
``|B_k| / |B|`` weights on mean losses this is the same sum, so when the micro-batches partition the
seeds and keep every sampled in-edge the accumulated gradient equals the full batch's (dropout 0).

`AccumulatingSystem.accumulate_gradients` does everything but the optimizer step and leaves the
gradients in the parameters' ``.grad``, so tests can compare systems' gradients on one sampled batch.
Only `cherry.data`, `cherry.sampling`, `cherry.models` and `cherry.bench` are imported here (a test
checks that no baseline imports cherry's planner or executor).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import torch
import torch.nn.functional as F

from cherry.bench.system import StepOutcome, System
from cherry.data import Dataset
from cherry.data.metrics import split_accuracy
from cherry.models import build_model
from cherry.models.inference import layerwise_inference
from cherry.sampling import Blocks, LoadedBatch, NeighborSampler
from cherry.spec import RunSpec


def fixed_num_microbatches(spec: RunSpec, system: str) -> int:
    """The K a baseline was told to use; baselines cannot choose K from a budget."""
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec must be a cherry.spec.RunSpec, got {type(spec).__name__}")
    k = spec.num_microbatches
    if k is None:
        raise ValueError(f"{system} needs a fixed K: set num_microbatches (got None)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"num_microbatches must be an int >= 1, got {k!r}")
    return k


def build_seeded_model(dataset: Dataset, spec: RunSpec, device: torch.device) -> torch.nn.Module:
    """The model of ``spec`` with parameters drawn right after ``torch.manual_seed(spec.seed)``, so
    every system starts from the same weights; moved to ``device``."""
    model_spec = spec.model_spec(dataset)
    torch.manual_seed(spec.seed)
    return build_model(model_spec).to(device)


def check_seeds(seeds: object, num_nodes: int) -> None:
    """Raise unless ``seeds`` is a non-empty 1-D int64 tensor of node ids."""
    if not isinstance(seeds, torch.Tensor):
        raise TypeError(f"seeds must be a torch.Tensor, got {type(seeds).__name__}")
    if seeds.dtype != torch.int64 or seeds.dim() != 1:
        raise ValueError(f"seeds must be a 1-D int64 tensor, got {seeds.dtype} of shape {tuple(seeds.shape)}")
    if seeds.numel() == 0:
        raise ValueError("seeds must hold at least one node id, got an empty tensor")
    if int(seeds.min()) < 0 or int(seeds.max()) >= num_nodes:
        raise ValueError(f"seeds must lie in [0, {num_nodes})")


@dataclass(frozen=True)
class MicrobatchShape:
    """Sizes of one micro-batch that was run, per layer (input layer first)."""

    num_seeds: int
    num_src: tuple[int, ...]
    num_edges: tuple[int, ...]

    @staticmethod
    def of(blocks: Blocks) -> "MicrobatchShape":
        return MicrobatchShape(blocks.num_seeds, tuple(b.num_src for b in blocks.layers),
                               tuple(b.num_edges for b in blocks.layers))


def redundancy_against(parent: Blocks, shapes: Sequence[MicrobatchShape]) -> tuple[float, ...]:
    """Per layer (input layer first): the micro-batches' summed source counts over the batch's own
    (1.0 = no node computed twice; Betty's and Buffalo's redundancy)."""
    return tuple(
        sum(s.num_src[l] for s in shapes) / max(parent.layers[l].num_src, 1) for l in range(parent.num_layers)
    )


class AccumulatingSystem(System):
    """A baseline that runs a logical mini-batch as sequential micro-batches (see module docstring).

    Subclasses implement `_accumulate` (sampling and splitting under their own phases, calling
    `run_microbatch` for each micro-batch) and set ``name``; their options are declared (with their
    defaults) in the systems table, `cherry.systems`, and arrive validated in ``spec.options``.
    """

    def __init__(self, dataset: Dataset, spec: RunSpec, device: torch.device, memory, probe) -> None:
        super().__init__(dataset, spec, torch.device(device), memory, probe)
        self.model_spec = spec.model_spec(dataset)
        self.model = build_seeded_model(dataset, spec, self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=spec.lr)
        self.sampler = NeighborSampler(dataset.graph, spec.fanouts)
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)

    # -- the step ----------------------------------------------------------------------------------
    def step(self, batch: LoadedBatch) -> StepOutcome:
        outcome = self.accumulate_gradients(batch.seeds, batch.generator)
        with self.probe.phase("optimizer"):
            self.optimizer.step()
        return outcome

    def accumulate_gradients(self, seeds: torch.Tensor, generator: torch.Generator) -> StepOutcome:
        """Everything of `step` but the optimizer step: afterwards each parameter's ``.grad`` holds the
        logical batch's accumulated gradient."""
        check_seeds(seeds, self.dataset.graph.num_nodes)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        outcome = self._accumulate(seeds, generator)
        return outcome

    def gradients(self) -> list[Optional[torch.Tensor]]:
        """Copies of the parameters' current ``.grad`` (None where a parameter got no gradient)."""
        return [None if p.grad is None else p.grad.detach().clone() for p in self.model.parameters()]

    @abc.abstractmethod
    def _accumulate(self, seeds: torch.Tensor, generator: torch.Generator) -> StepOutcome:
        """Sample, split and run the micro-batches of ``seeds`` via `run_microbatch`."""

    def run_microbatch(self, blocks: Blocks, total_seeds: int) -> None:
        """Gather, forward and backward one micro-batch, its loss scaled by ``1 / total_seeds``."""
        if blocks.num_seeds == 0:
            return
        with self.probe.phase("gather"):
            # Betty and Buffalo index the host features per micro-batch and copy the rows over.
            x = self.dataset.features.index_select(0, blocks.input_nodes).to(self.device)
            y = self.dataset.labels.index_select(0, blocks.seeds).to(self.device)
            on_device = blocks.to(self.device)
        with self.probe.phase("forward_backward"):
            logits = self.model(on_device, x)
            loss = F.cross_entropy(logits, y, reduction="sum") / total_seeds
            loss.backward()
        self._loss_sum += loss.detach().to(torch.float64)

    def loss_so_far(self) -> float:
        """The logical batch's mean cross-entropy accumulated by this step's micro-batches."""
        return float(self._loss_sum)

    def run_all(self, microbatches: Iterable[Blocks], total_seeds: int) -> list[MicrobatchShape]:
        """Run each micro-batch as the iterable produces it (so only one is alive at a time, as when
        they are streamed to the device); return the shapes of those run (empty ones are skipped)."""
        shapes = []
        for mb in microbatches:
            if mb.num_seeds == 0:
                continue
            self.run_microbatch(mb, total_seeds)
            shapes.append(MicrobatchShape.of(mb))
            del mb  # free it before the next one is built
        return shapes

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Train/valid/test accuracy by layer-wise full-neighbour inference (the shared evaluator)."""
        ds = self.dataset
        logits = layerwise_inference(self.model, ds.graph, ds.features, self.device)
        return split_accuracy(logits, ds)
