"""GraphSAGE layer on a `Block` with DGL ``SAGEConv`` semantics.

``h_dst' = W_self h_dst + W_neigh AGG({h_u : u -> dst}) + b`` with
- ``mean``: the mean of the neighbours' rows (``csr_aggregate(..., "mean")``). When the layer narrows
  the rows (``in_dim > out_dim``) ``W_neigh`` is applied before aggregating, as DGL does: linear maps
  commute with the mean, and edges then carry ``out_dim`` instead of ``in_dim`` values;
- ``pool``: the element-wise max over neighbours of ``ReLU(W_pool h_u + b_pool)``;
- ``lstm``: the final hidden state of an LSTM run over the neighbours in their sampled order (packed:
  one LSTM call per layer; bucketed by degree, see `lstm_aggregate_bucketed`; or an explicit step
  loop, `cherry.models.lstm_steps`).
Destinations without in-edges aggregate to zeros, so their output is ``W_self h_dst + b``.
Every term depends only on the destination's own row and its own in-edges in order: exact under slicing.
"""
from __future__ import annotations

import torch
from torch import nn

from torch.nn.utils.rnn import PackedSequence

from cherry.models.lstm_steps import lstm_aggregate_steps
from cherry.models.spec import LSTM_IMPLS, SAGE_AGGREGATORS, resolve_lstm_impl
from cherry.ops import aggregate_block
from cherry.sampling.blocks import Block
from cherry.sampling.layout import DegreeLayout


def reads_degree_layouts(model: nn.Module) -> bool:
    """Whether ``model`` aggregates with an LSTM, the only reader of `Block.layout` (the packed and
    step-loop LSTMs order destinations by it): a caller that moves or prepares blocks ahead of the
    step makes their layouts there, so the step itself reads no degrees back."""
    return any(isinstance(m, nn.LSTM) for m in model.modules())


def lstm_aggregate(lstm: nn.LSTM, block: Block, h_src: torch.Tensor) -> torch.Tensor:
    """Final LSTM hidden state over each destination's neighbour rows (CSC order), in one call.

    The non-empty neighbour lists are packed (`PackedSequence`, time-major) with the destinations in
    descending in-degree order from ``block.layout`` (computed on the host when the block was made), so
    the LSTM runs ``max degree`` time steps once for all destinations and nothing is read back from
    the device. Zero-degree destinations get zeros. Returns ``[num_dst, lstm.hidden_size]``.
    """
    layout = block.layout if block.layout is not None else DegreeLayout.of(block.indptr)
    out = h_src.new_zeros((block.num_dst, lstm.hidden_size))
    if layout.num_sequences == 0:
        return out
    edges = block.indices.index_select(0, layout.packed_edge_positions(block.indptr))
    packed = PackedSequence(h_src.index_select(0, edges), layout.batch_sizes)
    _, (h_n, _) = lstm(packed)
    return out.index_copy(0, layout.order, h_n[-1])


def lstm_aggregate_bucketed(lstm: nn.LSTM, indptr: torch.Tensor, indices: torch.Tensor, h_src: torch.Tensor) -> torch.Tensor:
    """`lstm_aggregate` as one LSTM call per distinct in-degree (the earlier implementation).

    Destinations with degree ``d`` form one ``[n_d, d, in_dim]`` sequence batch. Reads the distinct
    degrees and each bucket's members back from the device (host syncs); kept to compare with the
    packed version (same function, same gradients).
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

    def __init__(self, in_dim: int, out_dim: int, aggr: str = "mean", lstm_impl: str = "auto") -> None:
        super().__init__()
        if aggr not in SAGE_AGGREGATORS:
            raise ValueError(f"aggr must be one of {SAGE_AGGREGATORS}, got {aggr!r}")
        if lstm_impl not in LSTM_IMPLS:
            raise ValueError(f"lstm_impl must be one of {LSTM_IMPLS}, got {lstm_impl!r}")
        self.in_dim, self.out_dim, self.aggr, self.lstm_impl = in_dim, out_dim, aggr, lstm_impl
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

    def input_projections(self) -> dict[str, str]:
        """With the mean aggregator and ``in_dim > out_dim``, ``fc_neigh`` maps every input row before
        aggregating and ``fc_self`` the destination rows: streamable (`cherry.execution.stream`)."""
        return {"fc_neigh": "src", "fc_self": "dst"} if self.aggr == "mean" and self.in_dim > self.out_dim else {}

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        h_dst = h[: block.num_dst]
        if self.aggr == "mean":
            if self.in_dim > self.out_dim:
                neigh = aggregate_block(block, self.fc_neigh(h), "mean")
            else:
                neigh = self.fc_neigh(aggregate_block(block, h, "mean"))
        elif self.aggr == "pool":
            pooled = torch.relu(self.fc_pool(h))
            neigh = self.fc_neigh(aggregate_block(block, pooled, "max"))
        else:
            impl = resolve_lstm_impl(self.lstm_impl, h.device.type)
            if impl == "steps":
                agg = lstm_aggregate_steps(self.lstm, block, h)
            elif impl == "packed":
                agg = lstm_aggregate(self.lstm, block, h)
            else:
                agg = lstm_aggregate_bucketed(self.lstm, block.indptr, block.indices, h)
            neigh = self.fc_neigh(agg)
        return self.fc_self(h_dst) + neigh + self.bias

    def extra_repr(self) -> str:
        impl = f", lstm_impl={self.lstm_impl!r}" if self.aggr == "lstm" else ""
        return f"{self.in_dim}, {self.out_dim}, aggr={self.aggr!r}{impl}"
