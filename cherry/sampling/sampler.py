"""Uniform neighbour sampling into `Blocks`, and exact slicing of sampled `Blocks` into micro-batches.

`NeighborSampler.sample` walks from the seeds outward, one `cherry.ops.sample_neighbors` call per
layer (last fanout first); each layer's ``random_seed`` is drawn from the caller's `torch.Generator`,
so the same generator state gives the same `Blocks` on every implementation and device.

`slice_blocks` returns the sub-blocks that compute a subset of a batch's seeds: every kept destination
keeps exactly its parent in-edges in order, so any per-destination computation on the slice equals
the corresponding rows of the same computation on the whole batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from cherry.data.graph import Graph
from cherry.ops import sampling as ops
from cherry.sampling.blocks import Block, Blocks

_SEED_HIGH = 2**63 - 1


@dataclass(frozen=True)
class NeighborSampler:
    """Samples ``len(fanouts)``-layer blocks; ``fanouts[l]`` (positive, or -1 for all in-neighbours)
    is the fanout of ``Blocks.layers[l]``, input layer first, as in DGL."""

    graph: Graph
    fanouts: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.graph, Graph):
            raise TypeError(f"graph must be a cherry.data.Graph, got {type(self.graph).__name__}")
        fanouts = self.fanouts
        if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__iter__"):
            raise TypeError(f"fanouts must be a sequence of ints, got {fanouts!r}")
        fanouts = tuple(fanouts)
        if not fanouts:
            raise ValueError("fanouts must name at least one layer, got an empty sequence")
        for f in fanouts:
            ops.check_fanout(f)
        object.__setattr__(self, "fanouts", fanouts)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def sample(self, seeds: torch.Tensor, generator: Optional[torch.Generator] = None) -> Blocks:
        """Blocks whose output destinations are ``seeds`` (int64, 1-D, distinct, in range, on the
        graph's device), in the given order. ``generator`` (default: torch's global one) supplies one
        random 63-bit seed per layer."""
        graph = self.graph
        ops.check_index_vector("seeds", seeds, graph.indptr.device)
        ops.check_positions("seeds", seeds, graph.num_nodes)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        layers = []
        dst = seeds
        for fanout in reversed(self.fanouts):
            random_seed = _draw_seed(generator)
            indptr, indices, src = ops._sample_neighbors(graph.indptr, graph.indices, dst, fanout, random_seed)
            layers.append(Block(src_nodes=src, num_dst=int(dst.numel()), indptr=indptr, indices=indices))
            dst = src
        return Blocks(layers=tuple(reversed(layers)))


def _draw_seed(generator: Optional[torch.Generator]) -> int:
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, _SEED_HIGH, (1,), generator=generator, device=device).item())


def slice_blocks(blocks: Blocks, seed_positions: torch.Tensor) -> Blocks:
    """The exact sub-blocks computing the batch's seeds at ``seed_positions`` (distinct positions into
    ``blocks.seeds``, in the order the micro-batch lists its seeds).

    Top-down: a layer's destinations are the positions chosen from the layer above; its sources are
    those destinations followed by newly reached parent sources in first-appearance order, and they
    become the next lower layer's destinations. ``src_nodes`` are global ids; ``input_positions``
    holds, for each input node of the slice, its position among ``blocks.input_nodes``.
    """
    if not isinstance(blocks, Blocks):
        raise TypeError(f"blocks must be a cherry.sampling.Blocks, got {type(blocks).__name__}")
    top = blocks.layers[-1]
    ops.check_index_vector("seed_positions", seed_positions, top.indptr.device)
    ops.check_positions("seed_positions", seed_positions, blocks.num_seeds)
    layers = []
    dst_positions = seed_positions
    for parent in reversed(blocks.layers):
        indptr, indices, src_positions = ops._slice_layer(parent.indptr, parent.indices, dst_positions, parent.num_src)
        layers.append(
            Block(
                src_nodes=parent.src_nodes[src_positions],
                num_dst=int(dst_positions.numel()),
                indptr=indptr,
                indices=indices,
            )
        )
        dst_positions = src_positions
    return Blocks(layers=tuple(reversed(layers)), input_positions=dst_positions)


def check_blocks(blocks: Any) -> None:
    """Raise ValueError unless ``blocks`` satisfies the `Blocks` contract (see `cherry.sampling.blocks`):
    int64 tensors, CSC indptr of ``num_dst + 1`` entries from 0 to ``len(indices)``, local indices in
    range, distinct global sources with the destinations as a prefix, chained layers. O(edges); meant
    for tests and debugging, not the training loop."""
    if not isinstance(blocks, Blocks):
        raise TypeError(f"blocks must be a cherry.sampling.Blocks, got {type(blocks).__name__}")
    for l, b in enumerate(blocks.layers):
        for name in ("src_nodes", "indptr", "indices"):
            ops.check_index_vector(f"layers[{l}].{name}", getattr(b, name))
        if b.indptr.numel() != b.num_dst + 1 or int(b.indptr[0]) != 0 or int(b.indptr[-1]) != b.num_edges:
            raise ValueError(f"layers[{l}].indptr must run from 0 to {b.num_edges} over {b.num_dst + 1} entries")
        if bool((b.indptr[1:] < b.indptr[:-1]).any()):
            raise ValueError(f"layers[{l}].indptr must be non-decreasing")
        if b.num_dst > b.num_src:
            raise ValueError(f"layers[{l}] has {b.num_dst} destinations but only {b.num_src} sources")
        if b.num_edges and (int(b.indices.min()) < 0 or int(b.indices.max()) >= b.num_src):
            raise ValueError(f"layers[{l}].indices must lie in [0, {b.num_src})")
        if torch.unique(b.src_nodes).numel() != b.num_src:
            raise ValueError(f"layers[{l}].src_nodes must be distinct")
        if l + 1 < blocks.num_layers and not torch.equal(blocks.layers[l + 1].src_nodes, b.dst_nodes):
            raise ValueError(f"layers[{l + 1}].src_nodes must equal layers[{l}]'s destinations")
