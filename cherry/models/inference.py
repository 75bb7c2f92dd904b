"""Layer-wise full-neighbour inference: the evaluation every system shares.

Sampled evaluation depends on the evaluation batch size; full-neighbour inference does not. Layer
``l`` is computed for *all* nodes from layer ``l - 1``'s outputs of all nodes, one chunk of
destination nodes at a time, each chunk a one-layer block with every in-neighbour. Results do not
depend on the chunk sizes, which callers choose to fit their memory budget.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from cherry.data import Graph
from cherry.sampling import NeighborSampler

DEFAULT_CHUNK = 1 << 16


@torch.no_grad()
def layerwise_inference(model: torch.nn.Module, graph: Graph, features: torch.Tensor,
                        device: torch.device | str = "cpu",
                        chunk_size: Optional[Callable[[int], int]] = None) -> torch.Tensor:
    """Logits of every node (``[num_nodes, num_classes]``, on the CPU), full neighbourhoods.

    ``model`` must expose ``forward_layer(index, block, h)`` and ``spec`` (`cherry.models.BlockModel`)
    or be an MLP (``spec.uses_graph`` False, ``forward_rows``), applied to the features directly.
    ``chunk_size(layer)`` gives the destinations per chunk of each layer (default 65,536).
    """
    was_training = model.training
    model.eval()
    try:
        n = graph.num_nodes
        if not getattr(model.spec, "uses_graph", True):
            return torch.cat([model.forward_rows(features[i:i + DEFAULT_CHUNK].to(device)).cpu()
                              for i in range(0, n, DEFAULT_CHUNK)])
        sampler = NeighborSampler(graph, [-1])
        h = features
        for layer in range(model.spec.num_layers):
            size = max(1, chunk_size(layer)) if chunk_size is not None else DEFAULT_CHUNK
            outs = []
            for start in range(0, n, size):
                seeds = torch.arange(start, min(start + size, n), dtype=torch.int64)
                block = sampler.sample(seeds, torch.Generator()).layers[0]
                x = h.index_select(0, block.src_nodes).to(device)
                outs.append(model.forward_layer(layer, block.to(device), x).cpu())
            h = torch.cat(outs)
        return h
    finally:
        model.train(was_training)
