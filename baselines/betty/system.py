"""`BettySystem`: sample the logical batch once, partition its seeds with METIS on the co-neighbour
graph, rebuild each part's blocks top-down, run the parts one after another with gradient accumulation.

Phases: ``sample``; ``plan`` = REG construction + METIS; ``slice`` = block rebuilding (done per
micro-batch just before it runs, so only one micro-batch's blocks are alive; Betty builds them all
first, which costs the same time and more host memory). Not reproduced: the optional re-split of the
largest micro-batch (off in the published runs) and the "connection check". The rebuilding here is
vectorised PyTorch, faster than the artifact's Python, so speed-ups measured against it are conservative.

Reports per layer redundancy (summed micro-batch sources / batch sources) and, for GraphSAGE-LSTM,
Betty's estimated peak (the largest micro-batch's `lstm_estimate_bytes`; None for other models).
"""
from __future__ import annotations

import torch

from baselines.betty.reg import lstm_estimate_bytes, partition_seeds, rebuild_blocks
from baselines.common import AccumulatingSystem, fixed_num_microbatches, redundancy_against
from cherry.bench.system import StepOutcome


class BettySystem(AccumulatingSystem):
    """Betty's REG + METIS micro-batching with a fixed K."""

    name = "betty"

    def __init__(self, dataset, spec, device, memory, probe) -> None:
        self.num_microbatches = fixed_num_microbatches(spec, self.name)
        super().__init__(dataset, spec, device, memory, probe)
        self.estimates_lstm = self.model_spec.model == "sage" and self.model_spec.aggr == "lstm"

    def partition(self, blocks) -> list[torch.Tensor]:
        """Seed positions of each micro-batch (METIS parts of the co-neighbour graph)."""
        return partition_seeds(blocks.layers[-1], self.num_microbatches)

    def _accumulate(self, seeds: torch.Tensor, generator: torch.Generator) -> StepOutcome:
        with self.probe.phase("sample"):
            blocks = self.sampler.sample(seeds, generator)
        with self.probe.phase("plan"):
            parts = self.partition(blocks)

        def microbatches():
            for positions in parts:
                with self.probe.phase("slice"):
                    mb = rebuild_blocks(blocks, positions)
                yield mb

        shapes = self.run_all(microbatches(), blocks.num_seeds)
        estimate = None
        if self.estimates_lstm:
            estimate = max(lstm_estimate_bytes(s.num_edges, self.model_spec) for s in shapes)
        return StepOutcome(loss=self.loss_so_far(), num_microbatches=len(shapes),
                           redundancy=redundancy_against(blocks, shapes), estimated_peak_bytes=estimate)
