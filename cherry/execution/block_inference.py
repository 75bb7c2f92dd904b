"""Evaluation of a model that has no layer-wise form (a user's ``model(blocks, x)``, DGL, PyG).

Built-in models and `BlockModel` stacks are evaluated layer by layer (`cherry.models.inference`). A
whole-model module only offers ``model(blocks, x)``, so its evaluation samples ``num_layers``-hop
full-neighbour blocks (fanout -1 at every layer) for chunks of the evaluated nodes and runs the model
on them in eval mode: the same full-neighbour logits, at the cost of recomputing shared neighbours.
"""
from __future__ import annotations

import torch

from cherry.data.metrics import split_accuracy
from cherry.sampling import NeighborSampler

DEFAULT_SEEDS_PER_CHUNK = 1024


@torch.no_grad()
def evaluate_blocks(model: torch.nn.Module, dataset, num_layers: int, device: torch.device | str = "cpu",
                    seeds_per_chunk: int = DEFAULT_SEEDS_PER_CHUNK) -> dict[str, float]:
    """Train/valid/test accuracy of ``model`` with full neighbourhoods over ``num_layers`` hops."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be an int >= 1, got {num_layers!r}")
    nodes = torch.cat([dataset.train_idx, dataset.valid_idx, dataset.test_idx])
    sampler = NeighborSampler(dataset.graph, [-1] * num_layers)
    logits = None
    was_training = model.training
    model.eval()
    try:
        for start in range(0, nodes.numel(), seeds_per_chunk):
            seeds = nodes[start:start + seeds_per_chunk]
            blocks = sampler.sample(seeds, torch.Generator())
            x = dataset.features.index_select(0, blocks.input_nodes).to(device)
            out = model(blocks.to(device), x).float().cpu()
            if logits is None:
                logits = torch.zeros(dataset.graph.num_nodes, out.shape[1])
            logits[seeds] = out
    finally:
        model.train(was_training)
    return split_accuracy(logits, dataset)
