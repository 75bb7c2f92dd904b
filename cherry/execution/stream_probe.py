"""The streamed input layer's price for a model priced by probes (`cherry.execution.memory_probe`).

The probe-priced model knows the bytes of the input rows streaming removes, not what the streamed pass
holds instead: its weight gradients, built chunk by chunk, and a chunk's gather and dropout mask.
`with_probed_stream` measures it: one streamed forward + backward on probe batches of 1, 4, 16, ...
seeds at the run's fanouts (sampled with a generator of their own, the run's random streams
untouched), at the run's chunk rows, stopping after one that measured above the room the budget
leaves, and the largest again at half the fanouts. As the plain probes are, they are fitted per node
and per edge (`cherry.execution.memory_probe`): the memory model's streamed costs
(`MemoryModel.stream_costs`). Their peaks against those prices seed its streamed line
(`MemoryModel.seed_stream`); the run's streamed micro-batches then keep it up to date.
"""
from __future__ import annotations

from typing import Optional

import torch

from cherry.execution.memory_probe import _fit, _peak_of_step
from cherry.models.dropout import set_dropout_step
from cherry.planning import BatchShape, MemoryModel
from cherry.planning.memory_model import FLOAT_BYTES, LayerCost
from cherry.sampling import NeighborSampler

MAX_SEEDS_SHIFT = 2  # probe seed counts grow by this power of two: 1, 4, 16, ...


def streamed_probes(model: torch.nn.Module, dataset, spec, device, chunk_rows: int,
                    room_bytes: Optional[float] = None) -> list[tuple[BatchShape, int]]:
    """``(shape, peak less the gradients)`` of each streamed probe (module docstring), smallest first;
    a probe that runs out of memory ends the list."""
    device = torch.device(device)
    n = dataset.train_idx.numel()
    top = max(1, min(n, spec.batch_size))
    gen = torch.Generator().manual_seed(spec.seed ^ 0x57E4)
    seeds = dataset.train_idx[torch.randperm(n, generator=gen)]
    half = [max(1, f // 2) if f > 0 else 2 for f in spec.fanouts]
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    rng_state, was_training = torch.get_rng_state(), model.training
    model.train()
    set_dropout_step(model, 0)
    found, count = [], 1

    def measure(seeds_, fanouts) -> int:
        blocks = NeighborSampler(dataset.graph, list(fanouts)).sample(seeds_, torch.Generator().manual_seed(spec.seed))
        peak = _peak_of_step(model, blocks, dataset.features, dataset.labels, device, chunk_rows) - grad_bytes
        found.append((BatchShape.of(blocks), peak))
        return peak

    try:
        while True:
            peak = measure(seeds[:count], spec.fanouts)
            if count >= top or (room_bytes is not None and peak > room_bytes):
                break
            count = min(top, count << MAX_SEEDS_SHIFT)
        measure(seeds[:count], half)  # another node/edge ratio, so that nodes and edges are told apart
    except torch.OutOfMemoryError:
        pass
    finally:
        set_dropout_step(model, None)
        model.train(was_training)
        torch.set_rng_state(rng_state)
    return found


def with_probed_stream(memory_model: MemoryModel, model: torch.nn.Module, dataset, spec, device,
                       chunk_rows: int, limit_bytes: Optional[float] = None) -> MemoryModel:
    """``memory_model`` (changed in place and returned) streaming in chunks of ``chunk_rows`` rows, with
    streamed costs of its own fitted on streamed probes (module docstring), which also seed its
    streamed line (`MemoryModel.seed_stream`). Only for a run of automatic K whose model is priced by
    probes and can stream, where streaming prices below the plain layer; ``limit_bytes``: the plan's
    limit, past which no probe grows. Unchanged for a model whose first streamed probe finds its layer 0
    reading something other than ``x`` (it is marked: `auto` never streams it)."""
    from cherry.execution.stream import can_stream

    if spec.num_microbatches is not None or not spec.fanouts or not memory_model.probed \
            or not can_stream(model) or not memory_model.stream_saves:
        return memory_model
    memory_model.stream_chunk_rows = int(chunk_rows)
    room = None if limit_bytes is None else limit_bytes - memory_model.fixed_bytes
    try:
        found = streamed_probes(model, dataset, spec, device, chunk_rows, room)
    except ValueError:
        if can_stream(model):  # not the probe's finding that layer 0 does not read x (the model is marked)
            raise
        return memory_model
    if not found:
        return memory_model
    counts = [(sum(l.num_src + l.num_dst for l in shape.layers), sum(l.num_edges for l in shape.layers), peak)
              for shape, peak in found]
    fit = _fit(counts)
    per_node, per_edge = fit.bytes_per_node / FLOAT_BYTES, fit.bytes_per_edge / FLOAT_BYTES
    memory_model.stream_costs = tuple(LayerCost(per_node, per_node, per_edge) for _ in memory_model.costs)
    priced = memory_model.with_stream(True).with_recompute(False)
    memory_model.seed_stream([(priced.scale * priced.activation_bytes(shape), float(peak - priced.floor_bytes))
                              for shape, peak in found], probes=True)
    return memory_model
