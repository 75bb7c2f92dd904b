"""Message-flow-graph blocks of a sampled mini-batch (DGL's block contract).

``Blocks.layers[0]`` is the input layer and ``layers[-1]`` the output layer. For each `Block`:
- ``src_nodes`` (int64) are global node ids; the first ``num_dst`` of them are the destinations;
- ``indptr``/``indices`` are CSC over the destinations: destination ``i`` aggregates the sources at
  local positions ``indices[indptr[i]:indptr[i+1]]`` (int64, into ``src_nodes``).
Between layers: ``layers[l + 1].src_nodes == layers[l].src_nodes[:layers[l].num_dst]``, so a
position in layer ``l + 1``'s sources is the same position in layer ``l``'s destinations.
The seeds are ``layers[-1].src_nodes[:layers[-1].num_dst]`` in the order given to the sampler.

A micro-batch sliced from a parent batch also carries ``input_positions``: for each of its input
nodes, its position among the parent's input nodes, so it can index features staged once per batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class Block:
    """One layer: global source ids (destinations first) and local CSC adjacency."""

    src_nodes: torch.Tensor
    num_dst: int
    indptr: torch.Tensor
    indices: torch.Tensor

    @property
    def num_src(self) -> int:
        return int(self.src_nodes.numel())

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    @property
    def dst_nodes(self) -> torch.Tensor:
        return self.src_nodes[: self.num_dst]

    def in_degrees(self) -> torch.Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Block":
        return Block(
            src_nodes=self.src_nodes.to(device, non_blocking=non_blocking),
            num_dst=self.num_dst,
            indptr=self.indptr.to(device, non_blocking=non_blocking),
            indices=self.indices.to(device, non_blocking=non_blocking),
        )


@dataclass(frozen=True)
class Blocks:
    """The L blocks of one (micro-)batch, input layer first."""

    layers: tuple[Block, ...]
    input_positions: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if len(self.layers) == 0:
            raise ValueError("Blocks needs at least one layer")
        for l in range(len(self.layers) - 1):
            if self.layers[l].num_dst != self.layers[l + 1].num_src:
                raise ValueError(
                    f"layer {l} has {self.layers[l].num_dst} destinations but layer {l + 1} has "
                    f"{self.layers[l + 1].num_src} sources; they must be equal"
                )

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def input_nodes(self) -> torch.Tensor:
        return self.layers[0].src_nodes

    @property
    def seeds(self) -> torch.Tensor:
        return self.layers[-1].dst_nodes

    @property
    def num_seeds(self) -> int:
        return self.layers[-1].num_dst

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Blocks":
        pos = self.input_positions
        return Blocks(
            layers=tuple(b.to(device, non_blocking) for b in self.layers),
            input_positions=None if pos is None else pos.to(device, non_blocking=non_blocking),
        )
