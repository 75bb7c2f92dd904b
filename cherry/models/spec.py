"""`ModelSpec`: the frozen description of a model, and `LayerDims`, its per-layer shape.

A spec is what travels between stages (config -> planner -> executor); `build_model` turns it into an
``nn.Module``. `ModelSpec.layer_dims()` is the planner's view of the model: for each layer, the widths it
reads, aggregates and writes, the aggregator kind and the number of attention heads, enough for a memory
model to price a layer without building it.

Width conventions (DGL's and PyG's): ``hidden`` is the width of each hidden representation, except for
GAT, where it is the width *per head* and hidden layers concatenate ``heads`` heads (``heads * hidden``
wide); the last GAT layer averages its heads into ``num_classes``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

MODELS = ("sage", "gcn", "gat", "mlp")
SAGE_AGGREGATORS = ("mean", "pool", "lstm")
LSTM_IMPLS = ("auto", "packed", "bucketed", "steps")
# What "auto" runs on each device type: the fastest measured there (`cherry bench engine --lstm-impl
# bucketed,packed,steps`). cuDNN runs a variable-length pack in one call; on the CPU torch's packed LSTM
# misses oneDNN's fast path, and the explicit step loop beat the bucketed oneDNN calls (docs/training.md).
AUTO_LSTM_IMPL = {"cuda": "packed", "cpu": "steps"}


def resolve_lstm_impl(lstm_impl: str, device_type: str) -> str:
    """The implementation ``lstm_impl`` runs on a ``device_type`` device ("auto" resolved)."""
    if lstm_impl not in LSTM_IMPLS:
        raise ValueError(f"lstm_impl must be one of {LSTM_IMPLS}, got {lstm_impl!r}")
    if lstm_impl != "auto":
        return lstm_impl
    return AUTO_LSTM_IMPL.get(device_type, "packed")


def _check_positive_int(name: str, value: object) -> None:
    # bool is an int subclass; True as a layer count is a config mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True)
class LayerDims:
    """Shape of one layer, as the memory model needs it.

    ``aggregate_dim`` is the width of the per-edge / per-destination tensors the aggregation works on
    (for SAGE-mean and GCN the linear map is applied before aggregation when it narrows the rows, as in
    DGL, so the aggregated width is ``min(in_dim, out_dim)``). ``heads`` is 1 except for GAT, whose
    per-edge attention tensors are ``[E, heads]`` (its messages, ``[E, heads, head_dim]``, are never held:
    the fused `cherry.ops.attention_aggregate_block` sums them per destination).
    ``dropout`` is the probability of the dropout on the layer's output (0 for the last layer) and
    ``input_dropout`` that of the dropout on its input (the input layer's features only).
    """

    index: int
    model: str
    aggr: Optional[str]
    in_dim: int
    out_dim: int
    aggregate_dim: int
    heads: int
    head_dim: int
    is_last: bool
    lstm_impl: Optional[str] = None
    dropout: float = 0.0
    input_dropout: float = 0.0


@dataclass(frozen=True)
class ModelSpec:
    """What model to build.

    - ``model``: ``"sage"``, ``"gcn"``, ``"gat"`` or ``"mlp"`` (features-only baseline).
    - ``aggr``: SAGE aggregator ``"mean"``, ``"pool"`` or ``"lstm"``; ``None`` means ``"mean"`` for SAGE
      and must stay ``None`` for every other model.
    - ``in_dim``, ``hidden``, ``num_classes``, ``num_layers``: widths and depth (``num_layers >= 1``;
      with one layer ``hidden`` is unused). A graph model needs ``Blocks`` with ``num_layers`` layers.
    - ``heads``: attention heads (GAT only; ignored by other models).
    - ``dropout``: probability in ``[0, 1)``, applied after the ReLU between layers, never after the last.
    - ``input_dropout``: probability in ``[0, 1)``, applied to the input features (exact: per node id).
    - ``model`` may also be a name registered with `cherry.models.register_model`; the memory model
      prices such a layer like a SAGE-mean layer of its widths until the run calibrates it.
    - ``lstm_impl``: how the SAGE-LSTM aggregator runs (ignored by other models). ``"packed"``: one
      packed-sequence LSTM call per layer, destinations sorted by degree, no host sync.
      ``"bucketed"``: one call per distinct in-degree; reads degrees back. ``"steps"``: an explicit
      loop of ``max degree`` steps, one GEMM for all input projections (`cherry.models.lstm_steps`).
      ``"auto"`` (the default): the fastest measured on the device, `AUTO_LSTM_IMPL` (packed on a
      GPU, steps on the CPU). All compute the same function and gradients.
    """

    model: str
    in_dim: int
    hidden: int
    num_classes: int
    num_layers: int
    aggr: Optional[str] = None
    heads: int = 4
    dropout: float = 0.0
    lstm_impl: str = "auto"
    input_dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.lstm_impl not in LSTM_IMPLS:
            raise ValueError(f"lstm_impl must be one of {LSTM_IMPLS}, got {self.lstm_impl!r}")
        if self.model not in MODELS:
            from cherry.models.registry import known_models

            if self.model not in known_models():
                raise ValueError(f"model must be one of {known_models()} (or a name registered with "
                                 f"cherry.models.register_model), got {self.model!r}")
        if self.model == "sage":
            if self.aggr is None:
                object.__setattr__(self, "aggr", "mean")
            elif self.aggr not in SAGE_AGGREGATORS:
                raise ValueError(f"aggr must be one of {SAGE_AGGREGATORS} for sage, got {self.aggr!r}")
        elif self.aggr is not None:
            raise ValueError(f"aggr is only for model 'sage'; got aggr={self.aggr!r} for model {self.model!r}")
        for name in ("in_dim", "hidden", "num_classes", "num_layers", "heads"):
            _check_positive_int(name, getattr(self, name))
        for key in ("dropout", "input_dropout"):
            p = getattr(self, key)
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
                raise ValueError(f"{key} must be a number in [0, 1), got {p!r}")
            object.__setattr__(self, key, float(p))

    @property
    def uses_graph(self) -> bool:
        """False for the MLP baseline, which reads only the seeds' own features."""
        return self.model != "mlp"

    def layer_dims(self) -> tuple[LayerDims, ...]:
        """Per-layer widths, input layer first (see `LayerDims`)."""
        heads = self.heads if self.model == "gat" else 1
        dims = []
        in_dim = self.in_dim
        for index in range(self.num_layers):
            is_last = index == self.num_layers - 1
            head_dim = self.num_classes if is_last else self.hidden
            # Hidden GAT layers concatenate heads; the last averages them.
            out_dim = head_dim if (is_last or heads == 1) else heads * head_dim
            dims.append(
                LayerDims(
                    index=index,
                    model=self.model,
                    aggr=self.aggr,
                    in_dim=in_dim,
                    out_dim=out_dim,
                    aggregate_dim=self._aggregate_dim(in_dim, head_dim, heads),
                    heads=heads,
                    head_dim=head_dim,
                    is_last=is_last,
                    lstm_impl=self.lstm_impl if self.aggr == "lstm" else None,
                    dropout=0.0 if is_last else self.dropout,
                    input_dropout=self.input_dropout if index == 0 else 0.0,
                )
            )
            in_dim = out_dim
        return tuple(dims)

    def _aggregate_dim(self, in_dim: int, out_dim: int, heads: int) -> int:
        if self.model == "gat":
            return heads * out_dim
        if self.model == "gcn" or (self.model == "sage" and self.aggr == "mean"):
            return min(in_dim, out_dim)
        if self.model == "mlp":
            return 0
        return in_dim  # pool: max over ReLU(W_pool h) of width in_dim; lstm: hidden size in_dim
