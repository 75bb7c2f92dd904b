"""GraphSAGE layer on a `Block` with DGL ``SAGEConv`` semantics.

``h_dst' = W_self h_dst + W_neigh AGG({h_u : u -> dst}) + b`` with
- ``mean``: the mean of the neighbours' rows (``csr_aggregate(..., "mean")``). When the layer narrows
  the rows (``in_dim > out_dim``) ``W_neigh`` is applied before aggregating, as DGL does: linear maps
  commute with the mean, and edges then carry ``out_dim`` instead of ``in_dim`` values;
- ``pool``: the element-wise max over neighbours of ``ReLU(W_pool h_u + b_pool)``;
- ``lstm``: the final hidden state of an LSTM run over the neighbours in their sampled order.
Destinations without in-edges aggregate to zeros, so their output is ``W_self h_dst + b``.
Every term depends only on the destination's own row and its own in-edges in order: exact under slicing.
"""
from __future__ import annotations

import torch
from torch import nn

from cherry.models.spec import SAGE_AGGREGATORS
from cherry.ops import csr_aggregate
from cherry.sampling.blocks import Block


def lstm_aggregate(lstm: nn.LSTM, indptr: torch.Tensor, indices: torch.Tensor, h_src: torch.Tensor) -> torch.Tensor:
    """Final LSTM hidden state over each destination's neighbour rows, in CSC order.

    Destinations are batched by in-degree: all destinations with degree ``d`` form one
    ``[n_d, d, in_dim]`` sequence batch, so the LSTM runs once per distinct degree (at most the fanout).
    Zero-degree destinations get zeros. Returns ``[num_dst, lstm.hidden_size]``.
    """
    num_dst = indptr.numel() - 1
    deg = indptr[1:] - indptr[:-1]
    out = h_src.new_zeros((num_dst, lstm.hidden_size))
    rows, dst_ids = [], []
    for d in torch.unique(deg).tolist():
        if d == 0:
            continue
        dst = torch.nonzero(deg == d).flatten()
        # Edge positions of each destination's segment, in sampled order: [n_d, d].
        edge_pos = indptr.index_select(0, dst).unsqueeze(1) + torch.arange(d, device=indptr.device)
        seq = h_src.index_select(0, indices[edge_pos.flatten()]).view(dst.numel(), d, h_src.shape[1])
        _, (h_n, _) = lstm(seq)
        rows.append(h_n[-1])
        dst_ids.append(dst)
    if rows:
        out = out.index_copy(0, torch.cat(dst_ids), torch.cat(rows))
    return out


class SAGEConv(nn.Module):
    """One GraphSAGE layer: ``[block.num_src, in_dim] -> [block.num_dst, out_dim]``."""

    def __init__(self, in_dim: int, out_dim: int, aggr: str = "mean") -> None:
        super().__init__()
        if aggr not in SAGE_AGGREGATORS:
            raise ValueError(f"aggr must be one of {SAGE_AGGREGATORS}, got {aggr!r}")
        self.in_dim, self.out_dim, self.aggr = in_dim, out_dim, aggr
        self.fc_self = nn.Linear(in_dim, out_dim, bias=False)
        # No bias on W_neigh: a zero aggregate must stay zero when W_neigh runs before aggregation.
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        if aggr == "pool":
            self.fc_pool = nn.Linear(in_dim, in_dim)
        elif aggr == "lstm":
            self.lstm = nn.LSTM(in_dim, in_dim, batch_first=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)
        nn.init.zeros_(self.bias)
        if self.aggr == "pool":
            nn.init.xavier_uniform_(self.fc_pool.weight, gain=gain)
            nn.init.zeros_(self.fc_pool.bias)
        elif self.aggr == "lstm":
            self.lstm.reset_parameters()

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        h_dst = h[: block.num_dst]
        if self.aggr == "mean":
            if self.in_dim > self.out_dim:
                neigh = csr_aggregate(block.indptr, block.indices, self.fc_neigh(h), "mean")
            else:
                neigh = self.fc_neigh(csr_aggregate(block.indptr, block.indices, h, "mean"))
        elif self.aggr == "pool":
            pooled = torch.relu(self.fc_pool(h))
            neigh = self.fc_neigh(csr_aggregate(block.indptr, block.indices, pooled, "max"))
        else:
            neigh = self.fc_neigh(lstm_aggregate(self.lstm, block.indptr, block.indices, h))
        return self.fc_self(h_dst) + neigh + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, aggr={self.aggr!r}"
