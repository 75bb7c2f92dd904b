"""`from_dgl`: a DGL model (``dgl.nn`` layers on DGL blocks) as a Cherry model (see `cherry.interop`).

DGL is imported through `cherry.compat.import_dgl` (plain ``import dgl`` fails on this torch: see
`cherry.compat.dgl`), and only when a DGL model is wrapped or run.
"""
from __future__ import annotations

import torch
from torch import nn

from cherry.interop.adapter import LibraryModel
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


class DGLModel(LibraryModel):
    """A DGL ``model(dgl_blocks, x)`` called as ``wrapper(cherry_blocks, x)``."""

    WRAPPED_BY = "from_dgl"
    CALLED_AS = "model(blocks, x)"

    def layer_graphs(self, blocks: Blocks) -> list:
        """The DGL blocks the inner model is called with, input layer first: recomputation
        (`cherry.execution.recompute`) takes a module called with one of them for a layer unit."""
        return to_dgl_blocks(blocks)

    def call_inner(self, graphs: list, x: torch.Tensor) -> torch.Tensor:
        return self.inner(graphs, x)


def from_dgl(model: nn.Module) -> DGLModel:
    """Wrap a DGL model for Cherry; its ``nn.Dropout`` s become exact, BatchNorm is refused
    (`cherry.execution.exactness.guard_model`)."""
    from cherry.execution.exactness import guard_model

    return guard_model(DGLModel(model))
