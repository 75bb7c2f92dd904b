"""Neighbour sampling: seeds -> `Blocks` (message-flow graphs, input layer first)."""
from cherry.sampling.blocks import Block, Blocks, validate_block
from cherry.sampling.layout import DegreeLayout
from cherry.sampling.sampler import NeighborSampler, check_blocks, slice_blocks, slice_blocks_many

__all__ = ["Block", "Blocks", "DegreeLayout", "validate_block", "NeighborSampler", "check_blocks", "slice_blocks", "slice_blocks_many"]
