"""Recomputation's price for a model priced by probes (`cherry.execution.memory_probe`).

The analytic model prices Cherry's own layers under recomputation from their widths (kept inputs plus
one layer's activations, times `RECOMPUTE_PRIOR`). A probe-priced model's fitted costs are per node
and per edge alike in every layer, and what its layer units keep is unknown. Its recomputed peak is
therefore measured: `with_probed_recompute` runs one forward + backward under `recomputed` on each of
two probe batches (half the batch at the run's fanouts, a quarter at half the fanouts; sampled with a
generator of their own, the run's random streams untouched). It sets the memory model's
``recompute_factor`` to the least-squares ratio (through the origin) of the measured peaks to the
fitted model's recomputed activation bytes. The run then calibrates that factor on its own recomputed micro-batches, as for any model.

Where the plain probes ran out of memory (a budget below one seed's plain peak, which is where
recomputation is needed), the recomputed ones, smaller, may still fit: the factor then scales the
analytic recomputed price of the run's model spec to the measured peaks.

The same probe finds whether the model has layer units at all: one that runs none is marked
(`cherry.execution.recompute.can_recompute` is then False), so the planner never chooses
recomputation for it and ``options.recompute: on`` is refused before training.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from cherry.execution.memory_probe import _peak_of_step
from cherry.execution.recompute import can_recompute, recomputed
from cherry.models.dropout import set_dropout_step
from cherry.planning import BatchShape, MemoryModel
from cherry.sampling import NeighborSampler

_FACTOR_RANGE = (0.5, 4.0)  # the bounds the run's calibration keeps `recompute_factor` in


def recomputed_peaks(model: torch.nn.Module, dataset, fanouts: Sequence[int], batch_size: int,
                     device: torch.device | str = "cpu", seed: int = 0) -> list[tuple[BatchShape, int]]:
    """``(shape, peak bytes)`` of one recomputed forward + backward of ``model`` on each probe batch
    (module docstring). ValueError when the model runs no layer unit (it is marked)."""
    device = torch.device(device)
    fanouts = list(fanouts)
    half = [max(1, f // 2) if f > 0 else 2 for f in fanouts]
    n = dataset.train_idx.numel()
    quarter, halfb = max(4, min(n, batch_size) // 4), max(8, min(n, batch_size) // 2)
    gen = torch.Generator().manual_seed(seed ^ 0x2EC0)
    seeds = dataset.train_idx[torch.randperm(n, generator=gen)]
    rng_state = torch.get_rng_state()
    was_training = model.training
    model.train()
    set_dropout_step(model, 0)
    peaks = []
    try:
        for batch_seeds, f in ((seeds[:halfb], fanouts), (seeds[:quarter], half)):
            blocks = NeighborSampler(dataset.graph, f).sample(batch_seeds, torch.Generator().manual_seed(seed))
            with recomputed(model):
                peak = _peak_of_step(model, blocks, dataset.features, dataset.labels, device)
            peaks.append((BatchShape.of(blocks), peak))
    finally:
        set_dropout_step(model, None)
        model.train(was_training)
        torch.set_rng_state(rng_state)
    return peaks


def with_probed_recompute(memory_model: MemoryModel, model: torch.nn.Module, dataset, spec,
                          device: torch.device | str = "cpu") -> MemoryModel:
    """``memory_model`` with ``recompute_factor`` measured on ``model`` (module docstring), for a run of
    automatic K whose model the analytic costs cannot price (as `optional_probe` decides).
    ``memory_model`` is the probe-priced one, or the analytic one where the plain probes ran out of
    memory (a budget below one seed's plain peak): the factor then corrects the analytic recomputed
    price to what recomputation measured. Unchanged for a model without layer units, or when a
    recomputed probe runs out of memory too (the prior holds until recomputed steps are measured)."""
    from cherry.execution.memory_probe import needs_probe

    if spec.num_microbatches is not None or not spec.fanouts or not needs_probe(model) or not can_recompute(model):
        return memory_model
    try:
        peaks = recomputed_peaks(model, dataset, spec.fanouts, spec.batch_size, device, spec.seed)
    except torch.OutOfMemoryError:
        return memory_model
    except ValueError:
        if can_recompute(model):  # not the probe's finding that no layer unit ran (the model is marked then)
            raise
        return memory_model
    # least squares through the origin, as the plain costs are fitted: the larger probe weighs most (a
    # small probe's peak is mostly per-call overhead, which the run's calibrated floor covers)
    points = [(memory_model.scale * memory_model.activation_bytes(shape, recompute=True),
               peak - memory_model.floor_bytes) for shape, peak in peaks]
    norm = sum(x * x for x, _ in points)
    if norm <= 0:
        return memory_model
    low, high = _FACTOR_RANGE
    factor = sum(x * y for x, y in points) / norm
    return dataclasses.replace(memory_model, recompute_factor=min(max(factor, low), high))
