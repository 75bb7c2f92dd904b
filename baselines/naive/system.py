"""`NaiveSystem`: what a user does by hand to fit a large batch: K smaller batches, one step.

The seeds are permuted with the step's generator and cut into K near-equal groups; each group is
sampled independently (its own neighbour draws), its loss weighted ``|B_k| / |B|`` (``sum CE / |B|``)
and gradients accumulated before one optimizer step. Not equivalent to the logical batch: the groups
draw different neighbours than one sampling of the whole batch would, and nodes reached from several
groups are sampled and computed once per group. Redundancy is reported per layer as the groups' summed
sources over the distinct nodes among them. "Auto" K (``num_microbatches=None``): the shared search of
`baselines.common`, the smallest K whose step fits the capacity.
"""
from __future__ import annotations

import torch

from baselines.common import AccumulatingSystem
from cherry.systems.contract import StepOutcome


class NaiveSystem(AccumulatingSystem):
    """Random seed groups, each sampled on its own."""

    name = "naive"
    accepts_auto_microbatches = True  # K from the capacity by the shared search (baselines.common)

    def _prepare(self, seeds: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return seeds  # each group is sampled on its own, so nothing is shared between attempts

    def _run(self, seeds: torch.Tensor, generator: torch.Generator, k: int) -> StepOutcome:
        total = int(seeds.numel())
        with self.probe.phase("plan"):
            perm = torch.randperm(total, generator=generator, device=generator.device).to(seeds.device)
            groups = torch.tensor_split(seeds[perm], min(k, total))
        num_nodes = self.dataset.graph.num_nodes
        num_layers = self.spec.num_layers
        reached = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(num_layers)]

        def microbatches():
            for group in groups:
                with self.probe.phase("sample"):
                    blocks = self.sampler.sample(group, generator)
                for l, b in enumerate(blocks.layers):
                    reached[l][b.src_nodes] = True
                yield blocks

        shapes = self.run_all(microbatches(), total)
        redundancy = tuple(sum(s.num_src[l] for s in shapes) / max(int(reached[l].sum()), 1)
                           for l in range(num_layers))
        return StepOutcome(loss=self.loss_so_far(), num_microbatches=len(shapes), redundancy=redundancy)
