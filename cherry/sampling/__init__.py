"""Neighbour sampling: seeds -> `Blocks` (message-flow graphs, input layer first, validated once when
made), and the batch loader that samples (and plans) batch i + 1 while batch i steps."""
from cherry.sampling.blocks import Block, Blocks, validate_block
from cherry.sampling.layout import DegreeLayout
from cherry.sampling.loader import (BatchLoader, LoadedBatch, derive_seed, epoch_seed_batches,
                                    sampling_generator, spec_seed_batches, step_seed_batches)
from cherry.sampling.sampler import NeighborSampler, check_blocks, slice_blocks, slice_blocks_many

__all__ = ["BatchLoader", "Block", "Blocks", "DegreeLayout", "LoadedBatch", "NeighborSampler", "check_blocks",
           "derive_seed", "epoch_seed_batches", "sampling_generator", "slice_blocks", "slice_blocks_many",
           "spec_seed_batches", "step_seed_batches", "validate_block"]
