"""Neighbour sampling: seeds -> `Blocks` (message-flow graphs, input layer first)."""
from cherry.sampling.blocks import Block, Blocks

__all__ = ["Block", "Blocks"]
