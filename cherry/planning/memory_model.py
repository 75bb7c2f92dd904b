"""Estimate the peak device bytes of training one micro-batch, and calibrate it on the run.

The estimate is ``fixed_bytes + scale * activation_bytes(shape)``:
- ``fixed_bytes``: what lives for the whole step and does not depend on the micro-batch:
  parameters, their gradients and accumulators, optimizer state, and (if staged) the input features
  of the whole mini-batch. The caller states it (it knows the optimizer and the staging decision).
- ``activation_bytes``: a linear function of the per-layer source/destination/edge counts, whose
  coefficients come from the model's layer widths and aggregator (what forward keeps for backward,
  plus the transient of the backward of the widest layer). It is exact in its *shape* (which counts
  matter) and approximate in its constants.
- ``scale``: calibrated from measured peaks. It starts at 1 and, after each measurement, becomes a
  conservative (high) quantile of the recent measured/analytic ratios, so the planner errs on the
  side of fitting. `error_history` keeps ``(estimated, measured)`` pairs so the estimator reports its
  own error.

Invariant: ``estimate_bytes`` is monotone in every count, so splitting a batch never raises the
estimate of a part above the whole's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from cherry.models.spec import AUTO_LSTM_IMPL, LSTM_IMPLS, resolve_lstm_impl
from cherry.planning.shapes import BatchShape

FLOAT_BYTES = 4
INDEX_BYTES = 8
_WINDOW = 16  # recent measurements used for the calibrated scale


@dataclass(frozen=True)
class LayerCost:
    """Floats kept per source node, per destination node and per edge of one layer."""

    per_src: float
    per_dst: float
    per_edge: float


def layer_costs(layer_dims, fused_aggregation: bool = True, prefetch_inputs: bool = False,
                device_type: str | None = None) -> tuple[LayerCost, ...]:
    """Analytic per-count float costs of each layer (input layer first).

    ``layer_dims`` are `cherry.models.LayerDims`. ``fused_aggregation`` says whether mean/sum/max
    aggregation runs in the native O(destinations x features) kernel; the reference gathers an
    [E, width] message tensor first. ``prefetch_inputs``: the executor's pipeline gathers the next
    micro-batch's input rows while this one computes; micro-batches are balanced, so that is priced as
    a second copy of this one's input rows. ``device_type``: the device the model runs on, which
    decides what an ``"auto"`` LSTM runs (None: price the largest candidate).
    """
    costs = []
    for d in layer_dims:
        agg = d.aggregate_dim
        # layer input gathered for this micro-batch (and the next one's, when prefetched)
        per_src = float(d.in_dim) * (2 if prefetch_inputs else 1) if d.index == 0 else 0.0
        per_edge = 2 * INDEX_BYTES / FLOAT_BYTES  # local CSC indices and destination ids
        gather = 0.0 if fused_aggregation else float(agg)
        out_path = (2 + (0 if d.is_last else 3)) * d.out_dim  # two maps, sum, ReLU, dropout mask
        if d.model == "gat":
            per_src += d.heads * (d.head_dim + 1)  # W h_src and a_l . W h_src
            per_dst = d.heads + d.heads * d.head_dim * (1 if d.is_last else 4)
            per_edge += 4 * d.heads + 2 * d.heads * d.head_dim  # logits, leaky, softmax, messages
        elif d.aggr == "pool":
            per_src += 2.0 * agg  # W_pool h_src and its ReLU
            per_dst = 3.0 * agg + out_path  # max result + int64 arg-max
            per_edge += gather
        elif d.aggr == "lstm":
            per_dst = 2.0 * agg + out_path  # the final hidden states and the zero-filled aggregate
            impl = d.lstm_impl or "auto"
            if impl == "auto" and device_type is not None:
                impl = resolve_lstm_impl(impl, device_type)
            src, dst, edge = lstm_costs(impl, agg)
            per_src, per_dst, per_edge = per_src + src, per_dst + dst, per_edge + edge
        else:  # sage mean, gcn, mlp: narrowing map before aggregation when it is cheaper
            per_src += float(agg) if agg < d.in_dim else 0.0
            per_dst = float(agg) + out_path
            per_edge += gather
        costs.append(LayerCost(per_src, per_dst, per_edge))
    return tuple(costs)


def lstm_costs(lstm_impl: str, width: int) -> tuple[float, float, float]:
    """Floats per source, destination and edge of a SAGE-LSTM aggregation of hidden size ``width``.

    - bucketed (oneDNN per degree) and packed: the neighbours gathered in order, and per step the 4
      gates, c, h and tanh(c) kept for backward (12 per edge and unit); packed adds its gather index (4
      transient int64 vectors over the edges) and the RNN's concatenation of its per-step outputs and
      finished hidden states (2 more);
    - steps (`cherry.models.lstm_steps`): the gate activations (4), c, tanh(c) and h (3) kept per edge,
      the packed edge ids plus 4 transient int64 vectors over the edges; per source the projected
      gates (forward) or their gradient (backward), ``[S, 4H]``, which also bounds the gathered rows
      ``[E, H]`` when it projects edges (it does so only when ``E <= S``); per destination the
      backward's carries and gate scratch (5).
    ``auto`` prices the largest of the implementations it may run (`AUTO_LSTM_IMPL`), per count.
    """
    if lstm_impl == "auto":
        options = [lstm_costs(impl, width) for impl in sorted(set(AUTO_LSTM_IMPL.values()))]
        return tuple(max(c[i] for c in options) for i in range(3))
    index = INDEX_BYTES / FLOAT_BYTES
    if lstm_impl == "steps":
        return 4.0 * width, 5.0 * width, 7.0 * width + 5 * index
    if lstm_impl == "packed":
        return 0.0, 0.0, 12.0 * width + 4 * index + 2.0 * width
    if lstm_impl == "bucketed":
        return 0.0, 0.0, 12.0 * width
    raise ValueError(f"lstm_impl must be one of {LSTM_IMPLS}, got {lstm_impl!r}")


@dataclass
class MemoryModel:
    """Calibrated peak-bytes estimator for one model (mutable: it learns during the run)."""

    costs: tuple[LayerCost, ...]
    fixed_bytes: int = 0
    scale: float = 1.0
    error_history: list[tuple[int, int]] = field(default_factory=list)
    _ratios: list[float] = field(default_factory=list)

    @staticmethod
    def for_model(spec, fixed_bytes: int = 0, fused_aggregation: bool = True,
                  prefetch_inputs: bool = False, device_type: str | None = None) -> "MemoryModel":
        """The analytic model of a `cherry.models.ModelSpec`, uncalibrated (scale 1); ``device_type``
        as in `layer_costs`."""
        costs = layer_costs(spec.layer_dims(), fused_aggregation, prefetch_inputs, device_type)
        return MemoryModel(costs=costs, fixed_bytes=int(fixed_bytes))

    def activation_bytes(self, shape: BatchShape) -> float:
        if len(shape.layers) != len(self.costs):
            raise ValueError(f"batch has {len(shape.layers)} layers, the model has {len(self.costs)}")
        floats = sum(c.per_src * s.num_src + c.per_dst * s.num_dst + c.per_edge * s.num_edges
                     for c, s in zip(self.costs, shape.layers))
        return floats * FLOAT_BYTES

    def estimate_bytes(self, shape: BatchShape) -> int:
        return int(math.ceil(self.fixed_bytes + self.scale * self.activation_bytes(shape)))

    def estimate_bytes_many(self, shapes: torch.Tensor) -> torch.Tensor:
        """`estimate_bytes` of every shape of ``shapes`` (``[..., L, 3]`` counts ``(num_src, num_dst,
        num_edges)`` per layer, input layer first, as `cherry.ops.group_shapes` gives them), ``[...]``
        int64 on the host: the same float64 operations in the same order, so equal value for value."""
        if shapes.dim() < 2 or shapes.shape[-2:] != (len(self.costs), 3):
            raise ValueError(f"shapes must be [..., {len(self.costs)}, 3] (one row per layer), got {tuple(shapes.shape)}")
        counts = shapes.detach().to("cpu", torch.float64)
        floats = 0
        for l, c in enumerate(self.costs):  # left to right, as activation_bytes sums its generator
            s = counts[..., l, :]
            floats = floats + (c.per_src * s[..., 0] + c.per_dst * s[..., 1] + c.per_edge * s[..., 2])
        return torch.ceil(self.fixed_bytes + self.scale * (floats * FLOAT_BYTES)).to(torch.int64)

    def observe(self, shape: BatchShape, measured_peak_bytes: int) -> None:
        """Record a measured peak for ``shape`` and recalibrate the scale."""
        self.error_history.append((self.estimate_bytes(shape), int(measured_peak_bytes)))
        act = self.activation_bytes(shape)
        if act <= 0:
            return
        self._ratios.append(max(0.0, (measured_peak_bytes - self.fixed_bytes) / act))
        recent = sorted(self._ratios[-_WINDOW:])
        # a high quantile of recent ratios: conservative, yet one outlier does not stick forever
        self.scale = max(recent[min(len(recent) - 1, int(0.9 * len(recent)))], 1e-3)

    def observe_oom(self, shape: BatchShape, capacity_bytes: int) -> None:
        """An out-of-memory at ``shape`` proves its true peak exceeds ``capacity_bytes``."""
        act = self.activation_bytes(shape)
        if act > 0:
            needed = (capacity_bytes - self.fixed_bytes) / act
            self.scale = max(self.scale * 1.25, needed * 1.1)
            self._ratios.append(self.scale)

    def relative_errors(self) -> list[float]:
        """|estimated - measured| / measured of every observation, in order."""
        return [abs(e - m) / m for e, m in self.error_history if m > 0]
