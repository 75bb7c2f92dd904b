"""The benchmark's models built from DGL's own layers (``dgl.nn``), on DGL blocks.

- ``sage``: ``dgl.nn.SAGEConv`` with aggregator ``mean``, ``pool`` (max over ReLU(W_pool h_u)) or
  ``lstm`` -- the same formulas as Cherry's `cherry.models.sage` (which follows DGL).
- ``gat``: ``dgl.nn.GATConv(in, hidden, heads)``; hidden layers concatenate the heads, the last averages
  them; no self-loops added, as in Cherry.
- ``gcn``: ``dgl.nn.GraphConv(norm="right")`` on blocks to which `with_self_edges` added one edge
  ``d -> d`` per destination. GraphConv's default ``norm="both"`` divides by the *sampled block's*
  source out-degrees, which depend on the batch; ``"right"`` divides the sum by the destination's
  in-degree, which with the added self edge is Cherry's ``(h_dst + sum_u h_u) / (in_degree + 1)``.
  So DGL and Cherry compute the same GCN; the added edge is built per block at sampling time.
Between layers: ReLU, then dropout; nothing after the last layer.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from cherry.models.spec import ModelSpec

DGL_SAGE_AGGREGATORS = {"mean": "mean", "pool": "pool", "lstm": "lstm"}


class DglModel(nn.Module):
    """``model(blocks, x) -> [num_seeds, num_classes]``; `forward_layer` serves layer-wise inference."""

    def __init__(self, dgl, spec: ModelSpec) -> None:
        super().__init__()
        import dgl.nn.pytorch as dglnn

        self.spec = spec
        layers = []
        for dims in spec.layer_dims():
            if spec.model == "sage":
                layers.append(dglnn.SAGEConv(dims.in_dim, dims.out_dim, DGL_SAGE_AGGREGATORS[spec.aggr]))
            elif spec.model == "gcn":
                layers.append(dglnn.GraphConv(dims.in_dim, dims.out_dim, norm="right", allow_zero_in_degree=True))
            elif spec.model == "gat":
                layers.append(dglnn.GATConv(dims.in_dim, dims.head_dim, dims.heads, allow_zero_in_degree=True))
            else:
                raise ValueError(f"model {spec.model!r} has no DGL layers here; expected sage, gcn or gat")
        self.layers = nn.ModuleList(layers)

    @property
    def needs_self_edges(self) -> bool:
        """True when blocks must carry one ``d -> d`` edge per destination (GCN; see module docstring)."""
        return self.spec.model == "gcn"

    def forward_layer(self, index: int, block, h: torch.Tensor) -> torch.Tensor:
        out = self.layers[index](block, h)
        is_last = index == len(self.layers) - 1
        if self.spec.model == "gat":
            out = out.mean(1) if is_last else out.flatten(1)
        if not is_last:
            out = F.dropout(F.relu(out), self.spec.dropout, self.training)
        return out

    def forward(self, blocks, x: torch.Tensor) -> torch.Tensor:
        h = x
        for index, block in enumerate(blocks):
            h = self.forward_layer(index, block, h)
        return h


def with_self_edges(dgl, block):
    """``block`` plus one edge from each destination to itself (sources keep their ids and order)."""
    src, dst = block.edges()
    loop = torch.arange(block.num_dst_nodes(), dtype=src.dtype, device=src.device)
    out = dgl.create_block(
        (torch.cat([src, loop]), torch.cat([dst, loop])),
        num_src_nodes=block.num_src_nodes(), num_dst_nodes=block.num_dst_nodes(), device=block.device,
    )
    out.srcdata[dgl.NID] = block.srcdata[dgl.NID]
    out.dstdata[dgl.NID] = block.dstdata[dgl.NID]
    return out
