"""Recomputation as a wrapper of the one model forward.

`recomputed(model)` runs ``model(blocks, x)``, the same forward as every other path, with each of its
layer units under activation checkpointing (`torch.utils.checkpoint`, non-reentrant): forward keeps
only each unit's inputs, backward recomputes one unit at a time. The wrapper never re-implements the
model's loop, so nothing the model does before, between or after its units can be skipped.

Layer units, by model kind:

- a model with ``forward_layer(index, block, h)`` (`cherry.models.BlockModel`: built-in models and
  registered layers): that bound method, replaced for the call by an instance attribute. A unit is
  the layer with the activation and dropout that follow it.
- any other model (`from_dgl`, `from_pyg`, a whole registered model): the outermost descendant
  modules called with one layer's graph as an argument, each one's ``forward`` replaced for the call.
  One layer's graph is a `Block` of the `Blocks` the model is called with, or an item of what the
  model's ``layer_graphs(blocks)`` returned in the call (the adapters: DGL blocks; PyG hops and their
  ``edge_index``). So a ``dgl.nn.GATConv`` called as ``conv(blocks[l], h)`` is a unit, and so is a
  user's module wrapping it; the ReLU or dropout the model applies between them is not.

Exact: a unit is recomputed in the node-row context its forward ran in
(`cherry.models.exact_dropout.node_rows_replay`), so `ExactDropout` draws the same masks, and with the
torch RNG state its forward saw (``preserve_rng_state``), so a dropout drawing from torch's generator
draws the same mask too. A call that ran no unit raises ValueError after its forward (recomputing
nothing would be silent) and marks the model: `can_recompute` is False for it from then on.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

import torch
from torch.utils.checkpoint import checkpoint

from cherry.models.exact_dropout import node_rows_replay
from cherry.sampling.blocks import Blocks

_NO_UNITS = "_cherry_no_layer_units"  # set on a model whose forward ran no unit under `recomputed`


def _units_of(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose units run: a DDP wrapper's module (its forward calls that module's)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _has_forward_layer(model: torch.nn.Module) -> bool:
    return callable(getattr(model, "forward_layer", None)) and hasattr(getattr(model, "spec", None), "num_layers")


def model_name(model: torch.nn.Module) -> str:
    """The model's class name, with the wrapped model's for an adapter (``DGLModel(Net)``)."""
    inner = getattr(model, "inner", None)
    return f"{type(model).__name__}({type(inner).__name__})" if isinstance(inner, torch.nn.Module) \
        else type(model).__name__


def can_recompute(model: torch.nn.Module) -> bool:
    """Whether ``model`` may run layer units that `recomputed` can checkpoint (module docstring): a
    ``forward_layer`` model, an adapter, or a whole model with modules of its own (Cherry's MLP has no
    per-layer graph). False once a recomputed call of it ran no unit. A DDP wrapper: its module's."""
    model = _units_of(model)
    if model.__dict__.get(_NO_UNITS, False):
        return False
    if _has_forward_layer(model) or callable(getattr(model, "layer_graphs", None)):
        return True
    from cherry.models.mlp import MLP

    return not isinstance(model, MLP) and any(True for _ in model.children())


def no_units_error(model: torch.nn.Module) -> ValueError:
    return ValueError(f"model {model_name(model)} has no layer unit to recompute: recomputation needs a "
                      "forward_layer(index, block, h) or modules called with one layer's block (DGL block, PyG "
                      "hop's edge_index, Cherry Block); set options.recompute to 'off' or 'auto'")


@contextmanager
def recomputed(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` whose forward checkpoints each layer unit until the block exits (see module
    docstring). Raises ValueError for a model without layer units."""
    if not can_recompute(model):
        raise no_units_error(_units_of(model))
    target, calls = _units_of(model), [0]
    with (_forward_layer_units if _has_forward_layer(target) else _module_units)(target, calls):
        yield model
    if calls[0] == 0:  # a forward that loops its layers itself would silently recompute nothing
        target.__dict__[_NO_UNITS] = True
        raise no_units_error(target)


@contextmanager
def _forward_layer_units(model: torch.nn.Module, calls: list) -> Iterator[None]:
    unit = model.forward_layer  # the bound method the model's forward would call

    def checkpointed(index, block, h):
        calls[0] += 1
        return checkpoint(unit, index, block, h, use_reentrant=False)

    model.forward_layer = checkpointed  # an instance attribute shadows the method for this call only
    try:
        yield
    finally:
        del model.forward_layer


@contextmanager
def _module_units(model: torch.nn.Module, calls: list) -> Iterator[None]:
    graphs: dict[int, object] = {}  # id -> one layer's graph of this call (held, so the ids stay theirs)

    def record(objects) -> None:
        for graph in objects:
            graphs[id(graph)] = graph
            edge_index = getattr(graph, "edge_index", None)  # a PyG hop: its convs take the edge_index
            if isinstance(edge_index, torch.Tensor):
                graphs[id(edge_index)] = edge_index

    def record_blocks(module, args):
        if args and isinstance(args[0], Blocks):
            record(args[0].layers)

    handle = model.register_forward_pre_hook(record_blocks)
    adapter = callable(getattr(model, "layer_graphs", None))
    if adapter:
        convert = model.layer_graphs

        def layer_graphs(blocks):
            out = convert(blocks)
            record(out)
            return out

        model.layer_graphs = layer_graphs
    inside = [False]  # a unit's own submodules run inside it, never as units of their own
    wrapped = []
    for module in model.modules():
        own = module.__dict__.get("forward")  # the streamed input layer's shadow is a unit too
        if module is model or (own is not None and not getattr(own, "cherry_unit", False)) \
                or isinstance(module, torch.jit.ScriptModule):
            continue  # (a scripted module's forward cannot be shadowed; one the user shadowed stays theirs)
        module.forward = _unit_forward(module.forward, graphs, inside, calls)
        wrapped.append((module, own))
    try:
        yield
    finally:
        for module, own in wrapped:
            del module.forward
            if own is not None:
                module.forward = own
        if adapter:
            del model.layer_graphs
        handle.remove()


def _unit_forward(forward: Callable, graphs: dict, inside: list, calls: list) -> Callable:
    """``forward`` checkpointed when called, outside another unit, with one layer's graph."""
    def unit(*args, **kwargs):
        inside[0] = True
        try:
            return forward(*args, **kwargs)
        finally:
            inside[0] = False

    def run(*args, **kwargs):
        if inside[0] or not any(graphs.get(id(a)) is a for a in (*args, *kwargs.values())):
            return forward(*args, **kwargs)
        calls[0] += 1
        replay = node_rows_replay()
        return checkpoint(unit, *args, use_reentrant=False, preserve_rng_state=True,
                          context_fn=lambda: (nullcontext(), replay()), **kwargs)

    return run
