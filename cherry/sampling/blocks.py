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

Validated once, when made: a `Block` built by a caller checks its adjacency (dtypes, ``indptr`` from 0
to ``len(indices)``, non-decreasing, local indices in ``[0, num_src)``) in ``__post_init__``; the
engine's own constructors (sampler, slicer, ``to``) pass ``trusted=True`` because they produced valid
tensors. So every `Block` in existence is valid, and the models and ops run on it through their
trusted paths without reading a value back from the device (no host sync inside a micro-batch).
Validating a CUDA block reads back a few scalars, once, at construction.

``layout`` (optional) is the `DegreeLayout` the packed LSTM needs: destinations in descending
in-degree order and the per-time-step batch sizes, computed when the block is made (the sampler; the
slicer for a slice on a device) or moved off the host (`Block.to` from the CPU), and carried along,
so the aggregator never reads degrees back from the device. A host block without one (a host slice)
gets it from its host ``indptr`` where it is read.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

from cherry.sampling.layout import DegreeLayout


@dataclass(frozen=True)
class Block:
    """One layer: global source ids (destinations first) and local CSC adjacency."""

    src_nodes: torch.Tensor
    num_dst: int
    indptr: torch.Tensor
    indices: torch.Tensor
    layout: Optional[DegreeLayout] = None
    trusted: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.trusted:
            validate_block(self)

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

    def with_layout(self) -> "Block":
        """This block with its `DegreeLayout` (computed now if missing: a host read-back on a GPU)."""
        if self.layout is not None:
            return self
        return dataclasses.replace(self, layout=DegreeLayout.of(self.indptr), trusted=True)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Block":
        device = torch.device(device)
        # Moving off the host: compute the layout while the degrees are still host memory.
        src = self.with_layout() if self.indptr.device.type == "cpu" and device.type != "cpu" else self
        return Block(
            src_nodes=src.src_nodes.to(device, non_blocking=non_blocking),
            num_dst=src.num_dst,
            indptr=src.indptr.to(device, non_blocking=non_blocking),
            indices=src.indices.to(device, non_blocking=non_blocking),
            layout=None if src.layout is None else src.layout.to(device, non_blocking),
            trusted=True,
        )


def validate_block(block: Block) -> None:
    """Raise unless ``block``'s adjacency is a CSC over ``num_dst`` destinations into its sources.

    What the aggregation ops rely on; O(edges), with a few scalar read-backs on a GPU. Distinctness of
    the global ids is the sampler's and slicer's invariant (checked in full by `check_blocks`).
    """
    for name in ("src_nodes", "indptr", "indices"):
        t = getattr(block, name)
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != 1:
            raise TypeError(f"Block.{name} must be a 1-D int64 tensor, got {_describe(t)}")
    if isinstance(block.num_dst, bool) or not isinstance(block.num_dst, int) or block.num_dst < 0:
        raise TypeError(f"Block.num_dst must be an int >= 0, got {block.num_dst!r}")
    if not block.src_nodes.device == block.indptr.device == block.indices.device:
        raise ValueError(f"Block tensors must be on one device, got {block.src_nodes.device}, "
                         f"{block.indptr.device}, {block.indices.device}")
    num_src, num_edges = block.src_nodes.numel(), block.indices.numel()
    if block.num_dst > num_src:
        raise ValueError(f"Block has {block.num_dst} destinations but only {num_src} sources; "
                         "destinations must be a prefix of the sources")
    if block.indptr.numel() != block.num_dst + 1:
        raise ValueError(f"Block.indptr must have num_dst + 1 = {block.num_dst + 1} entries, "
                         f"got {block.indptr.numel()}")
    ends = block.indptr[[0, -1]].tolist()
    if ends != [0, num_edges]:
        raise ValueError(f"Block.indptr must start at 0 and end at len(indices) = {num_edges}, got {ends}")
    if block.num_dst > 0 and bool((block.indptr[1:] < block.indptr[:-1]).any()):
        raise ValueError("Block.indptr must be non-decreasing (a CSC segmentation), but it decreases somewhere")
    if num_edges > 0:
        lo, hi = torch.aminmax(block.indices)
        lo, hi = int(lo), int(hi)
        if lo < 0 or hi >= num_src:
            raise ValueError(f"Block.indices must lie in [0, {num_src}) (local source positions), "
                             f"got values in [{lo}, {hi}]")
    if block.layout is not None and not isinstance(block.layout, DegreeLayout):
        raise TypeError(f"Block.layout must be a DegreeLayout or None, got {type(block.layout).__name__}")


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D {value.dtype} tensor"
    return type(value).__name__


@dataclass(frozen=True)
class Blocks:
    """The L blocks of one (micro-)batch, input layer first.

    A sequence of its `Block` layers, as DGL's list of blocks: ``for block in blocks``,
    ``blocks[0]`` and ``len(blocks)`` read `layers`.
    """

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

    def __iter__(self) -> Iterator[Block]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, index: int) -> Block:
        return self.layers[index]

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

    def with_layouts(self) -> "Blocks":
        """These blocks with every layer's `DegreeLayout` (see `Block.with_layout`)."""
        return dataclasses.replace(self, layers=tuple(b.with_layout() for b in self.layers))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Blocks":
        pos = self.input_positions
        return Blocks(
            layers=tuple(b.to(device, non_blocking) for b in self.layers),
            input_positions=None if pos is None else pos.to(device, non_blocking=non_blocking),
        )
