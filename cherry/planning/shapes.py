"""Size summaries of (micro-)batches: the only inputs the memory model needs.

A `BatchShape` lists, per layer (input layer first), how many source nodes, destination nodes and
edges a batch's blocks have. It is computed in O(L) from `Blocks` (no tensor work), so the planner
can evaluate many candidate splits cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass

from cherry.sampling import Blocks


@dataclass(frozen=True)
class LayerShape:
    num_src: int
    num_dst: int
    num_edges: int


@dataclass(frozen=True)
class BatchShape:
    layers: tuple[LayerShape, ...]

    @property
    def num_inputs(self) -> int:
        return self.layers[0].num_src

    @property
    def num_seeds(self) -> int:
        return self.layers[-1].num_dst

    @staticmethod
    def of(blocks: Blocks) -> "BatchShape":
        return BatchShape(
            tuple(LayerShape(b.num_src, b.num_dst, b.num_edges) for b in blocks.layers)
        )
