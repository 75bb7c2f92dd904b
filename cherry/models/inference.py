"""Layer-wise full-neighbour inference: the evaluation every system shares.

Sampled evaluation depends on the evaluation batch size; full-neighbour inference does not. Layer
``l`` is computed for *all* nodes from layer ``l - 1``'s outputs of all nodes, one chunk of
destination nodes at a time, each chunk a one-layer block with every in-neighbour. Results do not
depend on the chunk sizes, which callers choose to fit their memory budget. A chunk that runs out of
device memory (`torch.OutOfMemoryError`, real or emulated) is retried at half the size, and the rest
of the layer keeps the smaller size: evaluation finishes under the capacity that training ran in,
unless one destination alone does not fit. Each layer's outputs are written into one preallocated
host tensor (no concatenation, which would hold every row twice).
"""
from __future__ import annotations

import gc
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

import torch

from cherry import progress
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
        layers = model.spec.num_layers
        for layer in range(layers):
            size = max(1, chunk_size(layer)) if chunk_size is not None else DEFAULT_CHUNK
            with progress.task(f"evaluate layer {layer + 1}/{layers}", n, "node") as shown:
                h = _infer_layer(model, layer, sampler, h, n, size, device, shown.advance)
        return h
    finally:
        model.train(was_training)


def host_rows(n: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """The host buffer of one layer's rows for every node. Host memory, not the device's: allocated on a
    short-lived thread, so that an emulated device (whose tensor tracker counts the calling thread's
    tensors) counts it as a GPU would, not at all; only each chunk's rows are the device's."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(torch.empty, (n, width), dtype=dtype).result()


def _infer_layer(model: torch.nn.Module, layer: int, sampler: NeighborSampler, h: torch.Tensor, n: int,
                 size: int, device, advance: Callable[[int], None] = lambda rows: None) -> torch.Tensor:
    """Layer ``layer`` of every node from ``h``, ``size`` destinations per chunk, halving the size at
    each out-of-memory (re-raised when a single destination does not fit); ``advance(rows)`` after
    each chunk done. The halving starts from the chunk that failed, so a size above ``n`` costs one
    failed attempt, not one per halving down to ``n``."""
    out = None
    start = 0
    while start < n:
        end = min(start + size, n)
        rows = None
        try:
            seeds = torch.arange(start, end, dtype=torch.int64)
            block = sampler.sample(seeds, torch.Generator()).layers[0]
            x = h.index_select(0, block.src_nodes).to(device)
            rows = model.forward_layer(layer, block.to(device), x).cpu()
        except torch.OutOfMemoryError:
            if size == 1:
                raise
        if rows is None:  # handled outside the except block: its traceback pins the chunk's tensors
            block = x = None
            gc.collect()
            if torch.cuda.is_available() and torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
            size = max(1, (end - start) // 2)
            continue
        if out is None:
            out = host_rows(n, rows.shape[1], rows.dtype)
        out[start:end] = rows
        advance(end - start)
        start = end
        del rows, block, x
    return out if out is not None else h.new_empty((0, 0))
