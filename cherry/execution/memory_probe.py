"""Memory costs of any model, measured: fit per-node and per-edge bytes from probe micro-batches.

The analytic memory model (`cherry.planning.memory_model`) knows Cherry's own layers. For a model it
cannot price (a registered layer, a whole-model module, a DGL or PyG model) `probe_costs` runs one
forward + backward (no optimizer step, no gradient kept) on each of a few probe batches of different
shapes. The probes are sampled from the training seeds with a generator of their own (the run's
random streams are untouched). It measures the peak bytes each one allocates (the tensor tracker on
the CPU, the allocator's peak on a GPU). A batch's activation bytes are modelled as ``a * nodes + b * edges``
(``nodes`` = sources + destinations over all layers, ``edges`` = edges over all layers); the probes
differ in seed count and fanout, so their node/edge ratios differ and ``a`` and ``b`` are
identifiable; the non-negative least-squares fit becomes every layer's `LayerCost`.

The interface to the memory model is one function, `with_probed_costs`: it returns the given
`MemoryModel` with the fitted costs (same fixed bytes, scale 1), which the run then calibrates on its
own measured peaks like any other.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from cherry.models.dropout import set_dropout_step
from cherry.planning import MemoryModel
from cherry.planning.memory_model import FLOAT_BYTES, LayerCost
from cherry.sampling import NeighborSampler


@dataclass(frozen=True)
class ProbeFit:
    """Fitted bytes per node slot and per edge, and the probes behind them ``(nodes, edges, bytes)``."""

    bytes_per_node: float
    bytes_per_edge: float
    probes: tuple[tuple[int, int, int], ...]

    def predict_bytes(self, nodes: int, edges: int) -> float:
        return self.bytes_per_node * nodes + self.bytes_per_edge * edges


def _counts(blocks) -> tuple[int, int]:
    return (sum(b.num_src + b.num_dst for b in blocks.layers), sum(b.num_edges for b in blocks.layers))


def _peak_of_step(model, blocks, features, labels, device) -> int:
    """Peak bytes allocated by one forward + backward of ``model`` on ``blocks`` (inputs included)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        x = features.index_select(0, blocks.input_nodes.to(features.device)).to(device)
        y = labels.index_select(0, blocks.seeds.to(labels.device)).to(device)
        loss = F.cross_entropy(model(blocks.to(device), x), y)
        torch.autograd.grad(loss, params, allow_unused=True)
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    from cherry.memory.tracker import TensorMemoryTracker

    with TensorMemoryTracker() as tracker:
        x = features.index_select(0, blocks.input_nodes)
        y = labels.index_select(0, blocks.seeds)
        loss = F.cross_entropy(model(blocks, x), y)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        del loss, grads, x, y
        return int(tracker.peak_bytes)


def probe_costs(model: torch.nn.Module, dataset, fanouts: Sequence[int], batch_size: int,
                device: torch.device | str = "cpu", seed: int = 0) -> ProbeFit:
    """Fit bytes per node and per edge of ``model`` from three probe batches (module docstring):
    a quarter and half of ``batch_size`` seeds at ``fanouts``, and a quarter at half the fanouts."""
    device = torch.device(device)
    fanouts = list(fanouts)
    half = [max(1, f // 2) if f > 0 else 2 for f in fanouts]
    n = dataset.train_idx.numel()
    quarter, halfb = max(4, min(n, batch_size) // 4), max(8, min(n, batch_size) // 2)
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)
    seeds = dataset.train_idx[torch.randperm(n, generator=gen)]
    plan = [(seeds[:quarter], fanouts), (seeds[:halfb], fanouts), (seeds[:quarter], half)]
    rng_state = torch.get_rng_state()
    was_training = model.training
    model.train()
    set_dropout_step(model, 0)  # exact dropout draws from node ids, not from torch's generator
    probes = []
    try:
        for batch_seeds, f in plan:
            blocks = NeighborSampler(dataset.graph, f).sample(batch_seeds, torch.Generator().manual_seed(seed))
            nodes, edges = _counts(blocks)
            probes.append((nodes, edges, _peak_of_step(model, blocks, dataset.features, dataset.labels, device)))
    finally:
        set_dropout_step(model, None)
        model.train(was_training)
        torch.set_rng_state(rng_state)
    a, b = _fit_nonnegative(probes)
    return ProbeFit(a, b, tuple(probes))


def _fit_nonnegative(probes) -> tuple[float, float]:
    """Least squares ``bytes = a * nodes + b * edges`` with ``a, b >= 0`` (two unknowns: try the joint
    fit, else each alone, and keep the feasible one with the least error)."""
    A = np.array([[p[0], p[1]] for p in probes], dtype=np.float64)
    y = np.array([p[2] for p in probes], dtype=np.float64)
    candidates = []
    joint, *_ = np.linalg.lstsq(A, y, rcond=None)
    if (joint >= 0).all():
        candidates.append((float(joint[0]), float(joint[1])))
    for col in (0, 1):
        v = A[:, col]
        coef = float(v @ y / (v @ v)) if v @ v > 0 else 0.0
        candidates.append((max(coef, 0.0), 0.0) if col == 0 else (0.0, max(coef, 0.0)))
    return min(candidates, key=lambda c: float(np.sum((A @ np.array(c) - y) ** 2)))


def with_probed_costs(memory_model: MemoryModel, fit: ProbeFit) -> MemoryModel:
    """``memory_model`` pricing every layer with the fitted costs (the one hook into the memory model)."""
    per_node, per_edge = fit.bytes_per_node / FLOAT_BYTES, fit.bytes_per_edge / FLOAT_BYTES
    costs = tuple(LayerCost(per_src=per_node, per_dst=per_node, per_edge=per_edge) for _ in memory_model.costs)
    return dataclasses.replace(memory_model, costs=costs, scale=1.0, error_history=[], _samples=[])


def needs_probe(model: torch.nn.Module) -> bool:
    """Whether the analytic model cannot price ``model``: anything but a built-in Cherry model."""
    from cherry.models.base import BlockModel
    from cherry.models.mlp import MLP
    from cherry.models.registry import BUILTIN_MODELS

    from cherry.models import GATConv, GCNConv, SAGEConv

    if isinstance(model, MLP):
        return False
    return not (isinstance(model, BlockModel) and model.spec.model in BUILTIN_MODELS
                and all(isinstance(layer, (SAGEConv, GCNConv, GATConv)) for layer in model.layers))


def optional_probe(model, dataset, spec, memory_model: MemoryModel, device) -> Optional[MemoryModel]:
    """The probed memory model of a run with automatic K whose model needs one, else None. A probe that
    runs out of memory (an emulated capacity) leaves the analytic costs in place."""
    if spec.num_microbatches is not None or not needs_probe(model) or not spec.fanouts:
        return None
    try:
        fit = probe_costs(model, dataset, spec.fanouts, spec.batch_size, device, spec.seed)
    except torch.OutOfMemoryError:
        return None
    return with_probed_costs(memory_model, fit)
