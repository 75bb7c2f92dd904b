"""The benchmark's models built from PyG's own layers (``torch_geometric.nn``).

- ``sage``: ``SAGEConv(aggr="mean")``; ``pool`` is ``SAGEConv(aggr="max", project=True)``, i.e.
  max over ``ReLU(W_pool h_u + b)`` then ``W_neigh`` -- DGL's pool formula; the one difference is that
  PyG's ``lin_l`` (neighbour map) carries the bias where DGL/Cherry have one separate bias, which is the
  same function. ``lstm`` is ``SAGEConv(aggr="lstm")``: PyG pads every destination's neighbours to the
  largest degree (``to_dense_batch``) and needs edges sorted by destination (ensured here).
- ``gat``: ``GATConv(in, hidden, heads, concat=not last, add_self_loops=False)`` (Cherry/DGL semantics:
  no self-loops; hidden layers concatenate, the last averages).
- ``gcn``: ``GCNConv(normalize=False, add_self_loops=False)`` fed one self edge per node and edge
  weights ``1 / (in_degree(dst) + 1)``: Cherry's right-normalised ``(h_dst + sum_u h_u) / (deg + 1)``.
  GCNConv's own ``gcn_norm`` is symmetric over the *sampled subgraph's* degrees, which depend on the
  batch, so it is switched off.
Between layers: ReLU, then dropout.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from cherry.models.spec import ModelSpec

LSTM_PADDED_ELEMENTS = 1 << 26  # per inference group: rows x max degree x width of PyG's padded LSTM input


class PygModel(nn.Module):
    """``forward_subgraph`` trains on a NeighborLoader subgraph; `forward_layer` serves layer-wise
    inference on a `cherry.sampling.Block` (``cherry.models.inference.layerwise_inference``)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv, SAGEConv

        self.spec = spec
        layers = []
        for dims in spec.layer_dims():
            if spec.model == "sage":
                aggr = {"mean": "mean", "pool": "max", "lstm": "lstm"}[spec.aggr]
                layers.append(SAGEConv(dims.in_dim, dims.out_dim, aggr=aggr, project=spec.aggr == "pool"))
            elif spec.model == "gcn":
                layers.append(GCNConv(dims.in_dim, dims.out_dim, normalize=False, add_self_loops=False))
            elif spec.model == "gat":
                layers.append(GATConv(dims.in_dim, dims.head_dim, heads=dims.heads, concat=not dims.is_last,
                                      add_self_loops=False))
            else:
                raise ValueError(f"model {spec.model!r} has no PyG layers here; expected sage, gcn or gat")
        self.layers = nn.ModuleList(layers)

    def _conv(self, index: int, x, edge_index: torch.Tensor, num_dst: int) -> torch.Tensor:
        """Layer ``index`` for destinations ``0..num_dst-1``; ``x`` is a tensor (homogeneous) or a
        ``(x_src, x_dst)`` pair (bipartite). Edges run ``edge_index[0] -> edge_index[1]``."""
        conv = self.layers[index]
        if self.spec.model == "gcn":  # homogeneous only: rows of x are the nodes
            num_nodes = x.shape[0]
            deg = torch.bincount(edge_index[1], minlength=num_nodes)
            loop = torch.arange(num_nodes, device=edge_index.device)
            ei = torch.cat([edge_index, torch.stack([loop, loop])], dim=1)
            weight = (deg + 1).to(x.dtype).reciprocal().index_select(0, ei[1])
            return conv(x, ei, weight)[:num_dst]
        if self.spec.aggr == "lstm":
            edge_index = sort_by_destination(edge_index)
        if isinstance(x, tuple):
            return conv(x, edge_index, size=(x[0].shape[0], num_dst))
        return conv(x, edge_index)[:num_dst]

    def _activate(self, index: int, out: torch.Tensor) -> torch.Tensor:
        if index == len(self.layers) - 1:
            return out
        return F.dropout(F.relu(out), self.spec.dropout, self.training)

    def forward_subgraph(self, x: torch.Tensor, edge_index: torch.Tensor, batch_size: int,
                         num_sampled_nodes=None, num_sampled_edges=None) -> torch.Tensor:
        """Logits of the first ``batch_size`` nodes of a NeighborLoader subgraph. With per-hop counts
        (pyg-lib), ``trim_to_layer`` drops the hops a layer no longer needs; without them (torch-sparse)
        every layer runs on the whole subgraph, PyG's plain behaviour."""
        from torch_geometric.utils import trim_to_layer

        h = x
        for index in range(len(self.layers)):
            if num_sampled_nodes is not None and num_sampled_edges is not None:
                h, edge_index, _ = trim_to_layer(index, num_sampled_nodes, num_sampled_edges, h, edge_index)
            h = self._activate(index, self._conv(index, h, edge_index, h.shape[0]))
        return h[:batch_size]

    def forward_edges(self, index: int, h: torch.Tensor, edge_index: torch.Tensor, num_dst: int) -> torch.Tensor:
        """Layer ``index`` as PyG calls it, on rows ``h`` (destinations ``0..num_dst-1`` first) and edges
        ``edge_index`` (row of ``h`` -> destination); an LSTM pads each destination to the largest degree."""
        x = h if self.spec.model == "gcn" else (h, h[:num_dst])
        return self._activate(index, self._conv(index, x, edge_index, num_dst))

    def forward_layer(self, index: int, block, h: torch.Tensor) -> torch.Tensor:
        """Layer ``index`` on a Cherry `Block`: ``h`` has ``block.num_src`` rows, destinations first."""
        dst = torch.repeat_interleave(torch.arange(block.num_dst, device=h.device), block.in_degrees())
        edge_index = torch.stack([block.indices, dst])
        if self.spec.aggr != "lstm":
            return self.forward_edges(index, h, edge_index, block.num_dst)
        # PyG's LSTM runs over each destination's neighbours zero-padded to the batch's largest degree,
        # so its result depends on the batch. Here each group holds one degree (no padding: the LSTM
        # over exactly the neighbours, as in DGL and Cherry), which also bounds the padded tensor when
        # full-neighbour degrees reach the thousands. A destination without in-edges sees a single
        # zero row, the shortest padding PyG would give it (PyG's LSTM rejects empty sequences).
        deg = block.in_degrees()
        zero_row = h.shape[0]
        x_src = torch.cat([h, h.new_zeros((1, h.shape[1]))])
        padded_deg = deg.clamp(min=1)
        limit_rows = max(1, LSTM_PADDED_ELEMENTS // max(h.shape[1], 1))
        out = None
        for d in torch.unique(padded_deg).tolist():
            same = torch.nonzero(padded_deg == d).flatten()
            for group in torch.split(same, max(1, limit_rows // d)):
                if block.num_edges == 0:
                    src = torch.full((group.numel(),), zero_row, dtype=torch.int64, device=h.device)
                elif d == 1:  # degree-1 and degree-0 destinations share this group
                    first = block.indices[block.indptr.index_select(0, group).clamp(max=block.num_edges - 1)]
                    src = torch.where(deg.index_select(0, group) > 0, first, zero_row)
                else:
                    src = block.indices[_group_edges(block, group)]
                local_dst = torch.arange(group.numel(), device=h.device).repeat_interleave(d)
                res = self._conv(index, (x_src, h.index_select(0, group)), torch.stack([src, local_dst]),
                                 group.numel())
                out = res.new_zeros((block.num_dst, res.shape[1])) if out is None else out
                out[group] = res
        return self._activate(index, out)


def _group_edges(block, group: torch.Tensor) -> torch.Tensor:
    """Edge positions of the destinations ``group``, destination by destination (CSC order kept)."""
    deg = block.in_degrees().index_select(0, group)
    starts = block.indptr.index_select(0, group)
    offsets = torch.arange(int(deg.sum()), device=group.device) - torch.repeat_interleave(
        torch.cumsum(deg, 0) - deg, deg)
    return torch.repeat_interleave(starts, deg) + offsets


def sort_by_destination(edge_index: torch.Tensor) -> torch.Tensor:
    """``edge_index`` with edges stably sorted by destination (PyG's LSTM aggregation requires it)."""
    dst = edge_index[1]
    if dst.numel() < 2 or bool((dst[1:] >= dst[:-1]).all()):
        return edge_index
    return edge_index[:, torch.argsort(dst, stable=True)]
