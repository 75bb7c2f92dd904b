"""Memory costs of any model, measured: fit per-node and per-edge bytes from probe micro-batches.

The analytic memory model (`cherry.planning.memory_model`) knows Cherry's own layers. For a model it
cannot price (a registered layer, a whole-model module, a DGL or PyG model) `probe_costs` runs one
forward + backward (no optimizer step, no gradient kept) on each of a few probe batches of different
shapes. The probes are sampled from the training seeds with a generator of their own (the run's
random streams are untouched). It measures the peak bytes each one allocates (the tensor tracker on
the CPU, the allocator's peak on a GPU). A batch's activation bytes are modelled as ``a * nodes + b * edges``
(``nodes`` = sources + destinations over all layers, ``edges`` = edges over all layers); the probes
differ in seed count and fanout, so their node/edge ratios differ and ``a`` and ``b`` are
identifiable; the non-negative least-squares fit becomes every layer's `LayerCost`. A model whose
input layer can stream (`cherry.execution.stream`) is fitted with its gathered input rows as a known
term (``input_row_bytes`` per input row, what streaming removes; twice that where an input dropout
holds a dropped copy of the rows): the memory model then prices the streamed input layer below the
plain one, and ``stream_inputs: auto`` may choose it.

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

from cherry.models.dropout import NodeDropout, set_dropout_step
from cherry.planning import MemoryModel
from cherry.planning.memory_model import FLOAT_BYTES, LayerCost
from cherry.sampling import NeighborSampler


@dataclass(frozen=True)
class ProbeFit:
    """Fitted bytes per micro-batch (``floor_bytes``), per node slot and per edge, and the probes behind
    them ``(nodes, edges, bytes)``. The fit is an upper envelope of its probes: ``predict_bytes`` of
    every probe's counts is at least the bytes it measured."""

    bytes_per_node: float
    bytes_per_edge: float
    probes: tuple[tuple[int, int, int], ...]
    floor_bytes: float = 0.0
    # the known bytes of each gathered input row, left out of the probes' bytes before the fit, and
    # each probe's input rows (in the order of ``probes``)
    input_row_bytes: float = 0.0
    input_rows: tuple[int, ...] = ()

    def predict_bytes(self, nodes: int, edges: int) -> float:
        return self.floor_bytes + self.bytes_per_node * nodes + self.bytes_per_edge * edges


def _counts(blocks) -> tuple[int, int]:
    return (sum(b.num_src + b.num_dst for b in blocks.layers), sum(b.num_edges for b in blocks.layers))


def _peak_of_step(model, blocks, features, labels, device, stream_chunk_rows: int = 0) -> int:
    """Peak bytes allocated by one forward + backward of ``model`` on ``blocks`` (inputs included);
    with ``stream_chunk_rows``, its input layer streamed in chunks of that many rows."""
    params = [p for p in model.parameters() if p.requires_grad]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        _forward_backward(model, blocks.to(device), features, labels, params, device, stream_chunk_rows)
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    from cherry.memory.tracker import TensorMemoryTracker

    with TensorMemoryTracker() as tracker:
        _forward_backward(model, blocks, features, labels, params, device, stream_chunk_rows)
        return int(tracker.peak_bytes)


def _forward_backward(model, blocks, features, labels, params, device, stream_chunk_rows: int) -> None:
    """One forward + backward of ``model`` on ``blocks`` (on ``device``), its gradients dropped."""
    nodes = blocks.input_nodes.to(features.device)
    y = labels.index_select(0, blocks.seeds.to(labels.device)).to(device)
    if not stream_chunk_rows:
        x = features.index_select(0, nodes).to(device)
        torch.autograd.grad(F.cross_entropy(model(blocks, x), y), params, allow_unused=True)
        return
    from cherry.execution.stream import RowSource, streamed

    source = RowSource(lambda start, stop: features.index_select(0, nodes[start:stop]).to(device),
                       blocks.input_nodes.to(device), int(features.shape[1]), int(stream_chunk_rows))
    with streamed(model, source) as x:
        torch.autograd.grad(F.cross_entropy(model(blocks, x), y), params, allow_unused=True)


MAX_PROBES = 12  # probe batches at most (seed counts double from 1, two of them also at half the fanouts)


def probe_costs(model: torch.nn.Module, dataset, fanouts: Sequence[int], batch_size: int,
                device: torch.device | str = "cpu", seed: int = 0,
                limit_bytes: Optional[float] = None, input_row_bytes: float = 0.0) -> ProbeFit:
    """Fit bytes per micro-batch, per node and per edge of ``model`` from probe batches (module
    docstring) at the sizes a run's micro-batches have: 1, 2, 4, ... seeds at ``fanouts`` up to
    ``batch_size``, stopping before a probe the fit so far prices above ``limit_bytes`` (what the
    budget leaves the activations) and after one that measured above it; the two largest seed counts
    are probed again at half the fanouts, so that nodes and edges are told apart. A probe that runs out
    of memory ends the probing (the fit is of those before it; raised if it was the first).
    ``input_row_bytes``: bytes of each gathered input row, fitted as a known term, doubled where a
    dropout runs on the input rows (module docstring)."""
    device = torch.device(device)
    fanouts = list(fanouts)
    half = [max(1, f // 2) if f > 0 else 2 for f in fanouts]
    n = dataset.train_idx.numel()
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)
    seeds = dataset.train_idx[torch.randperm(n, generator=gen)]
    top = max(1, min(n, batch_size))
    sizes = sorted({min(2 ** j, top) for j in range(top.bit_length() + 1)})
    rng_state = torch.get_rng_state()
    was_training = model.training
    model.train()
    set_dropout_step(model, 0)  # exact dropout draws from node ids, not from torch's generator
    probes, done, rows = [], [], []
    dropped = _InputDropout(model, input_row_bytes)

    # the run's fixed bytes count one micro-batch's gradients already: a probe's bytes are its peak
    # less them (counted twice, a wide weight's gradient kept a run at one seed per micro-batch)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)

    def measure(count: int, f) -> int:
        blocks = NeighborSampler(dataset.graph, f).sample(seeds[:count], torch.Generator().manual_seed(seed))
        nodes, edges = _counts(blocks)
        peak = _peak_of_step(model, blocks, dataset.features, dataset.labels, device)
        rows.append(blocks.layers[0].num_src)
        probes.append((nodes, edges, max(peak - grad_bytes - dropped.row_bytes * rows[-1], 0)))
        return peak - grad_bytes

    try:
        try:
            for count in sizes[:MAX_PROBES - 2]:
                if limit_bytes is not None and len(probes) >= 2 and _fit(probes).predict_bytes(
                        *_next_counts(probes)) + 2.0 * dropped.row_bytes * rows[-1] > limit_bytes:
                    break
                bytes_ = measure(count, fanouts)
                done.append(count)
                if limit_bytes is not None and bytes_ > limit_bytes:
                    break
            for count in done[-2:]:
                measure(count, half)
        except torch.OutOfMemoryError:  # the device's capacity stopped the probes: fit those that ran
            if not probes:
                raise
    finally:
        dropped.remove()
        set_dropout_step(model, None)
        model.train(was_training)
        torch.set_rng_state(rng_state)
    return dataclasses.replace(_fit(probes), input_row_bytes=float(dropped.row_bytes), input_rows=tuple(rows))


class _InputDropout:
    """Watches ``model``'s dropouts during the probes: ``row_bytes`` is ``input_row_bytes``, doubled
    once one ran on rows of that many bytes (the input rows: a dropped copy of them is held too)."""

    def __init__(self, model: torch.nn.Module, input_row_bytes: float) -> None:
        self.row_bytes = float(input_row_bytes)
        self._single = float(input_row_bytes)
        self._handles = [m.register_forward_pre_hook(self._seen) for m in model.modules()
                         if isinstance(m, (torch.nn.Dropout, NodeDropout)) and input_row_bytes > 0]

    def _seen(self, module, args) -> None:
        h = args[0] if args else None
        if module.training and module.p > 0 and isinstance(h, torch.Tensor) and h.dim() == 2 \
                and h.shape[1] * h.element_size() == self._single:
            self.row_bytes = 2.0 * self._single

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()



def _next_counts(probes) -> tuple[float, float]:
    """Counts the next probe may have: twice the last one's (the probes at most double their seeds)."""
    nodes, edges, _ = probes[-1]
    return 2.0 * nodes, 2.0 * edges


def _fit(probes) -> ProbeFit:
    """`_fit_nonnegative` of ``probes``, its floor raised until every probe is covered."""
    a, b, floor = _fit_nonnegative(probes)
    floor = max([floor] + [p[2] - a * p[0] - b * p[1] for p in probes])
    return ProbeFit(a, b, tuple(probes), max(floor, 0.0))


def _fit_nonnegative(probes) -> tuple[float, float, float]:
    """Least squares ``bytes = a * nodes + b * edges + floor`` with ``a, b, floor >= 0`` (every subset of
    the three terms is fitted, the feasible fit of least error kept)."""
    A = np.array([[p[0], p[1], 1.0] for p in probes], dtype=np.float64)
    y = np.array([p[2] for p in probes], dtype=np.float64)
    best, best_error = (0.0, 0.0, 0.0), float(np.sum(y ** 2))
    for cols in ((0, 1, 2), (0, 1), (0, 2), (1, 2), (0,), (1,), (2,)):
        sub = A[:, cols]
        coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
        if (coef < 0).any():
            continue
        full = np.zeros(3)
        full[list(cols)] = coef
        error = float(np.sum((A @ full - y) ** 2))
        if error < best_error:
            best, best_error = (float(full[0]), float(full[1]), float(full[2])), error
    return best


def with_probed_costs(memory_model: MemoryModel, fit: ProbeFit) -> MemoryModel:
    """``memory_model`` pricing every layer with the fitted costs and the fit's floor (the one hook
    into the memory model). The probes enter its calibration window as measurements
    (`MemoryModel.seed_samples`): the run's first plans price what the probes measured, and the run's
    own measurements replace them as they arrive, up or down."""
    per_node, per_edge = fit.bytes_per_node / FLOAT_BYTES, fit.bytes_per_edge / FLOAT_BYTES
    costs = [LayerCost(per_src=per_node, per_dst=per_node, per_edge=per_edge) for _ in memory_model.costs]
    row = fit.input_row_bytes / FLOAT_BYTES  # the gathered input row: the input layer keeps it, streaming removes it
    costs[0] = LayerCost(per_src=per_node + row, per_dst=per_node, per_edge=per_edge, per_src_kept=row)
    model = dataclasses.replace(memory_model, costs=tuple(costs), scale=1.0, probed=True,
                                floor_bytes=int(np.ceil(fit.floor_bytes)), error_history=[], _samples=[])
    inputs = fit.input_rows or (0,) * len(fit.probes)
    model.seed_samples([(fit.bytes_per_node * nodes + fit.bytes_per_edge * edges + fit.input_row_bytes * rows,
                         float(measured + fit.input_row_bytes * rows))
                        for (nodes, edges, measured), rows in zip(fit.probes, inputs)])
    return model


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


def optional_probe(model, dataset, spec, memory_model: MemoryModel, device,
                   limit_bytes: Optional[float] = None) -> Optional[MemoryModel]:
    """The probed memory model of a run with automatic K whose model needs one, else None.
    ``limit_bytes``: the plan's limit (the budget less its safety margin), past which no probe grows
    (less the model's fixed bytes: what the activations may use). A probe that runs out of memory
    anyway (an emulated capacity) leaves the analytic costs in place."""
    if spec.num_microbatches is not None or not needs_probe(model) or not spec.fanouts:
        return None
    from cherry.execution.stream import can_stream, stream_width

    room = None if limit_bytes is None else limit_bytes - memory_model.fixed_bytes
    row_bytes = stream_width(model) * dataset.features.element_size() if can_stream(model) else 0.0
    try:
        fit = probe_costs(model, dataset, spec.fanouts, spec.batch_size, device, spec.seed, room, row_bytes)
    except torch.OutOfMemoryError:
        return None
    return with_probed_costs(memory_model, fit)
