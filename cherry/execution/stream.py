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

An adapted model (`from_dgl`, `from_pyg`) has no ``forward_layer``: its adapter names its first stock
layer and that layer's projections (``input_layer()``, `cherry.interop.projections`). The wrapper
shadows that module's ``forward``: called on the placeholder, it computes the projections in one
streamed pass and runs the stock forward with them returning ``P`` (a ``GraphConv`` runs on ``P`` with
its weight hidden). An `ExactDropout` called on the whole placeholder (the model's input dropout)
returns it unchanged and the chunks are dropped by its mask instead, bit for bit. Called on another
tensor (a transform before it), the layer raises and marks the model not streamable, since it would
read a copy of ``x`` the chunks cannot reproduce.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from cherry.execution.chunk_pipeline import chunk_ranges
from cherry.execution.chunk_pipeline import chunks as pipelined
from cherry.models.dropout import apply_dropout

CHUNK_MAX_BYTES = 4 << 20  # a chunk of gathered rows (Flickr GCN: a step at 39 rows as fast as at 348)
CHUNK_MIN_ROWS = 16  # fewer rows per GEMM would cost more in calls than a small budget saves
CHUNK_BUDGET_SHARE = 32  # a chunk takes at most this fraction of the budget
_NOT_READ = "_cherry_input_not_streamed"  # set on an adapted model whose layer 0 did not read x: why


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


def adapter_input_layer(model: nn.Module):
    """An adapted model's (`cherry.interop`) layer 0 and its projections (``InputLayer``), or None and
    the reason; None and "" for a model that is no adapter."""
    find = getattr(model, "input_layer", None)
    if not callable(find) or not callable(getattr(model, "layer_graphs", None)):
        return None, ""
    if model.__dict__.get(_NOT_READ, False):
        return None, model.__dict__[_NOT_READ]
    return find()


def can_stream(model: nn.Module) -> bool:
    """Whether ``model``'s first layer declares an input projection that `streamed` can stream."""
    return bool(input_projections(model)) or adapter_input_layer(model)[0] is not None


def stream_width(model: nn.Module) -> int:
    """The width of the rows a streamable ``model`` streams."""
    layer, _ = adapter_input_layer(model)
    if layer is not None:
        return layer.width
    return getattr(model.layers[0], next(iter(input_projections(model)))).in_features


def check_streamable(model: nn.Module) -> None:
    """One-line ValueError, naming the first layer, unless ``model`` can stream its input layer."""
    if can_stream(model):
        return
    layer, why = adapter_input_layer(model)
    if why:
        raise ValueError(f"stream_inputs='on' needs a first layer that maps its input rows to a narrower width: "
                         f"layer 0 ({why}) does not; use 'auto' or 'off'")
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
    copy_stream: Optional["torch.cuda.Stream"] = None  # gathers there, beside the GEMMs (`chunk_pipeline`)
    dropout_layer: int = -1  # the mask's layer (`apply_dropout`): -1 is a Cherry model's input dropout

    @property
    def num_rows(self) -> int:
        return int(self.nodes.numel())

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``[start, stop)`` after input dropout: bit for bit those rows of the dropped ``x``."""
        return self._dropped(self.gather(start, stop), start, stop)

    def chunks(self, num_rows: int) -> Iterator[tuple[int, int, torch.Tensor]]:
        """``(start, stop, rows(start, stop))`` for the chunks of the first ``num_rows`` rows, in order;
        with a copy stream each chunk's gather overlaps the use of the one before
        (`cherry.execution.chunk_pipeline`), and dropout runs on the compute stream."""
        ranges = chunk_ranges(num_rows, self.chunk_rows)
        for start, stop, x in pipelined(self.gather, ranges, self.copy_stream):
            yield start, stop, self._dropped(x, start, stop)
            del x

    def _dropped(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        if self.dropout_p > 0.0:
            x = apply_dropout(x, self.nodes[start:stop], self.dropout_p, self.step_seed, self.dropout_layer)
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
        for start, stop, x in source.chunks(max(rows)):
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
        for start, stop, x in source.chunks(last):
            for g, n, dw in zip(grads, rows, dws):
                if dw is not None and start < n:
                    end = min(stop, n)
                    dw.addmm_(g[start:end].t(), x[: end - start])
            del x
        return (None, None, *dws)


def _projected(layer: str, name: str, linear: nn.Module, computed: dict, placeholder: torch.Tensor):
    """A forward for ``linear`` returning its streamed ``P`` (rows of the placeholder it is called on:
    all of ``P``'s or a prefix of them), plus its bias."""
    def forward(h: torch.Tensor) -> torch.Tensor:
        if name not in computed or not _is_placeholder(h, placeholder) or h.shape[0] > computed[name].shape[0]:
            raise ValueError(f"layer 0 ({layer}) declared {name!r} an input projection of its input rows, "
                             f"but called it on another tensor ({tuple(h.shape)})")
        out = computed[name]
        out = out if h.shape[0] == out.shape[0] else out[: h.shape[0]]
        return out if linear.bias is None else out + linear.bias
    return forward


def _is_placeholder(h, placeholder: torch.Tensor) -> bool:
    """Whether ``h`` is the placeholder or a prefix of its rows (what a layer's input rows are)."""
    return isinstance(h, torch.Tensor) and h.dim() == 2 and h.data_ptr() == placeholder.data_ptr() \
        and h.shape[1] == placeholder.shape[1] and h.shape[0] <= placeholder.shape[0] and not any(h.stride())


def _shadow(linears: dict, layer: str, computed: dict, placeholder: torch.Tensor) -> Callable[[], None]:
    """Make each of ``linears`` return its streamed ``P``; the restorer."""
    for name, linear in linears.items():
        linear.forward = _projected(layer, name, linear, computed, placeholder)

    def restore() -> None:
        for linear in linears.values():
            del linear.forward
    return restore


def _layer_zero(model: nn.Module, source: RowSource, projections: dict[str, str], placeholder: torch.Tensor):
    """The ``forward_layer`` that streams layer 0's projections, and the restorer of what it shadowed."""
    layer = model.layers[0]
    unit = model.forward_layer
    linears = {name: getattr(layer, name) for name in projections}
    computed: dict[str, torch.Tensor] = {}

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

    return forward_layer, _shadow(linears, type(layer).__name__, computed, placeholder)


def _dropout_into_chunks(model: nn.Module, placeholder: torch.Tensor, source: RowSource, cell: list):
    """Make each `ExactDropout` of ``model`` called on the whole placeholder return it unchanged and
    put its mask into ``cell[0]`` (``source`` dropping those rows, chunk by chunk, as it would have);
    any other call runs as before. The restorer."""
    from cherry.models.exact_dropout import ExactDropout

    shadowed = [m for m in model.modules() if isinstance(m, ExactDropout) and "forward" not in m.__dict__]

    def shadow(module):
        original = module.forward

        def forward(h, nodes=None, layer=0):
            if nodes is None and cell[0] is None and module.training and module.p > 0 \
                    and module.step_seed is not None and _is_placeholder(h, placeholder) \
                    and h.shape[0] == source.num_rows:
                ids, mask_layer = module.mask_of(h.shape[0])
                cell[0] = dataclasses.replace(source, nodes=ids, dropout_p=module.p, step_seed=module.step_seed,
                                              dropout_layer=mask_layer)
                return h
            return original(h, nodes, layer)
        return forward

    for module in shadowed:
        module.forward = shadow(module)

    def restore() -> None:
        for module in shadowed:
            del module.forward
    return restore


def _adapter_zero(model: nn.Module, source: RowSource, layer, placeholder: torch.Tensor):
    """Shadow an adapted model's layer 0 (an ``InputLayer``) so that it streams its projections when
    called on the placeholder, its input dropout (an `ExactDropout` on ``x``) applied to each chunk;
    the restorer, which raises where no call did."""
    module, computed, calls, blocks, dropped = layer.module, {}, [0], [None], [None]
    original = module.forward
    names = tuple(layer.projections) if layer.matmul is None else (layer.matmul,)

    def weight(name: str) -> torch.Tensor:
        return getattr(module, name).weight if layer.matmul is None else getattr(module, name).t()

    def forward(*args, **kwargs):
        values = [v for a in (*args, *kwargs.values()) for v in (a if isinstance(a, (tuple, list)) else (a,))]
        if not any(_is_placeholder(v, placeholder) and v.shape[0] == source.num_rows for v in values):
            why = f"{layer.label} is called on a tensor other than the model's input x (a dropout or transform " \
                  "before it), so its input rows cannot stream"
            model.__dict__[_NOT_READ] = why
            raise ValueError(f"streamed input layer: layer 0 ({why}); set stream_inputs to 'off'")
        calls[0] += 1
        block = blocks[0].layers[0]
        rows = tuple(block.num_dst if layer.projections.get(n) == "dst" else block.num_src for n in names)
        outs = StreamedProjection.apply(dropped[0] or source, rows, *(weight(n) for n in names))
        if layer.matmul is None:
            computed.update(zip(names, outs))
            try:
                return original(*args, **kwargs)
            finally:
                computed.clear()
        # the module runs on P with its weight hidden: its other branch, the same function
        swap = lambda v: outs[0] if _is_placeholder(v, placeholder) and v.shape[0] == source.num_rows else v
        args = tuple(tuple(swap(v) for v in a) if isinstance(a, tuple) else swap(a) for a in args)
        kwargs = {k: tuple(swap(v) for v in a) if isinstance(a, tuple) else swap(a) for k, a in kwargs.items()}
        saved = module._parameters[layer.matmul]
        module._parameters[layer.matmul] = None
        try:
            return original(*args, **kwargs)
        finally:
            module._parameters[layer.matmul] = saved

    forward.cherry_unit = True  # recomputation may checkpoint it (`cherry.execution.recompute`)
    module.forward = forward
    hook = model.register_forward_pre_hook(lambda _, args: blocks.__setitem__(0, args[0]))
    restore_linears = _shadow({n: getattr(module, n) for n in layer.projections}, layer.label, computed,
                              placeholder)
    restore_dropouts = _dropout_into_chunks(model, placeholder, source, dropped)

    def restore(failed: bool) -> None:
        hook.remove()
        restore_dropouts()
        restore_linears()
        del module.forward
        if not calls[0] and not failed:
            raise ValueError(f"streamed input layer: layer 0 ({layer.label}) never ran on the model's input x; "
                             "set stream_inputs to 'off'")
    return restore


@contextmanager
def streamed(model: nn.Module, source: RowSource, placeholder: Optional[torch.Tensor] = None) -> Iterator[torch.Tensor]:
    """Inside the block, ``model(blocks, x)`` with ``x`` the yielded placeholder (``placeholder`` if
    given, made by ``source.placeholder()``) streams its input layer from ``source`` (see module
    docstring). ValueError for a model whose first layer declares no projection, or whose input
    dropout is not exact (no step seed in training)."""
    check_streamable(model)
    projections = input_projections(model)
    adapted, _ = adapter_input_layer(model)
    dropout = getattr(model, "input_dropout", None) if adapted is None else None  # an adapter's: in its model
    p = dropout.p if dropout is not None and dropout.training and model.training else 0.0
    if p > 0.0 and dropout.step_seed is None:
        raise ValueError("streamed input layer: input dropout without a step seed draws a fresh mask per call, "
                         "which a re-gather cannot reproduce; set one (cherry.models.dropout.set_dropout_step)")
    source = dataclasses.replace(source, dropout_p=p, step_seed=dropout.step_seed if dropout is not None else None)
    if placeholder is None:
        placeholder = source.placeholder()
    elif tuple(placeholder.shape) != (source.num_rows, source.width) or any(placeholder.stride()):
        raise ValueError(f"placeholder must be a zero-stride [{source.num_rows}, {source.width}] tensor "
                         f"(RowSource.placeholder()), got {tuple(placeholder.shape)}")
    if adapted is not None:
        restore, failed = _adapter_zero(model, source, adapted, placeholder), True
        try:
            yield placeholder
            failed = False
        finally:
            restore(failed)
        return
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
