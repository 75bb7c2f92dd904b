"""`from_dgl`: a DGL model (``dgl.nn`` layers on DGL blocks) as a Cherry model (see `cherry.interop`).

DGL is imported through `cherry.compat.import_dgl` (plain ``import dgl`` fails on this torch: see
`cherry.compat.dgl`), and only when a DGL model is wrapped or run.
"""
from __future__ import annotations

import torch
from torch import nn

from cherry.models.exact_dropout import node_rows
from cherry.sampling.blocks import Blocks


def to_dgl_blocks(blocks: Blocks) -> list:
    """Cherry's `Blocks` as a list of DGL blocks (input layer first), same adjacency and edge order;
    ``srcdata``/``dstdata`` carry the global ids under ``dgl.NID``."""
    from cherry.compat import import_dgl

    dgl = import_dgl()
    out = []
    for blk in blocks.layers:
        # explicit edge ids (CSC order): DGL's libxsmm SpMM path refuses a CSC without them
        eids = torch.arange(blk.num_edges, dtype=torch.int64, device=blk.indptr.device)
        g = dgl.create_block(("csc", (blk.indptr, blk.indices, eids)), num_src_nodes=blk.num_src,
                             num_dst_nodes=blk.num_dst, idtype=torch.int64, device=blk.indptr.device)
        g.srcdata[dgl.NID] = blk.src_nodes
        g.dstdata[dgl.NID] = blk.dst_nodes
        out.append(g)
    return out


class DGLModel(nn.Module):
    """A DGL ``model(dgl_blocks, x)`` called as ``wrapper(cherry_blocks, x)``."""

    _cherry_node_rows = True  # it enters the node-row context itself (the guard adds no hooks)

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"from_dgl needs a torch.nn.Module called as model(blocks, x), got {type(model).__name__}")
        self.inner = model

    def layer_graphs(self, blocks: Blocks) -> list:
        """The DGL blocks the inner model is called with, input layer first: recomputation
        (`cherry.execution.recompute`) takes a module called with one of them for a layer unit."""
        return to_dgl_blocks(blocks)

    def input_layer(self):
        """Layer 0's stock module and its input projections, or None and the reason it does not
        stream (`cherry.interop.projections`): what the streamed input layer takes."""
        from cherry.interop.projections import input_layer

        return input_layer(self.inner)

    def forward(self, blocks: Blocks, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(blocks, Blocks):
            raise TypeError(f"blocks must be cherry.sampling.Blocks, got {type(blocks).__name__}")
        with node_rows(blocks):
            return self.inner(self.layer_graphs(blocks), x)


def from_dgl(model: nn.Module) -> DGLModel:
    """Wrap a DGL model for Cherry; its ``nn.Dropout`` s become exact, BatchNorm is refused
    (`cherry.execution.exactness.guard_model`)."""
    from cherry.execution.exactness import guard_model

    return guard_model(DGLModel(model))
