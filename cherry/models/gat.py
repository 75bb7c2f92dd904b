"""GAT layer on a `Block` (DGL ``GATConv`` semantics, no self-loops added).

Per head ``k``: ``z_u = W_k h_u``; for an edge ``u -> v``,
``e_uv = leaky_relu(a_l,k . z_u + a_r,k . z_v, 0.2)``; ``alpha_uv = softmax of e over v's in-edges``;
``h_v' = sum_u alpha_uv z_u + b_k``. Hidden layers concatenate the heads (``heads * out_dim`` wide), the
last layer averages them (``out_dim`` wide).

No self-loop is added: a destination attends only to its sampled in-edges (if the graph has a self-loop,
sampling may include it like any other edge). A destination with no in-edges outputs ``b`` (the empty
softmax contributes nothing). The softmax runs over the destination's own in-edges only, so the output is
exact under slicing.

Memory per edge is O(heads) (logits, attention weights): the weighted sum over in-edges runs in the
fused `cherry.ops.attention_aggregate_block`, which never holds per-edge messages of width F.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from cherry.ops import attention_aggregate_block, edge_softmax_block
from cherry.sampling.blocks import Block


class GATConv(nn.Module):
    """One GAT layer: ``[block.num_src, in_dim] -> [block.num_dst, heads * out_dim or out_dim]``."""

    def __init__(self, in_dim: int, out_dim: int, heads: int, concat: bool, negative_slope: float = 0.2) -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.heads, self.concat = in_dim, out_dim, heads, concat
        self.negative_slope = negative_slope
        self.fc = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_r = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads, out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)
        nn.init.zeros_(self.bias)

    def input_projections(self) -> dict[str, str]:
        """``fc`` maps every input row first: streamable (`cherry.execution.stream`) when it narrows them."""
        return {"fc": "src"} if self.in_dim > self.heads * self.out_dim else {}

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        num_dst, heads, out_dim = block.num_dst, self.heads, self.out_dim
        z = self.fc(h).view(-1, heads, out_dim)  # [S, H, F]
        score_src = (z * self.attn_l).sum(-1)  # [S, H]
        score_dst = (z[:num_dst] * self.attn_r).sum(-1)  # [D, H]: destinations are the first sources
        deg = block.in_degrees()
        # output_size (the edge count, host metadata) spares the device read-back of sum(deg)
        edge_dst = torch.repeat_interleave(torch.arange(num_dst, device=deg.device), deg,
                                           output_size=block.indices.numel())
        logits = F.leaky_relu(
            score_src.index_select(0, block.indices) + score_dst.index_select(0, edge_dst), self.negative_slope
        )
        alpha = edge_softmax_block(block, logits)  # [E, H]
        # Fused u_mul_e_sum: no [E, H, F] message tensor in forward or backward.
        out = attention_aggregate_block(block, z, alpha) + self.bias  # [D, H, F]
        return out.flatten(1) if self.concat else out.mean(1)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, heads={self.heads}, concat={self.concat}"
