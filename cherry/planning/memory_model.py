"""Estimate the peak device bytes of training one micro-batch, and calibrate it on the run.

The estimate is ``fixed_bytes + floor_bytes + scale * activation_bytes(shape)``:
- ``fixed_bytes``: what lives for the whole step and does not depend on the micro-batch:
  parameters, their gradients and accumulators, optimizer state, and (if staged) the input features
  of the whole mini-batch. The caller states it (it knows the optimizer and the staging decision).
- ``floor_bytes``: what every micro-batch costs whatever its size (allocator granularity, index
  buffers, small per-op workspaces): it dominates a tiny micro-batch, so it is modelled apart from the
  per-count terms, or one small micro-batch would inflate the per-count scale.
- ``activation_bytes``: a linear function of the per-layer source/destination/edge counts, whose
  coefficients come from the model's layer widths and aggregator (what forward keeps for backward,
  plus the transient of the backward of the widest layer). It is exact in its *shape* (which counts
  matter) and approximate in its constants. With ``recompute`` (per-layer activation checkpointing)
  forward keeps only each layer's input (``per_src_kept``), and backward holds one layer's
  activations at a time: ``sum(kept) + max(layer less what is kept)``.
- calibration (`observe`): over a window of recent measurements ``(activation, measured - fixed)``,
  ``scale`` is a robust slope (Theil-Sen over pairs of clearly different sizes; the median ratio when
  the sizes are alike). It is raised where the larger half of the window needs more than the smaller
  half's floor leaves, moved by at most ``MAX_STEP`` per measurement and kept in
  ``[MIN_SCALE, MAX_SCALE]``. ``floor_bytes`` then covers every measurement of the window (an upper
  envelope: the planner errs on the side of fitting, and is tight on large and small micro-batches). So one micro-batch moves the scale by a
  bounded factor, and an outlier leaves the window after ``WINDOW`` measurements. An out-of-memory
  (`observe_oom`) is evidence and may raise the scale past those bounds. Recomputed micro-batches
  are priced at ``scale * recompute_factor``: the factor starts at `RECOMPUTE_PRIOR` and is
  calibrated by recomputed measurements only (they leave the plain scale and floor alone).
- the streamed input layer (``stream``, `cherry.execution.stream`): the first layer holds its narrow
  projection ``P`` and one chunk of gathered rows (``stream_chunk_rows``, or the micro-batch's rows
  when fewer) instead of the gathered rows, their dropped copy and the next micro-batch's prefetched rows (the
  first layer's ``per_src_kept`` and ``per_src_prefetch``). Streamed micro-batches are priced with the
  plain calibration but do not calibrate it (`observe`). Their activations are priced at
  ``stream_scale`` times the plain price, plus ``stream_extra_bytes``: a line that is the upper
  envelope of recent streamed measurements (the streamed pass's own transients: its weight gradients,
  a chunk's mask), fitted on them and seeded by streamed probes (`seed_stream`). A model priced by
  probes has streamed costs of its own (``stream_costs``, fitted on streamed probes).
- ``largest_fitted_activation_bytes``: the largest analytic activation of a micro-batch that fitted in
  this run: the planner never refuses a micro-batch no larger than one that fitted;
  ``smallest_failed_seed_bytes``: the smallest single-seed micro-batch that ran out of memory (with and
  without recomputation): the evidence on which the planner refuses.
`error_history` keeps ``(estimated, measured)`` pairs so the estimator reports its own error.

Invariant: ``estimate_bytes`` is monotone in every count, so splitting a batch never raises the
estimate of a part above the whole's.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

import torch

from cherry.models.spec import AUTO_LSTM_IMPL, LSTM_IMPLS, resolve_lstm_impl
from cherry.planning.shapes import BatchShape

FLOAT_BYTES = 4
INDEX_BYTES = 8
WINDOW = 24  # recent measurements the calibration fits
MAX_STEP = 2.0  # one measurement moves the scale by at most this factor
MIN_SCALE, MAX_SCALE = 0.2, 10.0  # calibration alone keeps the analytic model within these factors
_SPREAD = 1.25  # two measurements define a slope only when their activations differ by this factor
# Recomputation's activations are priced at the plain scale times this factor until recomputed
# micro-batches are measured: per-layer backward transients weigh more in one recomputed layer than in
# the whole stack, so with a shared scale recomputation ran ~15% under its estimate (sage-pool, GAT;
# measured/analytic of recomputed over plain micro-batches 1.13-1.25 on synth-tiny, 3 layers, K 1-16;
# 1.26 for SAGE-pool once exact dropout's mask left the plain price: the prior keeps a margin above)
RECOMPUTE_PRIOR = 1.3
RC_WINDOW = 8  # recent recomputed measurements whose upper envelope sets `recompute_factor`


@dataclass(frozen=True)
class LayerCost:
    """Floats kept per source node, per destination node and per edge of one layer."""

    per_src: float
    per_dst: float
    per_edge: float
    per_src_kept: float = 0.0  # floats per source that recomputation keeps: the layer's input row
    per_src_prefetch: float = 0.0  # the part of per_src that is the next micro-batch's prefetched rows


def layer_costs(layer_dims, fused_aggregation: bool = True, prefetch_inputs: bool = False,
                device_type: str | None = None) -> tuple[LayerCost, ...]:
    """Analytic per-count float costs of each layer (input layer first).

    ``layer_dims`` are `cherry.models.LayerDims`; a dropout costs its output only (input dropout: a
    copy of the input rows; hidden dropout: one more row per destination), its mask being recomputed
    rather than kept. ``fused_aggregation`` says whether mean/sum/max
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
        # two maps, then above the last layer: sum, ReLU and, with dropout, its output (the exact
        # dropout stores no mask: cherry.ops.node_dropout recomputes it in backward)
        out_path = (2 + (0 if d.is_last else 2 + (1 if d.dropout > 0 else 0))) * d.out_dim
        if d.model == "gat":
            # W h_src and a_l . W h_src; and in backward one more [S, H, F] beside z's gradient: the
            # gradients of z through the scores, summed into it (without it, K = 1 of a GAT on
            # synth-products' hubs peaked 19% above its first, uncalibrated estimate)
            per_src += d.heads * (d.head_dim + 1) + d.heads * d.head_dim
            # above the last layer four more rows, and dropout's output with dropout (no mask is kept)
            per_dst = d.heads + d.heads * d.head_dim * (1 if d.is_last else 4 + (1 if d.dropout > 0 else 0))
            # logits, leaky, softmax: O(heads) per edge. The weighted sum runs in the fused attention
            # aggregation (native or chunked reference), which holds no [E, heads, head_dim] messages.
            per_edge += 4 * d.heads
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
        prefetch = float(d.in_dim) if prefetch_inputs and d.index == 0 else 0.0
        # input dropout holds a dropped copy of the gathered rows (this micro-batch's only), which
        # is the first layer's input: recomputation keeps it too
        dropped = float(d.in_dim) if d.input_dropout > 0 else 0.0
        costs.append(LayerCost(per_src + dropped, per_dst, per_edge, float(d.in_dim) + dropped, prefetch))
    return tuple(costs)


def lstm_costs(lstm_impl: str, width: int) -> tuple[float, float, float]:
    """Floats per source, destination and edge of a SAGE-LSTM aggregation of hidden size ``width``.

    - bucketed (oneDNN per degree) and packed: the neighbours gathered in order, and per step the 4
      gates, c, h and tanh(c) kept for backward (12 per edge and unit); packed adds its gather index (4
      transient int64 vectors over the edges) and the RNN's concatenation of its per-step outputs and
      finished hidden states (2 more);
    - steps (`cherry.models.lstm_steps`): per edge, the gate activations (4), c, tanh(c) and h (3)
      kept, the packed edge ids plus 4 transient int64 vectors over the edges. Per source, the
      projected gates (forward) or their gradient (backward), ``[S, 4H]``; this also bounds the
      gathered rows ``[E, H]`` when it projects edges (it does so only when ``E <= S``). Per
      destination, the backward's carries and gate scratch (5).
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
    """Calibrated peak-bytes estimator for one model (mutable: it learns during the run).

    Public methods (stable for other estimators that hook in): `for_model`, `activation_bytes`,
    `estimate_bytes`, `estimate_bytes_many`, `observe`, `observe_oom`, `relative_errors`,
    `with_recompute`, `snapshot`, `has_fitted`, `has_failed`.
    """

    costs: tuple[LayerCost, ...]
    fixed_bytes: int = 0
    scale: float = 1.0
    floor_bytes: int = 0
    recompute: bool = False
    recompute_factor: float = RECOMPUTE_PRIOR  # recomputation's scale over ``scale`` (module docstring)
    stream: bool = False  # price the streamed input layer (module docstring)
    stream_chunk_rows: int = 0  # rows of one streamed chunk (gathered, and dropped with input dropout)
    stream_costs: tuple = ()  # per-layer costs of streamed micro-batches, where measured apart (probes)
    stream_scale: float = 1.0  # streamed micro-batches' activations over their plain price (module docstring)
    stream_extra_bytes: float = 0.0  # and what they hold besides (the line's intercept)
    largest_fitted_activation_bytes: float = 0.0
    smallest_failed_seed_bytes: dict = field(default_factory=dict)  # recompute? -> activation of a seed that ran out
    error_history: list[tuple[int, int]] = field(default_factory=list)
    _samples: list[tuple[float, float]] = field(default_factory=list)  # (activation, measured - fixed)
    _rc_samples: list[tuple[float, float]] = field(default_factory=list)  # the same, recomputed micro-batches
    _st_samples: list[tuple[float, float]] = field(default_factory=list)  # streamed: (price, measured - fixed - floor)
    _st_probes: list[tuple[float, float]] = field(default_factory=list)  # the same, of streamed probes (kept)
    _measured: bool = False  # whether the run has measured a micro-batch (seeded samples are not the run's)
    probed: bool = False  # priced by probes measured on this device at the run's sizes (`memory_probe`)

    @staticmethod
    def for_model(spec, fixed_bytes: int = 0, fused_aggregation: bool = True,
                  prefetch_inputs: bool = False, device_type: str | None = None) -> "MemoryModel":
        """The analytic model of a `cherry.models.ModelSpec`, uncalibrated (scale 1); ``device_type``
        as in `layer_costs`."""
        costs = layer_costs(spec.layer_dims(), fused_aggregation, prefetch_inputs, device_type)
        return MemoryModel(costs=costs, fixed_bytes=int(fixed_bytes))

    def without_prefetch(self) -> "MemoryModel":
        """This model (same calibration, shared history) for a micro-batch with no next one to prefetch
        (K = 1): its input rows are held once, not twice."""
        if not any(c.per_src_prefetch for c in self.costs):
            return self
        return dataclasses.replace(self, costs=tuple(
            dataclasses.replace(c, per_src=c.per_src - c.per_src_prefetch, per_src_prefetch=0.0) for c in self.costs))

    def with_recompute(self, recompute: bool = True) -> "MemoryModel":
        """This model (same calibration, shared history) pricing per-layer recomputation or not."""
        return dataclasses.replace(self, recompute=recompute)

    def with_stream(self, stream: bool = True) -> "MemoryModel":
        """This model (same calibration, shared history) pricing the streamed input layer or not."""
        return dataclasses.replace(self, stream=stream)

    @property
    def active_costs(self) -> tuple[LayerCost, ...]:
        """The per-layer costs priced: with ``stream``, the first layer holds no gathered rows."""
        if not self.stream:
            return self.costs
        if self.stream_costs:
            return self.stream_costs
        first = self.costs[0]
        rows = first.per_src_kept + first.per_src_prefetch
        streamed = dataclasses.replace(first, per_src=max(first.per_src - rows, 0.0), per_src_kept=0.0,
                                       per_src_prefetch=0.0)
        return (streamed,) + self.costs[1:]

    def _chunk_floats(self, num_src):
        """Floats of the streamed chunk of a micro-batch of ``num_src`` input rows (an int or a float64
        tensor of them): 0 unless streamed."""
        if not self.stream:
            return 0
        rows = num_src.clamp(max=self.stream_chunk_rows) if isinstance(num_src, torch.Tensor) else \
            min(num_src, self.stream_chunk_rows)
        return rows * self.costs[0].per_src_kept

    @property
    def stream_saves(self) -> bool:
        """Whether streaming the input layer prices below the plain layer (the first layer holds rows)."""
        return self.costs[0].per_src_kept > 0

    def snapshot(self, fixed_bytes: int | None = None) -> "MemoryModel":
        """A frozen-in-time copy (for planning on another thread), with ``fixed_bytes`` if given."""
        return dataclasses.replace(self, fixed_bytes=self.fixed_bytes if fixed_bytes is None else int(fixed_bytes),
                                   error_history=[], _samples=list(self._samples),
                                   _rc_samples=list(self._rc_samples), _st_samples=list(self._st_samples),
                                   _st_probes=list(self._st_probes),
                                   smallest_failed_seed_bytes=dict(self.smallest_failed_seed_bytes))

    def _layer_floats(self, shape: BatchShape) -> list[float]:
        if len(shape.layers) != len(self.costs):
            raise ValueError(f"batch has {len(shape.layers)} layers, the model has {len(self.costs)}")
        return [c.per_src * s.num_src + c.per_dst * s.num_dst + c.per_edge * s.num_edges
                for c, s in zip(self.active_costs, shape.layers)]

    def activation_bytes(self, shape: BatchShape, recompute: bool | None = None) -> float:
        """Analytic activation bytes of ``shape``, with recomputation if ``recompute`` (None: the
        model's own setting)."""
        layers = self._layer_floats(shape)
        chunk = self._chunk_floats(shape.layers[0].num_src) * FLOAT_BYTES
        if not (self.recompute if recompute is None else recompute):
            return sum(layers) * FLOAT_BYTES + chunk
        kept = [c.per_src_kept * s.num_src for c, s in zip(self.active_costs, shape.layers)]
        return (sum(kept) + max(_internal(layers, kept))) * FLOAT_BYTES + chunk

    def scale_for(self, recompute: bool | None = None) -> float:
        """The calibrated scale of plain (or, with ``recompute``, recomputed) micro-batches, times
        `stream_scale` when streamed; None: the model's own setting."""
        return self.scale * (self.recompute_factor if (self.recompute if recompute is None else recompute) else 1.0) \
            * (self.stream_scale if self.stream else 1.0)

    def estimate_bytes(self, shape: BatchShape, recompute: bool | None = None) -> int:
        return int(math.ceil(self.fixed_bytes + self.floor_bytes + self._stream_extra()
                             + self.scale_for(recompute) * self.activation_bytes(shape, recompute)))

    def _stream_extra(self) -> float:
        return self.stream_extra_bytes if self.stream else 0.0

    def seed_stream(self, samples: list[tuple[float, float]], probes: bool = False) -> None:
        """Set the streamed window to ``samples`` (its last `RC_WINDOW`), ``(plain-scaled activation
        bytes, measured bytes above the fixed ones and the floor)`` of streamed micro-batches (with
        ``probes``: the streamed probes', which stay for the whole run: they span the sizes, the run's
        own micro-batches are alike). `stream_scale` and `stream_extra_bytes` become the line that is
        the upper envelope of both: the least-squares slope (1 from one point; kept in [0.5, 4]), its
        intercept the least that covers every sample."""
        kept = [(float(x), float(y)) for x, y in samples if x > 0]
        if probes:
            self._st_probes = kept
        else:
            self._st_samples = kept[-RC_WINDOW:]
        points = self._st_probes + self._st_samples
        if not points:
            return
        xs, ys = [x for x, _ in points], [y for _, y in points]
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        spread = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread > 0 else 1.0
        self.stream_scale = min(max(slope, 0.5), 4.0)
        # below zero where the slope is steeper than the samples' origin (no lower than pricing the
        # smallest sample at nothing): a steep line through the origin would overprice one seed
        self.stream_extra_bytes = max([-self.stream_scale * min(xs)] + [y - self.stream_scale * x
                                                                         for x, y in points])

    def estimate_bytes_many(self, shapes: torch.Tensor) -> torch.Tensor:
        """`estimate_bytes` of every shape of ``shapes`` (``[..., L, 3]`` counts ``(num_src, num_dst,
        num_edges)`` per layer, input layer first, as `cherry.ops.group_shapes` gives them), ``[...]``
        int64 on the host: the same float64 operations in the same order, so equal value for value."""
        if shapes.dim() < 2 or shapes.shape[-2:] != (len(self.costs), 3):
            raise ValueError(f"shapes must be [..., {len(self.costs)}, 3] (one row per layer), got {tuple(shapes.shape)}")
        counts = shapes.detach().to("cpu", torch.float64)
        floats = 0
        per_layer, kept = [], 0
        costs = self.active_costs
        for l, c in enumerate(costs):  # left to right, as activation_bytes sums its generator
            s = counts[..., l, :]
            layer = c.per_src * s[..., 0] + c.per_dst * s[..., 1] + c.per_edge * s[..., 2]
            floats = floats + layer
            per_layer.append(layer)
            kept = kept + c.per_src_kept * s[..., 0]
        if self.recompute:
            kept_rows = [c.per_src_kept * counts[..., l, 0] for l, c in enumerate(costs)]
            floats = kept + torch.stack(_internal(per_layer, kept_rows)).amax(0)
        chunk = self._chunk_floats(counts[..., 0, 0]) * FLOAT_BYTES
        return torch.ceil(self.fixed_bytes + self.floor_bytes + self._stream_extra()
                          + self.scale_for() * (floats * FLOAT_BYTES + chunk)).to(torch.int64)

    @property
    def is_calibrated(self) -> bool:
        """Whether a measured peak of this run has entered the model (plain or recomputed)."""
        return self._measured or bool(self._rc_samples)

    def seed_samples(self, samples: list[tuple[float, float]]) -> None:
        """Start the calibration window with ``samples``, ``(activation, bytes above the fixed ones)``
        measured before the run (a probe's): the floor covers them, and the run's own measurements
        push them out of the window like any other. They are not the run's: the model stays
        uncalibrated (`is_calibrated`) until the run measures."""
        self._samples = [(float(x), float(y)) for x, y in samples if x > 0][-WINDOW:]
        if self._samples:
            self._refit_floor()

    def has_fitted(self, shape: BatchShape) -> bool:
        """Whether a micro-batch at least as large as ``shape`` (by analytic activation) fitted."""
        return 0 < self.activation_bytes(shape, False) <= self.largest_fitted_activation_bytes

    def has_failed(self, shape: BatchShape) -> bool:
        """Whether a single-seed micro-batch no larger than ``shape`` (same recomputation setting as
        this model) ran out of memory in this run: evidence that ``shape`` cannot fit."""
        failed = self.smallest_failed_seed_bytes.get(self.recompute)
        return failed is not None and self.activation_bytes(shape) >= failed

    def observe(self, shape: BatchShape, measured_peak_bytes: int, recompute: bool = False,
                prefetched: bool = True, stream: bool = False) -> None:
        """Record a measured peak for ``shape`` (run with recomputation if ``recompute``) and
        recalibrate (see module docstring): a recomputed micro-batch calibrates `recompute_factor`
        only (an upper envelope of its measured over its plain-scaled estimate, over the last
        `RC_WINDOW`, moved by at most `MAX_STEP`), so that both ways share the plain scale and floor."""
        priced = self if prefetched else self.without_prefetch()  # (K = 1: nothing was prefetched)
        priced = priced.with_stream(stream) if priced.stream != stream else priced
        estimate = priced.estimate_bytes(shape, recompute)
        self.error_history.append((estimate, int(measured_peak_bytes)))
        act = priced.activation_bytes(shape, recompute)
        if stream and act > 0:  # the streamed line's window (module docstring)
            price = priced.scale_for(recompute) / priced.stream_scale * act
            held = float(measured_peak_bytes - self.fixed_bytes - self.floor_bytes)
            self.seed_stream(self._st_samples + [(price, held)])
        if act <= 0 or stream:
            # a streamed micro-batch holds none of the input rows, whose real cost (a gather's
            # transients) the plain scale must learn: calibrated down by it, the plain plan looked cheap
            # after a streamed step and overran (Flickr at half the K = 1 peak: 1.04 of the budget). The
            # streamed line above learns what streamed micro-batches hold instead (a run that streams
            # from its first step: Amazon-Computers GAT at a tenth of its K = 1 peak)
            return
        if recompute:  # calibrates recomputation's factor only: the plain scale and floor stay
            self._rc_samples.append((act, max(0.0, float(measured_peak_bytes - self.fixed_bytes))))
            del self._rc_samples[:-RC_WINDOW]
            f = self.recompute_factor
            ratio = max((y - self.floor_bytes) / (self.scale * x) for x, y in self._rc_samples)
            self.recompute_factor = min(max(ratio, f / MAX_STEP, 0.5), f * MAX_STEP, 4.0)
            return
        self.largest_fitted_activation_bytes = max(self.largest_fitted_activation_bytes, act)
        self._measured = True
        # below zero where the fixed bytes over-count (a gradient the peak did not hold): the floor
        # then goes below zero, or an over-counted fixed part would keep every estimate above the run
        self._samples.append((act, float(measured_peak_bytes - self.fixed_bytes)))
        del self._samples[:-WINDOW]
        low, high = max(MIN_SCALE, self.scale / MAX_STEP), min(MAX_SCALE, self.scale * MAX_STEP)
        high = max(high, low)
        scale = min(max(_robust_slope(self._samples), low), high)
        # tight at both ends: the smaller half of the window sets the floor, the larger half may
        # then raise the scale (within the step's bound) so that the floor need not cover it
        middle = sorted(x for x, _ in self._samples)[(len(self._samples) - 1) // 2]
        floor = max([-float(self.fixed_bytes)] + [y - scale * x for x, y in self._samples if x <= middle])
        cover = max([scale] + [(y - floor) / x for x, y in self._samples if x > middle])
        self.scale = min(cover, high)
        self._refit_floor()

    def observe_oom(self, shape: BatchShape, capacity_bytes: int, recompute: bool = False,
                    stream: bool = False) -> None:
        """An out-of-memory at ``shape`` proves its true peak exceeds ``capacity_bytes``: the estimate
        of ``shape`` becomes at least 10% above it, by the scale (evidence may pass the bounds). The
        point does not enter the window: as an upper envelope's point, one huge failed micro-batch (a
        hub's seed) would lift the floor of every micro-batch to the capacity. A single seed's failure
        is kept as evidence (`has_failed`). ``stream``: the micro-batch streamed its input layer."""
        act = self.with_stream(stream).activation_bytes(shape, recompute)
        if act <= 0:
            return
        if shape.num_seeds == 1:
            known = self.smallest_failed_seed_bytes.get(recompute, math.inf)
            self.smallest_failed_seed_bytes[recompute] = min(known, act)
        needed = 1.1 * capacity_bytes - self.fixed_bytes
        if recompute:
            self.recompute_factor = max(self.recompute_factor * 1.25,
                                        (needed - self.floor_bytes) / (self.scale * act))
            return
        self.scale = max(self.scale * 1.25, (needed - self.floor_bytes) / act)

    def _refit_floor(self) -> None:
        """The least floor covering every sample of the window; below zero down to ``-fixed_bytes``
        (the fixed part over-counted), never below that (an estimate is at least its activations)."""
        self.floor_bytes = int(math.ceil(max([-float(self.fixed_bytes)]
                                             + [y - self.scale * x for x, y in self._samples])))

    def relative_errors(self) -> list[float]:
        """|estimated - measured| / measured of every observation, in order."""
        return [abs(e - m) / m for e, m in self.error_history if m > 0]


def _internal(layers: list, kept: list) -> list:
    """Per layer, what its backward holds under recomputation besides the kept inputs: its own floats
    (recomputed; the input layer's less its input rows, which are kept) and, above the input layer,
    the gradient of its input (as large as that kept input). Floats or float64 tensors alike."""
    out = []
    for l, total in enumerate(layers):
        rest = total - kept[0] if l == 0 else total + kept[l]
        out.append(rest.clamp(min=0.0) if isinstance(rest, torch.Tensor) else max(rest, 0.0))
    return out


def _robust_slope(samples: list[tuple[float, float]]) -> float:
    """Theil-Sen slope of ``(x, y)`` over pairs whose x differ by ``_SPREAD`` or more; without such a
    pair, the median of ``y / x`` (sizes alike: slope and floor cannot be told apart)."""
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(samples) for x2, y2 in samples[i + 1:]
              if max(x1, x2) >= _SPREAD * min(x1, x2)]
    if not slopes:
        slopes = [y / x for x, y in samples]
    return statistics.median(slopes)
