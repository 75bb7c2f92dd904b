"""`from_pyg`: a PyG model in the per-hop bipartite form as a Cherry model (see `cherry.interop`)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from cherry.interop.adapter import LibraryModel
from cherry.sampling.blocks import Blocks


class Adj(NamedTuple):
    """One hop as PyG's ``NeighborSampler`` yields it (``torch_geometric.loader.neighbor_sampler.EdgeIndex``)."""

    edge_index: torch.Tensor
    e_id: Optional[torch.Tensor]
    size: tuple[int, int]


def to_pyg_adjs(blocks: Blocks) -> list[Adj]:
    """Cherry's `Blocks` as PyG per-hop adjacencies, input layer first (module docstring of `cherry.interop`)."""
    adjs = []
    for blk in blocks.layers:
        dst = torch.repeat_interleave(torch.arange(blk.num_dst, device=blk.indptr.device), blk.in_degrees(),
                                      output_size=blk.num_edges)
        adjs.append(Adj(torch.stack([blk.indices, dst]), None, (blk.num_src, blk.num_dst)))
    return adjs


class PyGModel(LibraryModel):
    """A PyG ``model(x, adjs)`` called as ``wrapper(cherry_blocks, x)``."""

    WRAPPED_BY = "from_pyg"
    CALLED_AS = "model(x, adjs)"

    def layer_graphs(self, blocks: Blocks) -> list:
        """The per-hop adjacencies the inner model is called with, input layer first: recomputation
        (`cherry.execution.recompute`) takes a module called with one of them for a layer unit."""
        return to_pyg_adjs(blocks)

    def call_inner(self, graphs: list, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, graphs)


def from_pyg(model: nn.Module) -> PyGModel:
    """Wrap a PyG model written as ``forward(x, adjs)`` (per-hop bipartite form) for Cherry."""
    from cherry.execution.exactness import guard_model

    return guard_model(PyGModel(model))
