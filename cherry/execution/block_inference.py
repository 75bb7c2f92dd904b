"""Evaluation of a model that has no layer-wise form (a user's ``model(blocks, x)``, DGL, PyG).

Built-in models and `BlockModel` stacks are evaluated layer by layer (`cherry.models.inference`). A
whole-model module only offers ``model(blocks, x)``, so its evaluation samples ``num_layers``-hop
full-neighbour blocks (fanout -1 at every layer) for chunks of the evaluated nodes and runs the model
on them in eval mode: the same full-neighbour logits, at the cost of recomputing shared neighbours.
Chunks are halved until the memory model prices them within the budget.
"""
from __future__ import annotations

from typing import Optional

import torch

from cherry import progress
from cherry.data.metrics import split_accuracy
from cherry.planning import BatchShape
from cherry.sampling import NeighborSampler

DEFAULT_SEEDS_PER_CHUNK = 1024


@torch.no_grad()
def evaluate_blocks(model: torch.nn.Module, dataset, num_layers: int, device: torch.device | str = "cpu",
                    seeds_per_chunk: int = DEFAULT_SEEDS_PER_CHUNK, memory_model=None,
                    budget_bytes: Optional[int] = None) -> dict[str, float]:
    """Train/valid/test accuracy of ``model`` with full neighbourhoods over ``num_layers`` hops.

    With ``memory_model`` and ``budget_bytes`` a chunk whose blocks are estimated above the budget is
    halved until it fits (or holds one seed), so evaluation runs within the training budget."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be an int >= 1, got {num_layers!r}")
    nodes = torch.cat([dataset.train_idx, dataset.valid_idx, dataset.test_idx])
    sampler = NeighborSampler(dataset.graph, [-1] * num_layers)
    logits = None
    was_training = model.training
    model.eval()
    pending = [nodes[i:i + seeds_per_chunk] for i in range(0, nodes.numel(), seeds_per_chunk)][::-1]
    shown = progress.start("evaluate", nodes.numel(), "node")
    try:
        while pending:
            seeds = pending.pop()
            blocks = sampler.sample(seeds, torch.Generator())
            if (memory_model is not None and budget_bytes is not None and seeds.numel() > 1
                    and memory_model.estimate_bytes(BatchShape.of(blocks)) > budget_bytes):
                half = seeds.numel() // 2
                pending += [seeds[half:], seeds[:half]]
                continue
            x = dataset.features.index_select(0, blocks.input_nodes).to(device)
            out = model(blocks.to(device), x).float().cpu()
            if logits is None:
                logits = torch.zeros(dataset.graph.num_nodes, out.shape[1])
            logits[seeds] = out
            shown.advance(seeds.numel())
    finally:
        shown.close()
        model.train(was_training)
    return split_accuracy(logits, dataset)
