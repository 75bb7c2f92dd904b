"""The streamed input layer: a wrapper of the one model forward that never holds the input rows whole.

With wide input features the largest tensor of a step is the gathered ``x [rows, F]``, which the first
layer's linear map keeps for its weight gradient. A first layer that maps each input row to a narrower
width first (GCN's ``fc``, GAT's ``fc``, SAGE-mean's ``fc_neigh`` and ``fc_self`` when ``in > out``)
needs only ``P = x W^T`` (``[rows, out]``). `streamed(model, source)` computes ``P`` one chunk of rows at
a time (`StreamedProjection`): gather the chunk, apply input dropout's exact mask to it, multiply, keep
``P``. Backward gathers each chunk again, applies the same mask (it is a function of node, column and
step, `cherry.models.dropout`) and accumulates ``dW += dP_chunk^T x_chunk``. No ``[rows, F]`` tensor
exists beyond one chunk; nothing is saved for ``x``, which needs no gradient.

A layer takes part by declaring its input projections: ``input_projections() -> {name: rows}``, the
names of its ``nn.Linear`` children applied to its input rows (``"src"``: all of them) or to its
destination rows (``"dst"``: ``h[:block.num_dst]``), and used nowhere else on the input. The wrapper,
like `cherry.execution.recompute`, never re-implements the model's loop: for the duration of the block
it replaces the model's bound ``forward_input`` (input dropout moves into the chunks), wraps
``forward_layer`` so that layer 0 computes every declared projection in one streamed pass, and makes
each declared ``nn.Linear`` return its ``P``. The model runs on a zero-stride placeholder ``x`` (NaN, so
a use of ``x`` outside a declared projection shows in the loss). Keep the block open over backward: a
recomputed layer 0 (checkpointing, entered inside this block) streams again there.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from cherry.models.dropout import apply_dropout

CHUNK_MAX_BYTES = 4 << 20  # a chunk of gathered rows (Flickr GCN: a step at 39 rows as fast as at 348)
CHUNK_MIN_ROWS = 16  # fewer rows per GEMM would cost more in calls than a small budget saves
CHUNK_BUDGET_SHARE = 32  # a chunk takes at most this fraction of the budget


def chunk_rows(width: int, budget_bytes: Optional[int], element_size: int = 4) -> int:
    """Rows per streamed chunk of ``width`` features: ``budget / 32`` bytes, at most 4 MiB, at least
    `CHUNK_MIN_ROWS` rows."""
    target = CHUNK_MAX_BYTES if budget_bytes is None else min(budget_bytes // CHUNK_BUDGET_SHARE, CHUNK_MAX_BYTES)
    return max(CHUNK_MIN_ROWS, target // max(1, width * element_size))


def input_projections(model: nn.Module) -> dict[str, str]:
    """The input projections layer 0 of ``model`` declares (empty where it declares none or the model
    has no layer units)."""
    layers = getattr(model, "layers", None)
    if not callable(getattr(model, "forward_layer", None)) or not callable(getattr(model, "forward_input", None)) \
            or layers is None or len(layers) == 0:
        return {}
    from cherry.models.base import BlockModel

    if getattr(type(model), "forward_input", None) is not BlockModel.forward_input:
        return {}  # what reads x before layer 0 is unknown: only input dropout moves into the chunks
    declare = getattr(layers[0], "input_projections", None)
    found = dict(declare()) if callable(declare) else {}
    for name, rows in found.items():
        if rows not in ("src", "dst") or not isinstance(getattr(layers[0], name, None), nn.Linear):
            raise ValueError(f"layer 0 ({type(layers[0]).__name__}) declares input projection {name!r}: {rows!r}; "
                             "expected the name of an nn.Linear child mapped to 'src' or 'dst'")
    return found


def can_stream(model: nn.Module) -> bool:
    """Whether ``model``'s first layer declares an input projection that `streamed` can stream."""
    return bool(input_projections(model))


def check_streamable(model: nn.Module) -> None:
    """One-line ValueError, naming the first layer, unless ``model`` can stream its input layer."""
    if can_stream(model):
        return
    layers = getattr(model, "layers", None)
    layer = type(layers[0]).__name__ if layers else type(model).__name__
    raise ValueError(f"stream_inputs='on' needs a first layer that maps its input rows to a narrower width: "
                     f"layer 0 ({layer}) declares no input projection (input_projections()); use 'auto' or 'off'")


@dataclass(frozen=True)
class RowSource:
    """The input rows of one micro-batch, gathered on demand: ``gather(start, stop)`` is rows
    ``[start, stop)`` of ``x`` on the device, ``nodes`` their global ids (dropout's masks)."""

    gather: Callable[[int, int], torch.Tensor]
    nodes: torch.Tensor
    width: int
    chunk_rows: int
    dropout_p: float = 0.0
    step_seed: Optional[int] = None

    @property
    def num_rows(self) -> int:
        return int(self.nodes.numel())

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``[start, stop)`` after input dropout: bit for bit those rows of the dropped ``x``."""
        x = self.gather(start, stop)
        if self.dropout_p > 0.0:
            x = apply_dropout(x, self.nodes[start:stop], self.dropout_p, self.step_seed, -1)
        return x

    def placeholder(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A zero-stride ``[rows, width]`` NaN tensor: what the model's forward receives as ``x``."""
        return torch.full((), float("nan"), dtype=dtype, device=self.nodes.device).expand(self.num_rows, self.width)


class StreamedProjection(torch.autograd.Function):
    """``P_i = x[:rows_i] W_i^T`` for every weight ``W_i``, ``x`` read chunk by chunk from a `RowSource`
    (see module docstring). Differentiable in the weights only."""

    @staticmethod
    def forward(ctx, source: RowSource, rows: tuple[int, ...], *weights: torch.Tensor):
        outs = [w.new_empty((n, w.shape[0])) for w, n in zip(weights, rows)]
        step = source.chunk_rows
        for start in range(0, max(rows), step):
            stop = min(start + step, max(rows))
            x = source.rows(start, stop)
            for w, n, out in zip(weights, rows, outs):
                if start < n:
                    end = min(stop, n)
                    torch.mm(x[: end - start], w.t(), out=out[start:end])
            del x
        ctx.source, ctx.rows = source, rows
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads: Optional[torch.Tensor]):
        source, rows = ctx.source, ctx.rows
        wanted = [ctx.needs_input_grad[2 + i] and g is not None for i, g in enumerate(grads)]
        dws = [g.new_zeros((g.shape[1], source.width)) if want else None for g, want in zip(grads, wanted)]
        last = max([n for n, want in zip(rows, wanted) if want], default=0)
        step = source.chunk_rows
        for start in range(0, last, step):
            stop = min(start + step, last)
            x = source.rows(start, stop)
            for g, n, dw in zip(grads, rows, dws):
                if dw is not None and start < n:
                    end = min(stop, n)
                    dw.addmm_(g[start:end].t(), x[: end - start])
            del x
        return (None, None, *dws)


def _layer_zero(model: nn.Module, source: RowSource, projections: dict[str, str], placeholder: torch.Tensor):
    """The ``forward_layer`` that streams layer 0's projections, and the restorer of what it shadowed."""
    layer = model.layers[0]
    unit = model.forward_layer
    linears = {name: getattr(layer, name) for name in projections}
    computed: dict[str, torch.Tensor] = {}

    def projected(name: str, linear: nn.Linear):
        def forward(h: torch.Tensor) -> torch.Tensor:
            if name not in computed or h.data_ptr() != placeholder.data_ptr() or h.shape[0] != computed[name].shape[0]:
                raise ValueError(f"layer 0 ({type(layer).__name__}) declared {name!r} an input projection of its "
                                 f"{projections[name]} rows, but called it on another tensor ({tuple(h.shape)})")
            out = computed[name]
            return out if linear.bias is None else out + linear.bias
        return forward

    def forward_layer(index, block, h):
        if index == 0:
            counts = tuple(block.num_src if projections[n] == "src" else block.num_dst for n in linears)
            outs = StreamedProjection.apply(source, counts, *(lin.weight for lin in linears.values()))
            computed.update(zip(linears, outs))
            try:
                return unit(index, block, h)
            finally:
                computed.clear()
        return unit(index, block, h)

    for name, linear in linears.items():
        linear.forward = projected(name, linear)

    def restore() -> None:
        for linear in linears.values():
            del linear.forward
    return forward_layer, restore


@contextmanager
def streamed(model: nn.Module, source: RowSource, placeholder: Optional[torch.Tensor] = None) -> Iterator[torch.Tensor]:
    """Inside the block, ``model(blocks, x)`` with ``x`` the yielded placeholder (``placeholder`` if
    given, made by ``source.placeholder()``) streams its input layer from ``source`` (see module
    docstring). ValueError for a model whose first layer declares no projection, or whose input
    dropout is not exact (no step seed in training)."""
    check_streamable(model)
    projections = input_projections(model)
    dropout = model.input_dropout
    p = dropout.p if dropout.training and model.training else 0.0
    if p > 0.0 and dropout.step_seed is None:
        raise ValueError("streamed input layer: input dropout without a step seed draws a fresh mask per call, "
                         "which a re-gather cannot reproduce; set one (cherry.models.dropout.set_dropout_step)")
    source = RowSource(source.gather, source.nodes, source.width, source.chunk_rows, p, dropout.step_seed)
    if placeholder is None:
        placeholder = source.placeholder()
    elif tuple(placeholder.shape) != (source.num_rows, source.width) or any(placeholder.stride()):
        raise ValueError(f"placeholder must be a zero-stride [{source.num_rows}, {source.width}] tensor "
                         f"(RowSource.placeholder()), got {tuple(placeholder.shape)}")
    saved = {key: model.__dict__[key] for key in ("forward_input", "forward_layer") if key in model.__dict__}
    forward_layer, restore = _layer_zero(model, source, projections, placeholder)
    model.forward_input = lambda blocks, x: x  # input dropout runs on each chunk instead
    model.forward_layer = forward_layer
    try:
        yield placeholder
    finally:
        restore()
        for key in ("forward_input", "forward_layer"):
            model.__dict__.pop(key, None)
        model.__dict__.update(saved)
