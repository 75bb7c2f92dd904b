"""Betty's algorithm (ASPLOS'23), reimplemented from its description: redundancy-embedded graph (REG)
partitioning of the output layer, top-down block rebuilding, and its LSTM memory estimate.

- `coneighbour_graph`: ``C = A^T A`` over the output layer's seeds, where ``A[u, i]`` counts sampled
  edges ``u -> seed i`` in the last block; ``C[i, j]`` is the number of in-neighbours seeds ``i`` and
  ``j`` share. Self-loops are removed. Its size grows with the square of hub out-degrees.
- `partition_seeds`: METIS on ``C`` *unweighted*, as in the published artifact (it drops the edge
  weights; confirmed by Betty's author in the repository's issue #3), so METIS balances seed counts and
  minimises the number of cut co-neighbour pairs, not memory. Only the output layer is partitioned.
- `rebuild_blocks`: for one part, the blocks are rebuilt top-down with a straightforward per-layer
  in-edge extraction written here (not cherry's native slicer): destinations first, then the new
  sources in first-use order, which become the next lower layer's destinations.
- `lstm_estimate_bytes`: ``sum_d d * count_d * H * 18 * 4`` per layer ("18 intermediate tensors per
  element"); ``sum_d d * count_d`` is the layer's edge count, ``H`` the LSTM width (the layer's input).
"""
from __future__ import annotations

import numpy as np
import pymetis
import scipy.sparse as sp
import torch

from cherry.models import ModelSpec
from cherry.sampling import Block, Blocks

BYTES_PER_FLOAT = 4
LSTM_TENSORS_PER_ELEMENT = 18


def coneighbour_graph(block: Block) -> sp.csr_matrix:
    """The ``num_dst x num_dst`` co-neighbour matrix of ``block``'s destinations (symmetric, int64,
    zero diagonal, explicit zeros removed)."""
    if not isinstance(block, Block):
        raise TypeError(f"block must be a cherry.sampling.Block, got {type(block).__name__}")
    num_dst = block.num_dst
    deg = block.in_degrees().numpy()
    dst_of_edge = np.repeat(np.arange(num_dst, dtype=np.int64), deg)
    src_of_edge = block.indices.numpy()
    data = np.ones(src_of_edge.shape[0], dtype=np.int64)
    a = sp.csr_matrix((data, (src_of_edge, dst_of_edge)), shape=(block.num_src, num_dst))
    c = (a.T @ a).tocsr()
    c.setdiag(0)
    c.eliminate_zeros()
    c.sort_indices()
    return c


def partition_seeds(block: Block, num_parts: int) -> list[torch.Tensor]:
    """Split the output block's destinations into at most ``num_parts`` non-empty parts with METIS on
    the unweighted co-neighbour graph. Each part lists destination positions in increasing order; the
    parts together cover every position exactly once. ``num_parts`` is capped at the seed count."""
    if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
        raise ValueError(f"num_parts must be an int >= 1, got {num_parts!r}")
    num_dst = block.num_dst
    k = min(num_parts, num_dst)
    if k <= 1:
        return [torch.arange(num_dst, dtype=torch.int64)]
    c = coneighbour_graph(block)
    adjacency = pymetis.CSRAdjacency(c.indptr.astype(np.int64), c.indices.astype(np.int64))
    membership = np.asarray(pymetis.part_graph(k, adjacency).vertex_part, dtype=np.int64)
    parts = []
    for p in range(k):
        positions = np.flatnonzero(membership == p)
        if positions.size:  # METIS may leave a part empty on tiny or edgeless graphs
            parts.append(torch.from_numpy(positions.astype(np.int64)))
    return parts


def extract_layer(parent: Block, dst_positions: torch.Tensor) -> tuple[Block, torch.Tensor]:
    """The sub-block of ``parent`` for the destinations at ``dst_positions`` (positions into the
    parent's destinations) with all of their in-edges in order, and the parent positions of its
    sources: the destinations first, then each new source in order of first use."""
    num_dst = int(dst_positions.numel())
    starts = parent.indptr.index_select(0, dst_positions)
    deg = parent.indptr.index_select(0, dst_positions + 1) - starts
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(deg, 0, out=indptr[1:])
    num_edges = int(indptr[-1])
    # Parent edge position of each kept edge: its destination's start plus its offset in the segment.
    edge_pos = torch.repeat_interleave(starts - indptr[:-1], deg) + torch.arange(num_edges, dtype=torch.int64)
    src = parent.indices.index_select(0, edge_pos)
    local = torch.full((parent.num_src,), -1, dtype=torch.int64)
    local[dst_positions] = torch.arange(num_dst, dtype=torch.int64)
    new = src[local.index_select(0, src) < 0]
    uniq, inverse = torch.unique(new, return_inverse=True)
    first_use = torch.full((uniq.numel(),), new.numel(), dtype=torch.int64)
    first_use.scatter_reduce_(0, inverse, torch.arange(new.numel(), dtype=torch.int64), reduce="amin")
    new_sources = uniq.index_select(0, torch.argsort(first_use))
    local[new_sources] = torch.arange(num_dst, num_dst + new_sources.numel(), dtype=torch.int64)
    src_positions = torch.cat([dst_positions, new_sources])
    block = Block(src_nodes=parent.src_nodes.index_select(0, src_positions), num_dst=num_dst,
                  indptr=indptr, indices=local.index_select(0, src))
    return block, src_positions


def rebuild_blocks(blocks: Blocks, seed_positions: torch.Tensor) -> Blocks:
    """The micro-batch of the seeds at ``seed_positions`` rebuilt top-down from ``blocks`` (same result
    as `cherry.sampling.slice_blocks`, computed independently), with ``input_positions`` set."""
    if not isinstance(blocks, Blocks):
        raise TypeError(f"blocks must be a cherry.sampling.Blocks, got {type(blocks).__name__}")
    if seed_positions.dtype != torch.int64 or seed_positions.dim() != 1:
        raise ValueError(f"seed_positions must be a 1-D int64 tensor, got {seed_positions.dtype} "
                         f"of shape {tuple(seed_positions.shape)}")
    if seed_positions.numel() and (int(seed_positions.min()) < 0 or int(seed_positions.max()) >= blocks.num_seeds):
        raise ValueError(f"seed_positions must lie in [0, {blocks.num_seeds})")
    layers = []
    dst = seed_positions
    for parent in reversed(blocks.layers):
        block, dst = extract_layer(parent, dst)
        layers.append(block)
    return Blocks(layers=tuple(reversed(layers)), input_positions=dst)


def lstm_estimate_bytes(num_edges: tuple[int, ...], spec: ModelSpec) -> int:
    """Betty's LSTM memory estimate of one (micro-)batch with ``num_edges[l]`` edges in layer ``l``
    (input layer first): per layer, edges x LSTM width x 18 x 4 bytes."""
    dims = spec.layer_dims()
    if len(dims) != len(num_edges):
        raise ValueError(f"spec has {len(dims)} layers but {len(num_edges)} edge counts were given; "
                         "they must be equal")
    return sum(e * d.aggregate_dim * LSTM_TENSORS_PER_ELEMENT * BYTES_PER_FLOAT for e, d in zip(num_edges, dims))
