"""Uniform neighbour sampling into `Blocks`, and exact slicing of sampled `Blocks` into micro-batches.

`NeighborSampler.sample` walks from the seeds outward, one `cherry.ops.sample_neighbors` call per
layer (last fanout first); each layer's ``random_seed`` is drawn from the caller's `torch.Generator`,
so the same generator state gives the same `Blocks` on every implementation and device.

`slice_blocks` returns the sub-blocks that compute a subset of a batch's seeds: every kept destination
keeps exactly its parent in-edges in order, so any per-destination computation on the slice equals
the corresponding rows of the same computation on the whole batch. `slice_blocks_many` does it for
K disjoint groups at once (one native call per layer), which is how the planner splits a batch.
Both make trusted blocks (valid by construction), without `DegreeLayout`s. Only the LSTM aggregator
reads a layout, and on a device making one reads degrees back (about four host syncs per group and
layer). So the executor makes them in its plan, off the step, for models that read them
(`cherry.models.reads_degree_layouts`); a split that no LSTM reads pays nothing for layouts. `NeighborSampler` makes each sampled layer's layout unless ``layouts=False``
(what the Trainer passes for models that read none).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Optional, Sequence

import torch

from cherry.data.graph import Graph
from cherry.ops import sampling as ops
from cherry.sampling.blocks import Block, Blocks
from cherry.sampling.layout import DegreeLayout

_SEED_HIGH = 2**63 - 1


@dataclass(frozen=True)
class NeighborSampler:
    """Samples ``len(fanouts)``-layer blocks; ``fanouts[l]`` (positive, or -1 for all in-neighbours)
    is the fanout of ``Blocks.layers[l]``, input layer first, as in DGL."""

    graph: Graph
    fanouts: tuple[int, ...]
    layouts: bool = True  # make each layer's DegreeLayout (a host read-back per layer on a device)

    def __post_init__(self) -> None:
        if not isinstance(self.graph, Graph):
            raise TypeError(f"graph must be a cherry.data.Graph, got {type(self.graph).__name__}")
        if not isinstance(self.layouts, bool):
            raise TypeError(f"layouts must be a bool, got {type(self.layouts).__name__}")
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
            layers.append(Block(src_nodes=src, num_dst=int(dst.numel()), indptr=indptr, indices=indices,
                                layout=DegreeLayout.of(indptr) if self.layouts else None, trusted=True))
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
    ops.check_index_vector("seed_positions", seed_positions, blocks.layers[-1].indptr.device)
    ops.check_positions("seed_positions", seed_positions, blocks.num_seeds)
    return _slice_many(blocks, seed_positions, [int(seed_positions.numel())])[0]


def slice_blocks_many(blocks: Blocks, groups: Sequence[torch.Tensor], check: bool = True) -> list[Blocks]:
    """``[slice_blocks(blocks, g) for g in groups]``, equal tensor for tensor, in one native call per
    layer for all groups.

    ``groups`` is a non-empty list or tuple of non-empty 1-D int64 tensors of seed positions on the
    blocks' device; the groups must be disjoint (no position in two groups or twice in one) but need
    not cover every seed. The returned micro-batches' tensors are views of per-layer buffers shared
    by all of them (so no micro-batch may be modified in place). ``check=False`` skips the checks of
    the positions' range and disjointness (a pass over them and a read-back), for a caller that made
    the groups as a partition itself (the planner); the native kernels still refuse a position out
    of range.
    """
    if not isinstance(blocks, Blocks):
        raise TypeError(f"blocks must be a cherry.sampling.Blocks, got {type(blocks).__name__}")
    if not isinstance(groups, (list, tuple)):
        raise TypeError(f"groups must be a list or tuple of seed-position tensors, got {type(groups).__name__}")
    if not groups:
        raise ValueError("groups must hold at least one group of seed positions, got none")
    device = blocks.layers[-1].indptr.device
    sizes = []
    for i, g in enumerate(groups):
        ops.check_index_vector(f"groups[{i}]", g, device)
        if g.numel() == 0:
            raise ValueError(f"groups[{i}] must not be empty")
        sizes.append(int(g.numel()))
    flat = groups[0] if len(groups) == 1 else torch.cat(list(groups))
    if not check:
        return _slice_many(blocks, flat, sizes)
    num_seeds = blocks.num_seeds
    lo, hi = (int(v) for v in torch.aminmax(flat))
    if lo < 0 or hi >= num_seeds:
        raise ValueError(f"groups must hold seed positions in [0, {num_seeds}), found values in [{lo}, {hi}]")
    # One bincount proves the groups disjoint and each free of repeats (a partition of a subset).
    counts = torch.bincount(flat, minlength=num_seeds)
    worst = int(counts.max())
    if worst > 1:
        raise ValueError(
            f"groups must be disjoint: seed position {int(counts.argmax())} appears {worst} times across the groups"
        )
    return _slice_many(blocks, flat, sizes)


def _slice_many(blocks: Blocks, flat: torch.Tensor, sizes: list[int]) -> list[Blocks]:
    """The slices of the validated groups ``flat`` (concatenated) of ``sizes`` positions each.

    Per layer, top-down: one `slice_layer_many` call for all groups (which also gathers the global
    ids), then each group's tensors are views (``split_with_sizes``) of the concatenated outputs."""
    offsets = [0, *accumulate(sizes)]
    dst, dst_sizes = flat, sizes
    per_layer = []  # top-down; per layer, one Block per group
    for parent in reversed(blocks.layers):
        indptr, indices, src_positions, src_nodes, offsets, edge_offsets = ops._slice_layer_many(
            parent.indptr, parent.indices, dst, offsets, parent.src_nodes
        )
        src_sizes = _diffs(offsets)
        src_nodes = src_nodes.split_with_sizes(src_sizes)
        indptrs = indptr.split_with_sizes([n + 1 for n in dst_sizes])
        edges = indices.split_with_sizes(_diffs(edge_offsets))
        per_layer.append(
            [Block(src_nodes=s, num_dst=n, indptr=p, indices=i, layout=None, trusted=True)  # see module docstring
             for s, n, p, i in zip(src_nodes, dst_sizes, indptrs, edges)]
        )
        dst, dst_sizes = src_positions, src_sizes
    inputs = dst.split_with_sizes(dst_sizes)
    return [
        Blocks(layers=tuple(layer[k] for layer in reversed(per_layer)), input_positions=inputs[k])
        for k in range(len(sizes))
    ]


def _diffs(offsets: list[int]) -> list[int]:
    return [b - a for a, b in zip(offsets, offsets[1:])]


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
