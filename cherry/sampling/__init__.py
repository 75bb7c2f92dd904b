"""Neighbour sampling: seeds -> `Blocks` (message-flow graphs, input layer first)."""
from cherry.sampling.blocks import Block, Blocks
from cherry.sampling.sampler import NeighborSampler, check_blocks, slice_blocks, slice_blocks_many

__all__ = ["Block", "Blocks", "NeighborSampler", "check_blocks", "slice_blocks", "slice_blocks_many"]
