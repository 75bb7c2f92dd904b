"""`ExactDropout`: a drop-in ``nn.Dropout`` for a user's layer that is exact across micro-batches.

A plain ``nn.Dropout`` draws a fresh mask per call, so a node's row gets a different mask in each
micro-batch that holds it and the accumulated gradient is no longer the whole batch's. `ExactDropout`
draws the mask of a row from the row's global node id (`cherry.models.dropout.apply_dropout`), like
`NodeDropout`, but finds the ids itself. Whoever runs a layer on a block (`BlockModel`, the DGL and
PyG adapters) enters `node_rows(block, layer)`. A tensor of ``R`` rows is taken to hold the rows
of ``block.src_nodes[:R]`` when ``R`` is the block's source or destination count (destinations are a
prefix of the sources, so both cases agree). Any other row count (edges, say) is not node rows: a
one-line ValueError. The k-th dropout call inside a layer gets masks of its own (seeded by layer and
k), so two dropouts in one layer are independent. Without a step seed
(a model trained outside the executor), it is ``F.dropout``; in a micro-batched step outside a block
context it refuses (one line), since it could not be exact there.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Optional

import torch
from torch.nn import functional as F

from cherry.models.dropout import NodeDropout, apply_dropout

_CONTEXT: contextvars.ContextVar = contextvars.ContextVar("cherry_node_rows", default=None)
_CALL_SEED_BASE = 1 << 20  # keeps these masks apart from NodeDropout's (layer indices are small)


@contextlib.contextmanager
def node_rows(block, layer: int = 0):
    """While inside, `ExactDropout` reads the node ids of its rows from ``block`` (a `Block`, layer
    ``layer``) or from a whole `Blocks` (every layer's source and destination counts are node-row
    counts, all prefixes of the input nodes)."""
    if hasattr(block, "layers"):
        src = block.layers[0].src_nodes
        sizes = {n for blk in block.layers for n in (blk.num_src, blk.num_dst)}
    else:
        src, sizes = block.src_nodes, {block.num_src, block.num_dst}
    token = _CONTEXT.set([src, frozenset(sizes), int(layer), 0])
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def node_rows_replay():
    """A context manager factory that re-enters the node-row context as it is now, its count of
    dropout calls included: a layer unit recomputed in backward (outside the forward's context) then
    draws the same masks as its forward did. The forward's own context is left as it is."""
    context = _CONTEXT.get()
    saved = None if context is None else list(context)

    @contextlib.contextmanager
    def replay():
        token = _CONTEXT.set(None if saved is None else list(saved))
        try:
            yield
        finally:
            _CONTEXT.reset(token)

    return replay


class ExactDropout(NodeDropout):
    """``nn.Dropout(p)`` whose masks depend on node ids, not on the micro-batch (module docstring)."""

    def forward(self, h: torch.Tensor, nodes: Optional[torch.Tensor] = None, layer: int = 0) -> torch.Tensor:
        if nodes is not None:  # called like NodeDropout
            return super().forward(h, nodes, layer)
        if not self.training or self.p == 0.0:
            return h
        if self.step_seed is None:
            return F.dropout(h, self.p, True)
        nodes, seed_layer = self.mask_of(h.shape[0])
        flat = h.reshape(h.shape[0], -1)
        return apply_dropout(flat, nodes, self.p, self.step_seed, seed_layer).reshape(h.shape)

    def mask_of(self, rows: int) -> tuple[torch.Tensor, int]:
        """``(node ids, mask layer)`` of this call's mask on ``rows`` node rows, counted as one call of
        the context (the next call gets masks of its own): what `apply_dropout` takes. The streamed
        input layer applies that mask chunk by chunk instead (`cherry.execution.stream`)."""
        context = _CONTEXT.get()
        if context is None:
            raise ValueError("ExactDropout ran in a micro-batched step outside a layer: its rows' node ids are "
                             "unknown; run each layer inside cherry.models.node_rows(block, layer) (BlockModel "
                             "and cherry.interop do) or use NodeDropout(p)(h, block.dst_nodes, layer)")
        src, sizes, layer_index, calls = context
        if rows not in sizes:
            raise ValueError(f"dropout on a tensor of {rows} rows in layer {layer_index}, whose node-row counts "
                             f"are {sorted(sizes)}: only node rows can be dropped exactly; apply dropout to "
                             "node features")
        context[3] += 1
        return src[:rows], _CALL_SEED_BASE + layer_index * 64 + calls
