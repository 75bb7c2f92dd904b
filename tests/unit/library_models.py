"""Users' DGL and PyG models for the tests: two-layer nets in each library's own form, built from the
layers a test names, skipping in one line where the library is missing."""
from __future__ import annotations

from typing import Optional, Sequence

import pytest
import torch
from torch import nn

from cherry.compat import dgl_available, pyg_available


def dgl_nn():
    """``dgl.nn`` (through `cherry.compat.import_dgl`), or skip the test naming why DGL is missing."""
    ok, reason = dgl_available()
    if not ok:
        pytest.skip(reason)
    from cherry.compat import import_dgl

    return import_dgl().nn


def pyg_nn():
    """``torch_geometric.nn``, or skip the test naming why PyG is missing."""
    ok, reason = pyg_available()
    if not ok:
        pytest.skip(reason)
    import torch_geometric.nn

    return torch_geometric.nn


class DGLNet(nn.Module):
    """``model(dgl_blocks, x)``: ``l1``, ReLU, dropout (``norm`` after it, if any), ``l2``; each layer's
    heads flattened into features. ``pre_dropout``: the dropout also on the input features;
    ``pre_scale``: the input features doubled before ``l1`` (a transform streaming cannot reproduce)."""

    def __init__(self, l1: nn.Module, l2: nn.Module, dropout: float, pre_dropout: bool = False,
                 norm: Optional[nn.Module] = None, pre_scale: bool = False) -> None:
        super().__init__()
        self.l1, self.l2, self.drop, self.norm = l1, l2, nn.Dropout(dropout), norm
        self.pre_dropout, self.pre_scale = pre_dropout, pre_scale

    def forward(self, blocks, x):
        x = self.drop(x) if self.pre_dropout else x
        x = 2.0 * x if self.pre_scale else x
        h = self.drop(torch.relu(self.l1(blocks[0], x).flatten(1)))
        h = self.norm(h) if self.norm is not None else h
        return self.l2(blocks[1], h).flatten(1)


class PyGNet(nn.Module):
    """``model(x, adjs)`` in PyG's per-hop bipartite form: each conv called on ``(x, x[:num_dst])`` (or,
    not ``bipartite``, on ``x`` and its output cut to the destinations); ReLU and dropout after the first."""

    def __init__(self, convs: Sequence[nn.Module], dropout: float, bipartite: bool = True) -> None:
        super().__init__()
        self.convs, self.drop, self.bipartite = nn.ModuleList(convs), nn.Dropout(dropout), bipartite

    def forward(self, x, adjs):
        for i, (edge_index, _, size) in enumerate(adjs):
            if self.bipartite:
                x = self.convs[i]((x, x[: size[1]]), edge_index)
            else:
                x = self.convs[i](x, edge_index)[: size[1]]
            if i == 0:
                x = self.drop(x.relu())
        return x
