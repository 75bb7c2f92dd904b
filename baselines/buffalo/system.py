"""`BuffaloSystem`: sample the logical batch once, schedule its seeds by degree buckets + knapsack
(`bucketize`), build each micro-batch's blocks with the fast native in-edge extraction
(`cherry.sampling.slice_blocks`, the counterpart of Buffalo's modified DGL), and run the micro-batches
one after another with gradient accumulation (weight ``|MB_j| / |B|``).

Phases: ``sample``; ``plan`` = bucketing + knapsack; ``slice`` = block construction (per micro-batch,
just before it runs). Zero-in-degree seeds are kept (Buffalo's artifact drops them). Buffalo's offline,
per-dataset fitted memory estimator is not reproduced, so ``estimated_peak_bytes`` is None; the
knapsack weighs seeds by ``(degree + 1) * 18 * 4 * D`` bytes, ``D`` the output layer's aggregated width.
"""
from __future__ import annotations

import torch

from baselines.buffalo.buckets import BucketSchedule, bucketize
from baselines.common import AccumulatingSystem, fixed_num_microbatches, redundancy_against
from cherry.bench.system import StepOutcome
from cherry.sampling import Blocks, slice_blocks

LSTM_TENSORS_PER_ELEMENT = 18
BYTES_PER_FLOAT = 4


class BuffaloSystem(AccumulatingSystem):
    """Buffalo's bucket scheduling with a fixed K."""

    name = "buffalo"

    def __init__(self, dataset, spec, device, memory, probe) -> None:
        self.num_microbatches = fixed_num_microbatches(spec, self.name)
        super().__init__(dataset, spec, device, memory, probe)
        width = self.model_spec.layer_dims()[-1].aggregate_dim
        self.bytes_per_degree = max(1, width) * LSTM_TENSORS_PER_ELEMENT * BYTES_PER_FLOAT

    def schedule(self, blocks: Blocks) -> BucketSchedule:
        """The bucket schedule of a sampled batch (positions into its seeds)."""
        return bucketize(blocks.layers[-1].in_degrees(), self.num_microbatches, self.bytes_per_degree)

    def _accumulate(self, seeds: torch.Tensor, generator: torch.Generator) -> StepOutcome:
        with self.probe.phase("sample"):
            blocks = self.sampler.sample(seeds, generator)
        with self.probe.phase("plan"):
            schedule = self.schedule(blocks)

        def microbatches():
            for positions in schedule.microbatches:
                if positions.numel() == 0:
                    continue
                with self.probe.phase("slice"):
                    mb = slice_blocks(blocks, positions)
                yield mb

        shapes = self.run_all(microbatches(), blocks.num_seeds)
        return StepOutcome(loss=self.loss_so_far(), num_microbatches=len(shapes),
                           redundancy=redundancy_against(blocks, shapes))
