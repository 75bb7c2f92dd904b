"""`FullBatchSystem`: sample the logical mini-batch and run it whole (K = 1).

This is what micro-batching is measured against: the same sampled batch, model and loss
(``sum CE / |B|``), with all of the batch's activations alive at once, so it is the run that hits the
memory wall first. ``spec.num_microbatches`` is ignored (a sweep over K may pass its K to every
system); the outcome always reports K = 1.
"""
from __future__ import annotations

import torch

from baselines.common import AccumulatingSystem, MicrobatchShape
from cherry.systems.contract import StepOutcome
from cherry.sampling import Blocks


class FullBatchSystem(AccumulatingSystem):
    """One micro-batch per logical mini-batch."""

    name = "full"
    never_splits = True

    def _prepare(self, seeds: torch.Tensor, generator: torch.Generator) -> Blocks:
        with self.probe.phase("sample"):
            return self.sampler.sample(seeds, generator)

    def _run(self, blocks: Blocks, generator: torch.Generator, k: int) -> StepOutcome:
        shapes: list[MicrobatchShape] = self.run_all([blocks], blocks.num_seeds)
        return StepOutcome(loss=self.loss_so_far(), num_microbatches=len(shapes),
                           redundancy=tuple(1.0 for _ in range(blocks.num_layers)))
