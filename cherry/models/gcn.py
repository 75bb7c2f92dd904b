"""GCN layer on a `Block` (DGL ``GraphConv``-like, right-normalised, with a self term).

``h_dst' = W (h_dst + sum_{u -> dst} h_u) / (in_degree(dst) + 1) + b``

Why right-normalisation by ``in_degree + 1`` and not DGL's default symmetric ``1/sqrt(d_out d_in)``:
inside a sampled block a source's out-degree counts the edges to *all* destinations of the block. When
the batch is sliced into micro-batches, a source keeps only the edges to the micro-batch's destinations,
so its out-degree (and with it every destination's output) would change with the slicing, and the
accumulated gradient would no longer equal the full batch's. The in-degree of a destination is the
number of its own in-edges, which slicing keeps whole, so this normalisation is exact under slicing.
The ``+ 1`` counts the destination itself (the self-loop of ``A + I``), which also keeps zero-degree
destinations well defined (``W h_dst + b``). Sampled neighbour lists may already contain the destination
itself (a self-loop in the graph); that edge is counted like any other.
"""
from __future__ import annotations

import torch
from torch import nn

from cherry.ops import aggregate_block
from cherry.sampling.blocks import Block


class GCNConv(nn.Module):
    """One GCN layer: ``[block.num_src, in_dim] -> [block.num_dst, out_dim]``."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        # No bias inside the linear map: it may run before aggregation (see forward).
        self.fc = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.bias)

    def input_projections(self) -> dict[str, str]:
        """``fc`` maps every input row first when it narrows them: the streamed input layer may compute
        it chunk by chunk (`cherry.execution.stream`)."""
        return {"fc": "src"} if self.in_dim > self.out_dim else {}

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        # Apply W first when it narrows the rows (fewer values per edge), as DGL does; W is linear, so
        # both orders give the same result.
        lin_first = self.in_dim > self.out_dim
        z = self.fc(h) if lin_first else h
        total = aggregate_block(block, z, "sum") + z[: block.num_dst]
        norm = (block.in_degrees() + 1).to(z.dtype).unsqueeze(1)
        out = total / norm
        if not lin_first:
            out = self.fc(out)
        return out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}"
