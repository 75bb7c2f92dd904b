"""`from_pyg`: a PyG model in the per-hop bipartite form as a Cherry model (see `cherry.interop`)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from cherry.models.exact_dropout import node_rows
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


class PyGModel(nn.Module):
    """A PyG ``model(x, adjs)`` called as ``wrapper(cherry_blocks, x)``."""

    _cherry_node_rows = True  # it enters the node-row context itself (the guard adds no hooks)

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"from_pyg needs a torch.nn.Module called as model(x, adjs), got {type(model).__name__}")
        self.inner = model

    def layer_graphs(self, blocks: Blocks) -> list:
        """The per-hop adjacencies the inner model is called with, input layer first: recomputation
        (`cherry.execution.recompute`) takes a module called with one of them for a layer unit."""
        return to_pyg_adjs(blocks)

    def input_layer(self):
        """Layer 0's stock module and its input projections, or None and the reason it does not
        stream (`cherry.interop.projections`): what the streamed input layer takes."""
        from cherry.interop.projections import input_layer

        return input_layer(self.inner)

    def forward(self, blocks: Blocks, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(blocks, Blocks):
            raise TypeError(f"blocks must be cherry.sampling.Blocks, got {type(blocks).__name__}")
        with node_rows(blocks):
            return self.inner(x, self.layer_graphs(blocks))


def from_pyg(model: nn.Module) -> PyGModel:
    """Wrap a PyG model written as ``forward(x, adjs)`` (per-hop bipartite form) for Cherry."""
    from cherry.execution.exactness import guard_model

    return guard_model(PyGModel(model))
