"""`register_model`: a user's model under a name that run specs, the CLI and the workflow accept.

Two forms (`docs/library.md` states the layer contract):

- ``register_model("gin", layer=make_layer)``: ``make_layer(dims)`` gets a `cherry.models.LayerDims`
  (``in_dim``, ``out_dim``, ``index``, ``is_last``, ...) and returns one layer, a module called as
  ``layer(block, h) -> [block.num_dst, out_dim]``. Cherry stacks ``num_layers`` of them in a
  `cherry.models.BlockModel` (ReLU and exact dropout between layers, input dropout before the first),
  so the model gets layer-wise evaluation and everything a built-in model has.
- ``register_model("mine", builder)``: ``builder(model_spec)`` returns the whole model, a module called
  as ``model(blocks, x) -> [blocks.num_seeds, num_classes]``.

A name registered in a module listed in ``$CHERRY_PLUGINS`` (`cherry.plugins`) is known to every process.
"""
from __future__ import annotations

import threading
from typing import Callable, Optional

from torch import nn

BUILTIN_MODELS = ("sage", "gcn", "gat", "mlp")
_BUILDERS: dict[str, tuple[str, Callable]] = {}
_lock = threading.Lock()


def register_model(name: str, builder: Optional[Callable] = None, *, layer: Optional[Callable] = None,
                   replace: bool = False) -> None:
    """Register ``name`` with a whole-model ``builder(model_spec)`` or a ``layer(dims)`` factory."""
    if not isinstance(name, str) or not name or not name[0].isalpha():
        raise ValueError(f"model name must be a str starting with a letter, got {name!r}")
    if name in BUILTIN_MODELS:
        raise ValueError(f"model name {name!r} is built in; choose another name")
    if (builder is None) == (layer is None):
        raise TypeError("register_model needs exactly one of builder (whole model) or layer= (one layer)")
    factory = builder if builder is not None else layer
    if not callable(factory):
        raise TypeError(f"the builder of model {name!r} must be callable, got {type(factory).__name__}")
    with _lock:
        if name in _BUILDERS and not replace and _BUILDERS[name][1] is not factory:
            raise ValueError(f"model {name!r} is already registered; pass replace=True to replace it")
        _BUILDERS[name] = ("model" if builder is not None else "layer", factory)


def unregister_model(name: str) -> None:
    with _lock:
        _BUILDERS.pop(name, None)


def registered_builder(name: str) -> tuple[str, Callable]:
    """``(kind, factory)`` of registered model ``name``: kind ``"model"`` (factory(spec) -> module) or
    ``"layer"`` (factory(dims) -> one layer, stacked in a `BlockModel` by `cherry.models.build`)."""
    if name not in _BUILDERS:
        known_models()
    return _BUILDERS[name]


def known_models() -> tuple[str, ...]:
    """Built-in names, then registered ones (plugins of ``$CHERRY_PLUGINS`` imported first)."""
    from cherry.plugins import load_plugins

    load_plugins()
    return BUILTIN_MODELS + tuple(_BUILDERS)
