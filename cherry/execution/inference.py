"""Evaluation under the training budget: layer-wise inference with chunk sizes from the memory model.

One budget covers the whole run. The first chunk size of each layer is the largest power of two
whose one-layer chunk the (calibrated) training memory model says fits the budget. Training prices
what backward keeps, so it over-covers a no-grad forward. An out-of-memory inside the capacity then
halves the chunk and continues (`cherry.models.inference`). So a run that trained under
``--device-memory`` also evaluates under it.
"""
from __future__ import annotations

from typing import Optional

import torch

from cherry.data import Dataset
from cherry.data.metrics import split_accuracy
from cherry.models.inference import DEFAULT_CHUNK, layerwise_inference
from cherry.planning import BatchShape, LayerShape, MemoryModel


def chunk_size_for(dataset: Dataset, memory_model: MemoryModel, layer: int, budget_bytes: Optional[int]) -> int:
    """Largest power of two (<= 65,536) of destinations whose one-layer chunk is estimated to fit."""
    if budget_bytes is None:
        return DEFAULT_CHUNK
    avg_deg = dataset.graph.num_edges / max(dataset.graph.num_nodes, 1)
    model = MemoryModel(costs=(memory_model.costs[layer],), fixed_bytes=memory_model.fixed_bytes,
                        scale=memory_model.scale, floor_bytes=memory_model.floor_bytes,
                        recompute_factor=memory_model.recompute_factor)
    size = DEFAULT_CHUNK
    while size > 1:
        edges = int(size * avg_deg * 4)  # room for hubs above the average degree
        if model.estimate_bytes(BatchShape((LayerShape(size + edges, size, edges),))) <= budget_bytes:
            break
        size //= 2
    return size


def evaluate(model: torch.nn.Module, dataset: Dataset, memory_model: Optional[MemoryModel] = None,
             budget_bytes: Optional[int] = None, device: torch.device | str = "cpu") -> dict[str, float]:
    """Train/valid/test accuracy by full-neighbour layer-wise inference within the budget."""
    chunk = None
    if memory_model is not None:
        chunk = lambda layer: chunk_size_for(dataset, memory_model, layer, budget_bytes)  # noqa: E731
    logits = layerwise_inference(model, dataset.graph, dataset.features, device, chunk)
    return split_accuracy(logits, dataset)
