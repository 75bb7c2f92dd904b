"""`MLP`: the features-only baseline, with the same interface as the graph models.

``model(blocks, x)`` reads only the seeds' own rows of ``x``: destinations are a prefix of sources at
every layer, so the seeds are the first ``blocks.num_seeds`` input nodes. Edges are ignored, which makes
it the accuracy floor a graph model must beat (OGB's MLP rows).
"""
from __future__ import annotations

import torch
from torch import nn

from cherry.models.base import check_features
from cherry.models.dropout import NodeDropout
from cherry.models.spec import ModelSpec
from cherry.sampling.blocks import Blocks


class MLP(nn.Module):
    """``num_layers`` linear layers, ReLU + dropout between them."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if not isinstance(spec, ModelSpec):
            raise TypeError(f"spec must be a ModelSpec, got {type(spec).__name__}")
        self.spec = spec
        self.layers = nn.ModuleList(nn.Linear(d.in_dim, d.out_dim) for d in spec.layer_dims())
        self.dropout = NodeDropout(spec.dropout)

    def forward_rows(self, x: torch.Tensor, nodes: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the rows of ``x`` (``[N, in_dim] -> [N, num_classes]``), for full-graph evaluation;
        ``nodes``: the rows' global ids, which key the dropout masks (see `NodeDropout`)."""
        h = x
        for index, layer in enumerate(self.layers):
            h = layer(h)
            if index < len(self.layers) - 1:
                h = self.dropout(torch.relu(h), nodes, index)
        return h

    def forward(self, blocks: Blocks, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(blocks, Blocks):
            raise TypeError(f"blocks must be cherry.sampling.Blocks, got {type(blocks).__name__}")
        check_features(x, blocks.layers[0].num_src, self.spec.in_dim)
        return self.forward_rows(x[: blocks.num_seeds], blocks.seeds)
